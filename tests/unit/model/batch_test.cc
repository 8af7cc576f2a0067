// build_batch_spec: layout of a ragged step (positions, slots through the page list, block table,
// cu_seqlens, logits rows) and its errors.
#include "model/batch.h"

#include <gtest/gtest.h>

namespace fg {
namespace {

TEST(BatchSpec, LaysOutRaggedStep) {
  std::vector<int32_t> a_tokens = {10, 11, 12, 13}, b_tokens = {20};
  std::vector<int32_t> a_pages = {5, 2}, b_pages = {7, 0, 4};
  SequenceChunk chunks[2];
  chunks[0] = {a_tokens, /*num_cached=*/2, a_pages, LogitsWanted::kAll};   // kv 6 -> pages 5, 2
  chunks[1] = {b_tokens, /*num_cached=*/6, b_pages, LogitsWanted::kLast};  // kv 7 -> pages 7, 0, 4
  auto b = build_batch_spec(chunks, /*page_size=*/3);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_EQ(b->token_ids, (std::vector<int32_t>{10, 11, 12, 13, 20}));
  EXPECT_EQ(b->positions, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(b->cu_seqlens_q, (std::vector<int32_t>{0, 4, 5}));
  EXPECT_EQ(b->seqlens_kv, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(b->max_pages_per_seq, 3);
  EXPECT_EQ(b->block_table, (std::vector<int32_t>{5, 2, 0, 7, 0, 4}));
  // position 2 -> page 5 offset 2; 3 -> page 2 offset 0; ...; b's position 6 -> page 4 offset 0.
  EXPECT_EQ(b->slot_mapping, (std::vector<int32_t>{17, 6, 7, 8, 12}));
  EXPECT_EQ(b->logits_indices, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(b->num_seqs(), 2);
  EXPECT_EQ(b->total_q(), 5);
}

TEST(BatchSpec, LogitsSelection) {
  std::vector<int32_t> t = {1, 2, 3}, pages = {0};
  SequenceChunk c[3] = {
      {t, 0, pages, LogitsWanted::kNone}, {t, 0, pages, LogitsWanted::kLast}, {t, 0, pages, LogitsWanted::kAll}};
  auto b = build_batch_spec(c, 16);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->logits_indices, (std::vector<int32_t>{5, 6, 7, 8}));
}

TEST(BatchSpec, Errors) {
  std::vector<int32_t> t = {1, 2, 3, 4}, empty, one_page = {0};
  SequenceChunk too_few[1] = {{t, 0, one_page, LogitsWanted::kLast}};
  auto b = build_batch_spec(too_few, 2);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("needs 2 KV pages"), std::string::npos) << b.status().message();
  SequenceChunk no_tokens[1] = {{empty, 0, one_page, LogitsWanted::kLast}};
  EXPECT_FALSE(build_batch_spec(no_tokens, 16).is_ok());
  EXPECT_FALSE(build_batch_spec(std::span<const SequenceChunk>(), 16).is_ok());
  SequenceChunk ok[1] = {{t, 0, one_page, LogitsWanted::kLast}};
  EXPECT_FALSE(build_batch_spec(ok, 0).is_ok());
}

}  // namespace
}  // namespace fg
