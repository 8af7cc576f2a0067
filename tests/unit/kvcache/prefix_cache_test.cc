// PrefixCache on its own: full pages only, chained keys verified against stored tokens, salts,
// duplicates, eviction through the pool, and hash collisions (forced with a 2-bit hash) that cost
// misses but never a wrong page.
#include "kvcache/prefix_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace fg {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = first + i;
  return t;
}

// A sequence as the scheduler would hold it: pages for all tokens, published after computing.
struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pages;
  PrefixChain chain;
};

Seq compute(PagePool& pool, PrefixCache& cache, std::vector<int32_t> tokens, uint64_t salt = 0) {
  Seq s;
  s.tokens = std::move(tokens);
  EXPECT_TRUE(pool.allocate(pool.pages_for_tokens(int64_t(s.tokens.size())), s.pages));
  cache.publish(s.tokens, int32_t(s.tokens.size()), s.pages, salt, s.chain);
  return s;
}

void release(PagePool& pool, Seq& s) {
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) pool.release(*it);
  s.pages.clear();
}

TEST(PrefixCache, PublishesFullPagesOnlyAndMatchesThem) {
  PagePool pool(16, 4);
  PrefixCache cache(pool);
  Seq a = compute(pool, cache, iota_tokens(10, 100));  // pages 0, 1 full; page 2 holds 2 tokens
  EXPECT_EQ(a.chain.num_pages, 2);
  EXPECT_TRUE(cache.contains_page(a.pages[0]));
  EXPECT_TRUE(cache.contains_page(a.pages[1]));
  EXPECT_FALSE(cache.contains_page(a.pages[2]));
  EXPECT_EQ(cache.stats().entries, 2);

  std::vector<int32_t> hit;
  PrefixChain chain;
  EXPECT_EQ(cache.match(iota_tokens(12, 100), 0, 100, hit, chain), 2);
  EXPECT_EQ(hit, (std::vector<int32_t>{a.pages[0], a.pages[1]}));
  EXPECT_EQ(chain.num_pages, 2);
  EXPECT_EQ(chain.key, a.chain.key);
  EXPECT_EQ(chain.serial, a.chain.serial);

  hit.clear();
  EXPECT_EQ(cache.match(iota_tokens(12, 100), 0, 1, hit, chain), 1) << "max_pages caps the walk";
  hit.clear();
  EXPECT_EQ(cache.match(iota_tokens(7, 100), 0, 100, hit, chain), 1) << "only full pages of the query count";

  std::vector<int32_t> second_page_differs = iota_tokens(12, 100);
  second_page_differs[5] = 7;
  hit.clear();
  EXPECT_EQ(cache.match(second_page_differs, 0, 100, hit, chain), 1);
  EXPECT_EQ(chain.num_pages, 1);
  std::vector<int32_t> first_page_differs = iota_tokens(12, 100);
  first_page_differs[0] = 7;
  hit.clear();
  EXPECT_EQ(cache.match(first_page_differs, 0, 100, hit, chain), 0) << "a later page never matches without its parent";
  hit.clear();
  EXPECT_EQ(cache.match(iota_tokens(12, 100), /*salt=*/9, 100, hit, chain), 0) << "salts are namespaces";

  // Continuing to compute the same sequence publishes the rest of the chain.
  a.tokens = iota_tokens(12, 100);
  cache.publish(a.tokens, 12, a.pages, 0, a.chain);
  EXPECT_EQ(a.chain.num_pages, 3);
  hit.clear();
  EXPECT_EQ(cache.match(iota_tokens(16, 100), 0, 100, hit, chain), 3);
}

TEST(PrefixCache, ReleasedPagesStayCachedUntilThePoolEvictsThem) {
  PagePool pool(4, 2);
  PrefixCache cache(pool);
  std::vector<int32_t> evicted;
  cache.set_eviction_hook([&](int32_t page) { evicted.push_back(page); });
  Seq a = compute(pool, cache, iota_tokens(5, 1));  // 3 pages, 2 published
  const std::vector<int32_t> pages = a.pages;
  release(pool, a);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_available(), 4);
  EXPECT_EQ(cache.stats().entries, 2);

  // A hit revives a cached page (held again, out of the LRU).
  std::vector<int32_t> hit;
  PrefixChain chain;
  ASSERT_EQ(cache.match(iota_tokens(5, 1), 0, 2, hit, chain), 2);
  pool.retain(hit[0]);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.num_held(), 1);

  // Allocating everything else evicts the remaining cached page, and the cache forgets it.
  std::vector<int32_t> other;
  ASSERT_TRUE(pool.allocate(3, other));
  EXPECT_EQ(evicted, std::vector<int32_t>{pages[1]});
  EXPECT_FALSE(cache.contains_page(pages[1]));
  EXPECT_EQ(cache.stats().evicted, 1);
  hit.clear();
  EXPECT_EQ(cache.match(iota_tokens(5, 1), 0, 2, hit, chain), 1) << "the evicted page must miss";
  pool.release_all(other);
  pool.release(pages[0]);
  EXPECT_EQ(pool.num_free() + pool.num_cached(), pool.num_pages());
}

