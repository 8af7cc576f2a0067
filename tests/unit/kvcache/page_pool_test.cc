// PagePool: allocation all-or-nothing, refcounts, the cached state and LRU eviction, accounting.
#include "kvcache/page_pool.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fg {
namespace {

void expect_consistent(const PagePool& pool) {
  const PagePoolStats s = pool.stats();
  EXPECT_EQ(s.free + s.held + s.cached, s.num_pages);
}

TEST(PagePool, AllocateIsAllOrNothing) {
  PagePool pool(5, 16);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  std::vector<int32_t> b;
  EXPECT_FALSE(pool.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.allocate(2, b));
  EXPECT_EQ(pool.num_free(), 0);
  expect_consistent(pool);
  pool.release_all(a);
  pool.release_all(b);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.stats().peak_held, 5);
  EXPECT_EQ(pool.stats().allocations, 5);
}

TEST(PagePool, RefcountsShareAPage) {
  PagePool pool(2, 4);
  std::vector<int32_t> p;
  ASSERT_TRUE(pool.allocate(1, p));
  pool.retain(p[0]);
  EXPECT_EQ(pool.refcount(p[0]), 2);
  pool.release(p[0]);
  EXPECT_EQ(pool.num_held(), 1);
  pool.release(p[0]);
  EXPECT_EQ(pool.num_held(), 0);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(PagePool, CachedPagesAreKeptThenEvictedOldestFirst) {
  struct Listener : PagePool::EvictionListener {
    std::vector<int32_t> evicted;
    void on_evict(int32_t page) override { evicted.push_back(page); }
  } listener;
  PagePool pool(3, 4);
  pool.set_eviction_listener(&listener);
  std::vector<int32_t> p;
  ASSERT_TRUE(pool.allocate(3, p));
  pool.mark_cacheable(p[0], true);
  pool.mark_cacheable(p[2], true);
  pool.release(p[2]);  // cached first: oldest
  pool.release(p[0]);
  pool.release(p[1]);  // not cacheable: free
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_available(), 3);
  EXPECT_TRUE(pool.is_cached(p[0]));
  expect_consistent(pool);
  // A hit on a cached page brings it back to held.
  pool.retain(p[0]);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.refcount(p[0]), 1);
  // Allocation takes the free page, then evicts the oldest cached one.
  std::vector<int32_t> q;
  ASSERT_TRUE(pool.allocate(2, q));
  EXPECT_EQ(q, (std::vector<int32_t>{p[1], p[2]}));
  EXPECT_EQ(listener.evicted, std::vector<int32_t>{p[2]});
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_FALSE(pool.is_cached(p[2]));
  pool.release_all(q);
  pool.release(p[0]);  // still cacheable
  EXPECT_EQ(pool.num_cached(), 1);
  pool.drop_cached(p[0]);
  EXPECT_EQ(pool.num_free(), 3);
  expect_consistent(pool);
}

TEST(PagePool, ReleasingAFreePageIsABug) {
  PagePool pool(1, 1);
  EXPECT_DEATH(pool.release(0), "not held");
}

}  // namespace
}  // namespace fg
