// Rules of the attention plan (attention.cu's plan() and begin_capture()) that decide launch
// widths: when a step's 128-row tiles pay, how many keys a split of a tile reads (from the step's
// row tiles and the device's resident CTA slots), and which grids a CUDA graph records so that
// any plan within its bounds runs in one round. Plain host C++ (no CUDA header), so that CPU
// tests pin the plans they give for the shapes docs/perf.md measures.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace fg::cuda::attn {

constexpr int kBlockN = 128;        // split granularity in keys; the largest per-iteration block of any tile shape
constexpr int kMaxSplits = 128;     // splits of one tile (a multiple of 32: the merge kernel holds one lse per lane)
constexpr int kMinSplitKeys = 256;  // a split reads at least this many keys

// Partial rows the merge kernel loads at once per lane batch (its registers: 64 floats a lane):
// a tile of more splits waits for one more memory latency per further batch.
constexpr int merge_batch(int head_dim) {
  return head_dim <= 128 ? 16 : 8;
}

// Whether a step's 128-row tiles (`wide_tiles` of them, before the kv heads multiply them) pay:
// they do the most math per shared-memory read, but a short prefill cut into them leaves too few
// CTAs to balance its causal triangle, so only when they make at least 1.5 waves of the general
// kernel's CTAs (1 x 1k at GQA 4: 32 x 8 = 256 CTAs on 264 slots takes 64-row tiles). The same
// bound holds for the wgmma prefill kernel (one tile per SM): on the H200 its 1 x 1k took 105 us
// against 67 us on 64-row general tiles.
constexpr bool wide_tiles_pay(int64_t wide_tiles, int num_kv_heads, int64_t resident) {
  return 2 * wide_tiles * num_kv_heads >= 3 * resident;
}

struct SplitStep {
  std::span<const int> extents;  // keys each row tile of the step can see (its causal extent)
  int num_kv_heads = 1;
  int head_dim = 128;
  int num_sms = 132;
  int ctas_per_sm = 2;  // main-kernel CTAs resident per SM
};

// Splits of a tile of `extent` keys cut into chunks of `chunk` (0: unsplit).
constexpr int splits_of(int extent, int chunk) {
  return chunk == 0 ? 1 : std::min(kMaxSplits, std::max(1, (extent + chunk - 1) / chunk));
}

// Keys per split: a multiple of kBlockN of at least kMinSplitKeys, or 0 for no split. A tile then
// runs splits_of(extent, chunk) splits (plan() may still double the chunk until the partial
// outputs fit their buffer, which only lowers the count).
//  - No split when the tiles x kv heads already fill the resident CTA slots, nor when the fair
//    share per CTA is close to the longest tile (splitting would only add a short tail split and
//    a merge: 32 sequences x 8 kv heads on 264 slots would cut 4096 keys into 4032 + 64).
//  - The share aims at every resident slot (two CTAs per SM at head_dim <= 128), except where
//    that leaves a split fewer than 2 kMinSplitKeys keys *and* cuts some tile into more splits
//    than the merge loads in one batch: then it aims at one CTA per SM (B1 kv8k: 16 splits of
//    512 keys a kv head instead of 32 of 256, one merge batch instead of two). Where the merge is
//    one batch either way, the CTAs of the two-per-SM aim overlap their latencies better (B8 kv1k
//    at page 1: 4 splits of 256 keys, 6 % faster than 2 of 512 on an H100; docs/perf.md).
//  - The splits fit one wave: the chunk is the smallest multiple of kBlockN from there up with
//    which every split of every tile and kv head has a resident slot (a tile's last split is
//    partial, so the share alone can overshoot: 6 sequences of 2,048 keys at 384 a split were
//    288 CTAs, the last 24 waiting for a slot). So a CUDA graph whose main grid has a CTA per
//    resident slot runs any plan in one round.
inline int split_chunk(const SplitStep& s) {
  const int64_t resident = int64_t(s.num_sms) * s.ctas_per_sm;
  const auto tiles = int64_t(s.extents.size());
  if (tiles == 0 || tiles * s.num_kv_heads >= resident) return 0;
  int64_t total_keys = 0;
  int max_keys = 0;
  for (int e : s.extents) {
    total_keys += e;
    max_keys = std::max(max_keys, e);
  }
  const int64_t work = total_keys * s.num_kv_heads;
  auto chunk_of = [](int64_t per_cta) {
    return std::max<int64_t>(kMinSplitKeys, (per_cta + kBlockN - 1) / kBlockN * kBlockN);
  };
  int64_t per_cta = (work + resident - 1) / resident;
  if (per_cta < 2 * kMinSplitKeys && splits_of(max_keys, int(chunk_of(per_cta))) > merge_batch(s.head_dim))
    per_cta = (work + s.num_sms - 1) / s.num_sms;
  if (per_cta * 9 >= int64_t(max_keys) * 8) return 0;
  auto ctas = [&](int c) {
    int64_t n = 0;
    for (int e : s.extents) n += splits_of(e, c);
    return n * s.num_kv_heads;
  };
  // The smallest multiple of kBlockN from the share's chunk up that fits one wave, by bisection
  // (the count only falls as the chunk grows; at the longest tile every tile is one split, and
  // tiles x kv heads < resident).
  int lo = int(chunk_of(per_cta));
  if (ctas(lo) <= resident) return lo;
  int hi = (max_keys + kBlockN - 1) / kBlockN * kBlockN;  // ctas(hi) <= resident, hi > lo
  while (hi - lo > kBlockN) {
    const int mid = lo + (hi - lo) / (2 * kBlockN) * kBlockN;
    (ctas(mid) <= resident ? hi : lo) = mid;
  }
  return hi;
}

// Grids a CUDA graph records for its main and merge launches so that every plan of a batch within
// its bounds runs in one round (the kernels loop over their units with a grid stride, so a
// narrower grid is correct but runs the units past it after the others: a merge grid of one CTA,
// recorded from a widest batch that did not split, would run a later plan's 224 merge units one
// after another). `units` / `min_units`: (row tile, kv head) units of the bounds' largest batch /
// of its smallest (every sequence makes a tile); `max_kv`: the bounds' longest KV. A split plan
// fits one wave (split_chunk), cuts no tile into more than ceil(max_kv / kMinSplitKeys) splits,
// and each split tile has at least two: so at most min(resident, units x that) main units and
// resident / 2 merge units. Zeros where no plan can split (a batch whose tiles fill the resident
// slots never splits: the engine's decode buckets of 33 sequences and more at 8 kv heads).
struct SplitGrids {
  int64_t main = 0;
  int64_t merge = 0;
};
inline SplitGrids graph_split_grids(int64_t units, int64_t min_units, int max_kv, int64_t resident) {
  if (max_kv <= kMinSplitKeys || units <= 0 || min_units >= resident) return {};
  const int64_t per_tile = std::min<int64_t>(kMaxSplits, (int64_t(max_kv) + kMinSplitKeys - 1) / kMinSplitKeys);
  return {std::min(resident, units * per_tile), std::min(units, resident / 2)};
}

}  // namespace fg::cuda::attn
