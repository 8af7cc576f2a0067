// PagePool: free list, refcounts and the LRU of cached pages. See page_pool.h for the lifecycle.
#include "kvcache/page_pool.h"

#include <string>

namespace fg {

PagePool::PagePool(int32_t num_pages, int32_t page_size)
    : num_pages_(num_pages), page_size_(page_size), pages_(size_t(num_pages)) {
  FG_CHECK(num_pages >= 0 && page_size > 0, "PagePool needs num_pages >= 0 and page_size > 0");
  free_list_.reserve(size_t(num_pages));
  // Stack order: page 0 is handed out first, which keeps fresh pools easy to read in tests.
  for (int32_t p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

void PagePool::check_page(int32_t page) const {
  FG_CHECK(page >= 0 && page < num_pages_, "page id " + std::to_string(page) + " outside the pool");
}

int32_t PagePool::refcount(int32_t page) const {
  check_page(page);
  return pages_[size_t(page)].refcount;
}

bool PagePool::is_cached(int32_t page) const {
  check_page(page);
  const PageInfo& info = pages_[size_t(page)];
  return info.refcount == 0 && info.cacheable;
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  FG_CHECK(n >= 0);
  if (n > num_available()) return false;
  for (int32_t i = 0; i < n; ++i) {
    int32_t page;
    if (!free_list_.empty()) {
      page = free_list_.back();
      free_list_.pop_back();
    } else {
      page = lru_head_;
      FG_CHECK(page >= 0, "cached-page count out of sync with the LRU");
      lru_remove(page);
      pages_[size_t(page)].cacheable = false;
      --num_cached_;
      ++evictions_;
      if (listener_ != nullptr) listener_->on_evict(page);
    }
    PageInfo& info = pages_[size_t(page)];
    FG_CHECK(info.refcount == 0, "allocating a page that is still held");
    info.refcount = 1;
    ++num_held_;
    out.push_back(page);
  }
  allocations_ += n;
  if (num_held_ > peak_held_) peak_held_ = num_held_;
  return true;
}

void PagePool::retain(int32_t page) {
  check_page(page);
  PageInfo& info = pages_[size_t(page)];
  if (info.refcount == 0) {
    FG_CHECK(info.cacheable, "retain of free page " + std::to_string(page));
    lru_remove(page);
    --num_cached_;
    ++num_held_;
    if (num_held_ > peak_held_) peak_held_ = num_held_;
  }
  ++info.refcount;
}

void PagePool::release(int32_t page) {
  check_page(page);
  PageInfo& info = pages_[size_t(page)];
  FG_CHECK(info.refcount > 0, "release of page " + std::to_string(page) + " which is not held");
  if (--info.refcount > 0) return;
  --num_held_;
  if (info.cacheable) {
    lru_push_back(page);
    ++num_cached_;
  } else {
    free_list_.push_back(page);
  }
}

void PagePool::release_all(std::span<const int32_t> pages) {
  for (int32_t p : pages) release(p);
}

void PagePool::mark_cacheable(int32_t page, bool cacheable) {
  check_page(page);
  PageInfo& info = pages_[size_t(page)];
  FG_CHECK(info.refcount > 0, "only a held page can change its cacheable flag");
  info.cacheable = cacheable;
}

void PagePool::drop_cached(int32_t page) {
  FG_CHECK(is_cached(page), "drop_cached of a page that is not cached");
  lru_remove(page);
  pages_[size_t(page)].cacheable = false;
  --num_cached_;
  free_list_.push_back(page);
}

void PagePool::lru_push_back(int32_t page) {
  PageInfo& info = pages_[size_t(page)];
  info.lru_prev = lru_tail_;
  info.lru_next = -1;
  if (lru_tail_ >= 0) {
    pages_[size_t(lru_tail_)].lru_next = page;
  } else {
    lru_head_ = page;
  }
  lru_tail_ = page;
}

void PagePool::lru_remove(int32_t page) {
  PageInfo& info = pages_[size_t(page)];
  if (info.lru_prev >= 0) {
    pages_[size_t(info.lru_prev)].lru_next = info.lru_next;
  } else {
    lru_head_ = info.lru_next;
  }
  if (info.lru_next >= 0) {
    pages_[size_t(info.lru_next)].lru_prev = info.lru_prev;
  } else {
    lru_tail_ = info.lru_prev;
  }
  info.lru_prev = info.lru_next = -1;
}

PagePoolStats PagePool::stats() const {
  PagePoolStats s;
  s.num_pages = num_pages_;
  s.page_size = page_size_;
  s.free = int64_t(free_list_.size());
  s.held = num_held_;
  s.cached = num_cached_;
  s.peak_held = peak_held_;
  s.allocations = allocations_;
  s.evictions = evictions_;
  return s;
}

}  // namespace fg
