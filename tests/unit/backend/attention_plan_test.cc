// The CUDA attention plan's launch-width rules (backend/cuda/attention_plan.h), plain host code:
// the split-KV sizing on the shapes docs/perf.md measures: Llama-3-8B's 8 kv heads of 128 on 132 SMs (H100 / H200), one
// decode token per sequence (one 16-row tile each, extent = its KV length). The chunks pinned
// here are the plans those figures were taken with; a change to the rule shows up here first.
// Then when 128-row tiles pay, and the property CUDA graphs rely on: every plan of a batch within
// a graph's bounds fits the grids graph_split_grids gives it.
#include "backend/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace fg::cuda::attn {
namespace {

constexpr int kKvHeads = 8;
constexpr int kSms = 132;
constexpr int64_t kResident = 2 * kSms;

// The chunk plan() picks for these tiles' extents at 8 kv heads.
int chunk_for(const std::vector<int>& extents, int head_dim = 128, int ctas_per_sm = 2) {
  SplitStep s;
  s.extents = extents;
  s.num_kv_heads = kKvHeads;
  s.head_dim = head_dim;
  s.num_sms = kSms;
  s.ctas_per_sm = ctas_per_sm;
  return split_chunk(s);
}

int decode_chunk(int batch, int kv_len, int head_dim = 128, int ctas_per_sm = 2) {
  return chunk_for(std::vector<int>(size_t(batch), kv_len), head_dim, ctas_per_sm);
}

// (tile, kv head) units of the main kernel and of the merge kernel for a chunk.
struct Units {
  int64_t main = 0, merge = 0;
};
Units units_for(const std::vector<int>& extents, int chunk) {
  Units u;
  for (int e : extents) {
    const int n = splits_of(e, chunk);
    u.main += int64_t(n) * kKvHeads;
    u.merge += n > 1 ? kKvHeads : 0;
  }
  return u;
}

TEST(AttentionPlan, BatchOneLongContextAimsAtOneCtaPerSmToKeepOneMergeBatch) {
  // Two CTAs per SM would be 32 splits of 256 keys (two merge batches of 16).
  EXPECT_EQ(decode_chunk(1, 8192), 512);
  EXPECT_EQ(splits_of(8192, 512), 16);
  EXPECT_EQ(decode_chunk(1, 16384), 1024);
  EXPECT_EQ(decode_chunk(1, 6144), 384);  // 16 splits, not 24 of 256
}

TEST(AttentionPlan, FewSplitsKeepTwoCtasPerSm) {
  EXPECT_EQ(decode_chunk(8, 1024), 256);  // 4 splits a sequence, 256 CTAs
  EXPECT_EQ(decode_chunk(1, 1024), 256);
  EXPECT_EQ(decode_chunk(1, 4096), 256);  // 16 splits: one merge batch already
  EXPECT_EQ(decode_chunk(16, 512), 256);
}

TEST(AttentionPlan, LargeSharesAimAtEveryResidentSlot) {
  EXPECT_EQ(decode_chunk(1, 32768), 1024);  // 993 keys a CTA: 32 splits
  EXPECT_EQ(decode_chunk(8, 8192), 2048);   // 4 splits
}

TEST(AttentionPlan, SplitsFitOneWaveOfResidentCtas) {
  // 6 x 2,048 keys: the share (373 keys) rounds to 384, 6 splits a sequence (five of 384 and one
  // of 128) = 288 CTAs on 264 slots; 512 makes 4 splits, 192 CTAs.
  EXPECT_EQ(decode_chunk(6, 2048), 512);
  // 8 x 32k: 8,064 would be 5 splits (the last of 512 keys), 320 CTAs; 8,192 makes 4.
  EXPECT_EQ(decode_chunk(8, 32768), 8192);
  for (int batch : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32})
    for (int kv = 200; kv <= 65536; kv = kv * 5 / 4 + 7) {
      const std::vector<int> extents(size_t(batch), kv);
      EXPECT_LE(units_for(extents, chunk_for(extents)).main, std::max<int64_t>(kResident, batch * kKvHeads))
          << batch << " x " << kv;
    }
}

TEST(AttentionPlan, NoSplitWhenTilesFillTheSmsOrTheShareIsNearTheLongestTile) {
  EXPECT_EQ(decode_chunk(64, 8192), 0);                // 512 tiles x kv heads >= 264 slots
  EXPECT_EQ(decode_chunk(32, 4096), 0);                // 256 units: 4032 + 64 would be all it gains
  EXPECT_EQ(splits_of(200, decode_chunk(1, 200)), 1);  // the engine's batch-1 decode
}

