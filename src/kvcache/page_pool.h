// The KV page pool: which of the cache's fixed-size pages are free and who holds the others.
//
// A page is `page_size` token slots in every layer's K and V tensors
// ([num_pages, page_size, num_kv_heads, head_dim] per layer, owned by the model). The pool is
// host-side bookkeeping only: it never touches device memory and never waits on the device.
//
// Page lifecycle (the prefix cache, kvcache/prefix_cache.h, is what keeps pages "cached"):
//   free --allocate--> held (refcount 1) --retain/release--> held (refcount n)
//   held --release to refcount 0--> free           (a page nobody will ask for again)
//   held --release to refcount 0--> cached         (a full page whose contents a cache has
//                                                   published; still valid, evictable)
//   cached --retain--> held                        (a cache hit)
//   cached --evict--> free                         (the cache reuses it when the free list is empty)
// A page is `cached` only while the owner of the cache has marked it so (mark_cacheable); the pool
// counts cached pages separately so that free + cached + held == num_pages always holds.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace fg {

// Exact accounting, all counts in pages.
struct PagePoolStats {
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t free = 0;    // on the free list
  int64_t held = 0;    // refcount > 0
  int64_t cached = 0;  // refcount 0, contents kept for reuse (evictable)
  int64_t peak_held = 0;
  int64_t allocations = 0;  // pages handed out by allocate() since creation
  int64_t evictions = 0;    // cached pages turned free to satisfy an allocation
};

class PagePool {
 public:
  // Called when a cached page is evicted (so its owner can forget the page's key).
  class EvictionListener {
   public:
    virtual ~EvictionListener() = default;
    virtual void on_evict(int32_t page) = 0;
  };

  PagePool(int32_t num_pages, int32_t page_size);

  int32_t num_pages() const { return num_pages_; }
  int32_t page_size() const { return page_size_; }
  // Pages allocate() can hand out right now (free plus evictable cached pages).
  int32_t num_available() const { return int32_t(free_list_.size()) + num_cached_; }
  int32_t num_free() const { return int32_t(free_list_.size()); }
  int32_t num_held() const { return num_held_; }
  int32_t num_cached() const { return num_cached_; }
  int32_t refcount(int32_t page) const;
  bool is_cached(int32_t page) const;
  // Pages needed to hold `num_tokens` token slots.
  int32_t pages_for_tokens(int64_t num_tokens) const { return int32_t((num_tokens + page_size_ - 1) / page_size_); }

  // Appends `n` pages (refcount 1 each) to `out`, or takes nothing and returns false when fewer
  // than n are available. Free pages go first; cached pages are evicted oldest-released first.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  // refcount +1 on a held or cached page (a cached page becomes held again).
  void retain(int32_t page);
  // refcount -1; at 0 the page becomes cached if marked cacheable, else free.
  void release(int32_t page);
  void release_all(std::span<const int32_t> pages);

  // Marks a held page as cacheable (its contents are final and keyed by a cache) or not. A
  // cacheable page whose refcount drops to 0 is kept instead of freed.
  void mark_cacheable(int32_t page, bool cacheable);
  // Turns one cached page free (when the cache is turned off or flushed). Must be cached.
  void drop_cached(int32_t page);
  void set_eviction_listener(EvictionListener* listener) { listener_ = listener; }

  PagePoolStats stats() const;

 private:
  struct PageInfo {
    int32_t refcount = 0;
    bool cacheable = false;
    // Position in the LRU of cached pages (valid when cached): a doubly linked list by page id.
    int32_t lru_prev = -1;
    int32_t lru_next = -1;
  };
  void lru_push_back(int32_t page);
  void lru_remove(int32_t page);
  void check_page(int32_t page) const;

  int32_t num_pages_;
  int32_t page_size_;
  std::vector<PageInfo> pages_;
  std::vector<int32_t> free_list_;  // a stack: the most recently freed page is reused first
  int32_t lru_head_ = -1;           // oldest cached page
  int32_t lru_tail_ = -1;           // newest cached page
  int32_t num_held_ = 0;
  int32_t num_cached_ = 0;
  int64_t peak_held_ = 0;
  int64_t allocations_ = 0;
  int64_t evictions_ = 0;
  EvictionListener* listener_ = nullptr;
};

}  // namespace fg
