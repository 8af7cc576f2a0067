// Split-KV sizing of the attention plan (attention.cu's plan()): how many keys a split of a tile
// reads, from the step's totals alone. Plain host C++ (no CUDA header), so that CPU tests pin the
// plans it gives for the shapes docs/perf.md measures.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fg::cuda::attn {

constexpr int kBlockN = 128;        // split granularity in keys; the largest per-iteration block of any tile shape
constexpr int kMaxSplits = 128;     // splits of one tile (a multiple of 32: the merge kernel holds one lse per lane)
constexpr int kMinSplitKeys = 256;  // a split reads at least this many keys

// Partial rows the merge kernel loads at once per lane batch (its registers: 64 floats a lane):
// a tile of more splits waits for one more memory latency per further batch.
constexpr int merge_batch(int head_dim) {
  return head_dim <= 128 ? 16 : 8;
}

struct SplitStep {
  int64_t total_keys = 0;  // keys the step's tiles can see, summed over tiles (causal extents)
  int64_t num_tiles = 0;   // row tiles of the step (before the kv heads multiply them)
  int max_keys = 0;        // the longest tile's extent
  int num_kv_heads = 1;
  int head_dim = 128;
  int num_sms = 132;
  int ctas_per_sm = 2;  // main-kernel CTAs resident per SM
};

// Keys per split: a multiple of kBlockN of at least kMinSplitKeys, or 0 for no split. A tile of
// extent e then runs min(kMaxSplits, ceil(e / chunk)) splits (plan() may still double the chunk
// until the partial outputs fit their buffer).
//  - No split when the tiles x kv heads already fill the resident CTA slots, nor when the fair
//    share per CTA is close to the longest tile (splitting would only add a short tail split and
//    a merge: 32 sequences x 8 kv heads on 264 slots would cut 4096 keys into 4032 + 64).
//  - The share aims at every resident slot (two CTAs per SM at head_dim <= 128), except where
//    that leaves a split fewer than 2 kMinSplitKeys keys *and* cuts some tile into more splits
//    than the merge loads in one batch: then it aims at one CTA per SM (B1 kv8k: 16 splits of
//    512 keys a kv head instead of 32 of 256, one merge batch instead of two). Where the merge is
//    one batch either way, the CTAs of the two-per-SM aim overlap their latencies better (B8 kv1k
//    at page 1: 4 splits of 256 keys, 6 % faster than 2 of 512 on an H100; docs/perf.md).
inline int split_chunk(const SplitStep& s) {
  const int64_t resident = int64_t(s.num_sms) * s.ctas_per_sm;
  if (s.num_tiles <= 0 || s.num_tiles * s.num_kv_heads >= resident) return 0;
  const int64_t work = s.total_keys * s.num_kv_heads;
  auto chunk_of = [](int64_t per_cta) {
    return std::max<int64_t>(kMinSplitKeys, (per_cta + kBlockN - 1) / kBlockN * kBlockN);
  };
  int64_t per_cta = (work + resident - 1) / resident;
  if (per_cta < 2 * kMinSplitKeys && (s.max_keys + chunk_of(per_cta) - 1) / chunk_of(per_cta) > merge_batch(s.head_dim))
    per_cta = (work + s.num_sms - 1) / s.num_sms;
  if (per_cta * 9 >= int64_t(s.max_keys) * 8) return 0;
  return int(chunk_of(per_cta));
}

}  // namespace fg::cuda::attn
