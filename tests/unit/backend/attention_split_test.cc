// The CUDA attention plan's split-KV sizing (backend/cuda/attention_split.h), plain host code, on
// the shapes docs/perf.md measures: Llama-3-8B's 8 kv heads of 128 on 132 SMs (H100 / H200), one
// decode token per sequence (one 16-row tile each, extent = its KV length). The chunks pinned
// here are the plans those figures were taken with; a change to the rule shows up here first.
#include "backend/cuda/attention_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace fg::cuda::attn {
namespace {

SplitStep decode_step(int batch, int kv_len, int head_dim = 128, int ctas_per_sm = 2) {
  SplitStep s;
  s.total_keys = int64_t(batch) * kv_len;
  s.num_tiles = batch;
  s.max_keys = kv_len;
  s.num_kv_heads = 8;
  s.head_dim = head_dim;
  s.num_sms = 132;
  s.ctas_per_sm = ctas_per_sm;
  return s;
}

int splits(int chunk, int extent) {
  return chunk == 0 ? 1 : std::min(kMaxSplits, (extent + chunk - 1) / chunk);
}

TEST(AttentionSplit, BatchOneLongContextAimsAtOneCtaPerSmToKeepOneMergeBatch) {
  // Two CTAs per SM would be 32 splits of 256 keys (two merge batches of 16).
  EXPECT_EQ(split_chunk(decode_step(1, 8192)), 512);
  EXPECT_EQ(splits(512, 8192), 16);
  EXPECT_EQ(split_chunk(decode_step(1, 16384)), 1024);
  EXPECT_EQ(split_chunk(decode_step(1, 6144)), 384);  // 16 splits, not 24 of 256
}

TEST(AttentionSplit, FewSplitsKeepTwoCtasPerSm) {
  EXPECT_EQ(split_chunk(decode_step(8, 1024)), 256);  // 4 splits a sequence, 256 CTAs
  EXPECT_EQ(split_chunk(decode_step(1, 1024)), 256);
  EXPECT_EQ(split_chunk(decode_step(1, 4096)), 256);  // 16 splits: one merge batch already
  EXPECT_EQ(split_chunk(decode_step(16, 512)), 256);
}

TEST(AttentionSplit, LargeSharesAimAtEveryResidentSlot) {
  EXPECT_EQ(split_chunk(decode_step(1, 32768)), 1024);  // 993 keys a CTA: 32 splits
  EXPECT_EQ(split_chunk(decode_step(8, 8192)), 2048);   // 4 splits
}

TEST(AttentionSplit, NoSplitWhenTilesFillTheSmsOrTheShareIsNearTheLongestTile) {
  EXPECT_EQ(split_chunk(decode_step(64, 8192)), 0);             // 512 tiles x kv heads >= 264 slots
  EXPECT_EQ(split_chunk(decode_step(32, 4096)), 0);             // 256 units: 4032 + 64 would be all it gains
  EXPECT_EQ(splits(split_chunk(decode_step(1, 200)), 200), 1);  // the engine's batch-1 decode
}

TEST(AttentionSplit, HeadDim256UsesItsSmallerMergeBatchAndOneCtaPerSm) {
  // One CTA per SM resident: the aim is one per SM whatever the share.
  EXPECT_EQ(split_chunk(decode_step(1, 8192, 256, 1)), 512);
  EXPECT_EQ(merge_batch(256), 8);
  EXPECT_EQ(merge_batch(128), 16);
}

TEST(AttentionSplit, EmptyStepHasNoSplit) {
  SplitStep s;
  EXPECT_EQ(split_chunk(s), 0);
}

}  // namespace
}  // namespace fg::cuda::attn
