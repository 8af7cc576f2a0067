// The prefix cache: full KV pages indexed by the token prefix that produced them, so a request
// whose prompt starts with tokens already computed reuses their pages and runs only the rest.
//
// Keys. Page i of a sequence holds token slots [i*P, (i+1)*P). Its key is a hash chained from its
// parent's key and its own P token ids; the chain starts from a root key derived from a salt (a
// namespace for anything else that changes the KV, e.g. a LoRA adapter id, or per-tenant
// isolation). A key therefore stands for the whole prefix [0, (i+1)*P) under that salt.
//
// No trust in the hash alone. Every entry stores its page's token ids, its salt and the serial
// number of its parent entry (serials are never reused). A lookup accepts a page only if the
// entry found under the key has exactly the expected tokens and hangs under the entry accepted
// one page earlier (or is a root under the same salt), so by induction the whole prefix is
// verified token by token. A hash collision costs a miss, never a wrong page.
//
// Pages and the pool. The cache owns no pages: a published page keeps whatever refcount its
// holders give it and is marked cacheable in the PagePool, so when the last holder releases it
// the pool keeps it (state "cached") instead of freeing it. Cached pages are evicted LRU by the
// pool only when an allocation finds the free list empty; the pool then tells this cache
// (EvictionListener), which forgets the entry at once, before the page is handed out again.
//
// What this class must never do: index a page that is not full or whose KV is still being
// written (publish() is called only after the step that computed the page completed), or hand
// out a page without the caller taking a reference on it (match() is read-only; the caller
// retains what it uses).
//
// Not thread-safe: the engine thread owns it, like the pool.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/page_pool.h"

namespace fg {

// Where a sequence stands in the cache's key chain: its first `num_pages` pages are known to
// the cache (hits, or published or found identical after being computed), the last of them under
// `key` / `serial`. Reset whenever the sequence drops its pages (preemption).
struct PrefixChain {
  int32_t num_pages = 0;
  uint64_t key = 0;     // key of page num_pages - 1 (unused when num_pages == 0)
  uint64_t serial = 0;  // its entry's serial; 0 = the root
  bool broken = false;  // a true hash collision stopped publishing for this sequence
  void reset() { *this = PrefixChain{}; }
};

struct PrefixCacheOptions {
  // Keys are masked to this many low bits. 64 in production; tests pass a few bits to force hash
  // collisions and show they cost only misses.
  int hash_bits = 64;
};

struct PrefixCacheStats {
  int64_t entries = 0;     // pages indexed now (held or cached)
  int64_t published = 0;   // pages ever published
  int64_t duplicates = 0;  // computed pages found already indexed under the same prefix
  int64_t collisions = 0;  // keys that matched an entry of another prefix (verified away)
  int64_t evicted = 0;     // entries forgotten because the pool evicted their page
};

class PrefixCache final : public PagePool::EvictionListener {
 public:
  // Registers itself as the pool's eviction listener; the pool must outlive the cache.
  explicit PrefixCache(PagePool& pool, const PrefixCacheOptions& options = {});
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int32_t page_size() const { return page_size_; }

  // Read-only lookup: walks `tokens` page by page (at most max_pages full pages) and appends the
  // page id of every verified hit to `pages`, stopping at the first miss. Sets `chain` to where
  // the walk ended. Returns the number of hit pages. The caller must retain() each page before
  // anything else can allocate from the pool.
  // tokens: [n] i32 token ids of the sequence, prompt first.
  int32_t match(std::span<const int32_t> tokens, uint64_t salt, int32_t max_pages, std::vector<int32_t>& pages,
                PrefixChain& chain) const;

  // Publishes the sequence's full pages in [chain.num_pages, num_computed / P) whose KV is now
  // written, and advances the chain. A page whose prefix is already indexed (another sequence
  // computed the same tokens) is left private to its sequence; the chain continues through the
  // existing entry.
  // tokens: [>= num_computed] i32; pages: the sequence's block table, page i = slots [i*P, (i+1)*P).
  void publish(std::span<const int32_t> tokens, int32_t num_computed, std::span<const int32_t> pages, uint64_t salt,
               PrefixChain& chain);

  // Appends the keys publish() would give the full pages [chain.num_pages, end_page) of a sequence
  // whose chain stands at `chain` (for spotting pages another sequence is computing right now).
  // tokens: [>= end_page * P] i32.
  void chain_keys(std::span<const int32_t> tokens, uint64_t salt, const PrefixChain& chain, int32_t end_page,
                  std::vector<uint64_t>& out) const;

  // Forgets every entry: cached pages go back to the free list, held ones simply stop being
  // cacheable (they are freed when released).
  void clear();

  bool contains_page(int32_t page) const { return entries_[size_t(page)].serial != 0; }
  PrefixCacheStats stats() const;

  // Called after an entry is forgotten because its page was evicted (tests poison the page's
  // memory here to prove evicted contents are never read again).
  void set_eviction_hook(std::function<void(int32_t page)> hook) { eviction_hook_ = std::move(hook); }

  void on_evict(int32_t page) override;

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t serial = 0;  // 0: the page is not indexed
    uint64_t parent_serial = 0;
    uint64_t salt = 0;
  };
  uint64_t root_key(uint64_t salt) const;
  uint64_t page_key(uint64_t parent_key, std::span<const int32_t> page_tokens) const;
  // The entry's stored tokens equal page_tokens.
  bool same_tokens(int32_t page, std::span<const int32_t> page_tokens) const;
  void forget(int32_t page);

  PagePool& pool_;
  int32_t page_size_;
  uint64_t key_mask_;
  std::vector<Entry> entries_;                   // [num_pages], by page id
  std::vector<int32_t> tokens_;                  // [num_pages * page_size] token ids of indexed pages
  std::unordered_map<uint64_t, int32_t> index_;  // key -> page
  uint64_t next_serial_ = 1;
  PrefixCacheStats stats_;
  std::function<void(int32_t)> eviction_hook_;
};

}  // namespace fg