TEST(PrefixCache, DuplicatePrefixesStayPrivateAndTheChainGoesOn) {
  PagePool pool(16, 4);
  PrefixCache cache(pool);
  Seq a = compute(pool, cache, iota_tokens(8, 50));
  // b computed the same first two pages (e.g. admitted in the same step as a), then more.
  Seq b = compute(pool, cache, iota_tokens(12, 50));
  EXPECT_FALSE(cache.contains_page(b.pages[0]));
  EXPECT_FALSE(cache.contains_page(b.pages[1]));
  EXPECT_TRUE(cache.contains_page(b.pages[2]));
  EXPECT_EQ(cache.stats().duplicates, 2);
  std::vector<int32_t> hit;
  PrefixChain chain;
  ASSERT_EQ(cache.match(iota_tokens(16, 50), 0, 100, hit, chain), 3);
  EXPECT_EQ(hit, (std::vector<int32_t>{a.pages[0], a.pages[1], b.pages[2]}));
  release(pool, b);  // b's private duplicates are freed, its published page is cached
  EXPECT_EQ(pool.num_cached(), 1);
  release(pool, a);
  EXPECT_EQ(pool.num_cached(), 3);
  EXPECT_EQ(pool.num_free() + pool.num_cached(), 16);
}

TEST(PrefixCache, ClearFreesCachedPagesAndUnmarksHeldOnes) {
  PagePool pool(8, 2);
  PrefixCache cache(pool);
  Seq a = compute(pool, cache, iota_tokens(4, 1));
  Seq b = compute(pool, cache, iota_tokens(4, 9));
  release(pool, a);
  EXPECT_EQ(pool.num_cached(), 2);
  cache.clear();
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(cache.stats().entries, 0);
  release(pool, b);  // no longer cacheable: freed
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(PrefixCache, ForcedHashCollisionsNeverServeAnotherPrefix) {
  // A 2-bit hash: almost every key collides. Whatever match() returns must still be exactly the
  // pages computed for the queried prefix.
  PagePool pool(512, 2);
  PrefixCacheOptions options;
  options.hash_bits = 2;
  PrefixCache cache(pool, options);
  std::map<int32_t, std::vector<int32_t>> page_prefix;  // page -> the tokens [0, end of page) it holds
  std::mt19937 rng(5);
  std::vector<Seq> live;
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng() % 3);  // a tiny alphabet: many shared prefixes
    return t;
  };
  int64_t served = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> query = random_tokens(2 + int(rng() % 10));
    std::vector<int32_t> hit;
    PrefixChain chain;
    const int32_t n = cache.match(query, 0, 100, hit, chain);
    for (int32_t i = 0; i < n; ++i) {
      const std::vector<int32_t> want(query.begin(), query.begin() + 2 * (i + 1));
      ASSERT_EQ(page_prefix.at(hit[size_t(i)]), want) << "served a page of another prefix";
    }
    served += n;
    if (live.size() > 60) {
      release(pool, live.front());
      live.erase(live.begin());
    }
    Seq s = compute(pool, cache, query);
    for (size_t i = 0; i < s.pages.size(); ++i) {
      if (2 * (i + 1) <= query.size()) {
        page_prefix[s.pages[i]] = std::vector<int32_t>(query.begin(), query.begin() + ptrdiff_t(2 * (i + 1)));
      } else {
        page_prefix.erase(s.pages[i]);
      }
    }
    live.push_back(std::move(s));
  }
  EXPECT_GT(cache.stats().collisions, 0) << "the 2-bit hash was meant to collide";
  EXPECT_GT(served, 0);
  for (Seq& s : live) release(pool, s);
  EXPECT_EQ(pool.num_free() + pool.num_cached(), pool.num_pages());
}

}  // namespace
}  // namespace fg
