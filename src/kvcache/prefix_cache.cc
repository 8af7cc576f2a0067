// PrefixCache: chained page keys (XXH3), verified lookups, publication and eviction bookkeeping.
#include "kvcache/prefix_cache.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fg {

namespace {
// Arbitrary fixed seed for root keys, so that a root never shares a key with a child by design.
constexpr uint64_t kRootSeed = 0x9e3779b97f4a7c15ull;
}  // namespace

PrefixCache::PrefixCache(PagePool& pool, const PrefixCacheOptions& options)
    : pool_(pool),
      page_size_(pool.page_size()),
      key_mask_(options.hash_bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << options.hash_bits) - 1),
      entries_(size_t(pool.num_pages())),
      tokens_(size_t(pool.num_pages()) * size_t(pool.page_size())) {
  FG_CHECK(options.hash_bits >= 1, "PrefixCacheOptions::hash_bits must be at least 1");
  pool_.set_eviction_listener(this);
}

PrefixCache::~PrefixCache() {
  pool_.set_eviction_listener(nullptr);
}

uint64_t PrefixCache::root_key(uint64_t salt) const {
  return XXH3_64bits_withSeed(&salt, sizeof(salt), kRootSeed) & key_mask_;
}

uint64_t PrefixCache::page_key(uint64_t parent_key, std::span<const int32_t> page_tokens) const {
  return XXH3_64bits_withSeed(page_tokens.data(), page_tokens.size_bytes(), parent_key) & key_mask_;
}

bool PrefixCache::same_tokens(int32_t page, std::span<const int32_t> page_tokens) const {
  const int32_t* stored = tokens_.data() + size_t(page) * size_t(page_size_);
  return std::memcmp(stored, page_tokens.data(), page_tokens.size_bytes()) == 0;
}

int32_t PrefixCache::match(std::span<const int32_t> tokens, uint64_t salt, int32_t max_pages,
                           std::vector<int32_t>& pages, PrefixChain& chain) const {
  chain.reset();
  const int32_t P = page_size_;
  const int32_t limit = std::min<int32_t>(max_pages, int32_t(tokens.size() / size_t(P)));
  uint64_t key = root_key(salt);
  uint64_t parent_serial = 0;
  int32_t hits = 0;
  for (; hits < limit; ++hits) {
    const auto page_tokens = tokens.subspan(size_t(hits) * size_t(P), size_t(P));
    const uint64_t k = page_key(key, page_tokens);
    auto it = index_.find(k);
    if (it == index_.end()) break;
    const Entry& e = entries_[size_t(it->second)];
    if (e.parent_serial != parent_serial || e.salt != salt || !same_tokens(it->second, page_tokens)) break;
    pages.push_back(it->second);
    key = k;
    parent_serial = e.serial;
  }
  chain.num_pages = hits;
  chain.key = key;
  chain.serial = parent_serial;
  return hits;
}

void PrefixCache::publish(std::span<const int32_t> tokens, int32_t num_computed, std::span<const int32_t> pages,
                          uint64_t salt, PrefixChain& chain) {
  if (chain.broken) return;
  const int32_t P = page_size_;
  const int32_t full = num_computed / P;
  FG_CHECK(size_t(full) <= pages.size() && size_t(num_computed) <= tokens.size(),
           "publish: the sequence holds fewer pages or tokens than it computed");
  uint64_t key = chain.num_pages == 0 ? root_key(salt) : chain.key;
  uint64_t parent_serial = chain.serial;
  for (int32_t i = chain.num_pages; i < full; ++i) {
    const auto page_tokens = tokens.subspan(size_t(i) * size_t(P), size_t(P));
    const uint64_t k = page_key(key, page_tokens);
    const int32_t page = pages[size_t(i)];
    auto it = index_.find(k);
    if (it != index_.end()) {
      const Entry& e = entries_[size_t(it->second)];
      if (e.parent_serial == parent_serial && e.salt == salt && same_tokens(it->second, page_tokens)) {
        // The same prefix is already indexed (this very page after a hit, or another sequence
        // computed it too): continue the chain through the existing entry.
        if (it->second != page) ++stats_.duplicates;
        key = k;
        parent_serial = e.serial;
        chain.num_pages = i + 1;
        chain.key = key;
        chain.serial = parent_serial;
        continue;
      }
      // A different prefix under the same key: the slot is taken, so this sequence's later pages
      // cannot be reached by lookups either. Stop publishing for it.
      ++stats_.collisions;
      chain.broken = true;
      return;
    }
    FG_CHECK(entries_[size_t(page)].serial == 0, "publish: page is already indexed under another key");
    Entry& e = entries_[size_t(page)];
    e.key = k;
    e.serial = next_serial_++;
    e.parent_serial = parent_serial;
    e.salt = salt;
    std::copy(page_tokens.begin(), page_tokens.end(), tokens_.begin() + ptrdiff_t(size_t(page) * size_t(P)));
    index_.emplace(k, page);
    pool_.mark_cacheable(page, true);
    ++stats_.published;
    key = k;
    parent_serial = e.serial;
    chain.num_pages = i + 1;
    chain.key = key;
    chain.serial = parent_serial;
  }
}

void PrefixCache::chain_keys(std::span<const int32_t> tokens, uint64_t salt, const PrefixChain& chain, int32_t end_page,
                             std::vector<uint64_t>& out) const {
  const size_t P = size_t(page_size_);
  FG_CHECK(size_t(std::max(end_page, 0)) * P <= tokens.size(), "chain_keys: end_page beyond the tokens");
  uint64_t key = chain.num_pages == 0 ? root_key(salt) : chain.key;
  for (int32_t i = chain.num_pages; i < end_page; ++i) {
    key = page_key(key, tokens.subspan(size_t(i) * P, P));
    out.push_back(key);
  }
}

void PrefixCache::forget(int32_t page) {
  Entry& e = entries_[size_t(page)];
  FG_CHECK(e.serial != 0, "forgetting a page the prefix cache does not index");
  auto it = index_.find(e.key);
  FG_CHECK(it != index_.end() && it->second == page, "prefix cache index out of sync");
  index_.erase(it);
  e = Entry{};
}

void PrefixCache::on_evict(int32_t page) {
  forget(page);
  ++stats_.evicted;
  if (eviction_hook_) eviction_hook_(page);
}

void PrefixCache::clear() {
  std::vector<int32_t> pages;
  pages.reserve(index_.size());
  for (const auto& [key, page] : index_) pages.push_back(page);
  for (int32_t page : pages) {
    forget(page);
    if (pool_.is_cached(page)) {
      pool_.drop_cached(page);
    } else {
      pool_.mark_cacheable(page, false);
    }
  }
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.entries = int64_t(index_.size());
  return s;
}

}  // namespace fg