TEST(AttentionPlan, HeadDim256UsesItsSmallerMergeBatchAndOneCtaPerSm) {
  // One CTA per SM resident: the aim is one per SM whatever the share.
  EXPECT_EQ(decode_chunk(1, 8192, 256, 1), 512);
  EXPECT_EQ(merge_batch(256), 8);
  EXPECT_EQ(merge_batch(128), 16);
}

TEST(AttentionPlan, WideTilesNeedOneAndAHalfWaves) {
  EXPECT_FALSE(wide_tiles_pay(32, kKvHeads, kResident));  // 1 x 1k at GQA 4: 256 CTAs on 264 slots
  EXPECT_TRUE(wide_tiles_pay(50, kKvHeads, kResident));   // 400 CTAs
  EXPECT_FALSE(wide_tiles_pay(49, kKvHeads, kResident));
  // A verification graph of 64 sequences x 17 tokens at GQA 4 (68 rows: one wide tile each) can
  // make them, one of 32 sequences cannot.
  EXPECT_TRUE(wide_tiles_pay(64, kKvHeads, kResident));
  EXPECT_FALSE(wide_tiles_pay(32, kKvHeads, kResident));
}

TEST(AttentionPlan, EmptyStepHasNoSplit) {
  EXPECT_EQ(chunk_for({}), 0);
}

// A decode graph of a bucket of b sequences padded with one-key sequences (as the engine pads
// its buckets), replayed for any count of real sequences and lengths within the bounds: the main
// and merge units of every plan fit the grids recorded for those bounds. Before the grids had
// these bounds, 28 sequences of 1,000 keys in a 32-sequence bucket of 1,024 keys split into 224
// merge units against a merge grid of one CTA (recorded from a widest batch that did not split).
TEST(AttentionPlan, EveryPlanWithinAGraphsBoundsFitsItsGrids) {
  std::mt19937 rng(7);
  for (int bucket : {1, 2, 4, 8, 16, 24, 32, 33, 48, 64}) {
    for (int max_kv : {256, 512, 1024, 2048, 4096, 8192, 32768}) {
      const int64_t units = int64_t(bucket) * kKvHeads;
      const SplitGrids grids = graph_split_grids(units, units, max_kv, kResident);
      const int64_t main_grid = std::max<int64_t>(grids.main, int64_t(bucket) * kKvHeads);
      for (int trial = 0; trial < 300; ++trial) {
        const int real = 1 + int(rng() % uint32_t(bucket));
        std::vector<int> extents(size_t(bucket), 1);
        const bool uniform = trial % 2 == 0;
        const int len = 1 + int(rng() % uint32_t(max_kv));
        for (int i = 0; i < real; ++i) extents[size_t(i)] = uniform ? len : 1 + int(rng() % uint32_t(max_kv));
        const int chunk = chunk_for(extents);
        const Units u = units_for(extents, chunk);
        ASSERT_LE(u.main, main_grid) << "bucket " << bucket << ", max_kv " << max_kv << ", " << real << " real";
        ASSERT_LE(u.merge, grids.merge) << "bucket " << bucket << ", max_kv " << max_kv << ", " << real << " real";
        if (max_kv <= kMinSplitKeys) {
          ASSERT_EQ(u.merge, 0);
        }
      }
    }
  }
}

TEST(AttentionPlan, GraphGridsStayNarrowWhereNoPlanCanSplitMuch) {
  constexpr int64_t kOne = kKvHeads;  // one sequence's units
  // Batch 1 at up to 512 keys: at most 2 splits a kv head, so 16 CTAs, not a CTA per slot.
  EXPECT_EQ(graph_split_grids(kOne, kOne, 512, kResident).main, 16);
  EXPECT_EQ(graph_split_grids(kOne, kOne, 256, kResident).main, 0);  // no split below 257 keys
  EXPECT_EQ(graph_split_grids(kOne, kOne, 8192, kResident).main, 256);
  EXPECT_EQ(graph_split_grids(32 * kOne, 32 * kOne, 1024, kResident).main, kResident);
  EXPECT_EQ(graph_split_grids(32 * kOne, 32 * kOne, 1024, kResident).merge, kResident / 2);
  // 33 sequences padded fill the 264 slots: no replay splits, no merge launch. Bounds that allow
  // fewer sequences can still split.
  EXPECT_EQ(graph_split_grids(33 * kOne, 33 * kOne, 8192, kResident).merge, 0);
  EXPECT_EQ(graph_split_grids(64 * kOne, 64 * kOne, 8192, kResident).main, 0);
  EXPECT_EQ(graph_split_grids(64 * kOne, kOne, 8192, kResident).merge, kResident / 2);
}

}  // namespace
}  // namespace fg::cuda::attn
