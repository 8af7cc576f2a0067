// StepWriter: layout of a ragged step in one block (positions, slots through the page list, block
// table, cu_seqlens, logits rows), the summaries validation relies on, and its errors.
#include "model/batch.h"

#include <gtest/gtest.h>

#include <vector>

namespace fg {
namespace {

std::vector<int32_t> vec(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

struct Block {
  StepLayout layout;
  std::vector<int32_t> words;
  Block(int total_q, int seqs, int logits, int pages)
      : layout(StepLayout::make(total_q, seqs, logits, pages, false)), words(layout.words, -99) {}
  StepWriter writer(int page_size) { return StepWriter(layout, words.data(), page_size); }
};

TEST(StepWriter, LaysOutRaggedStep) {
  std::vector<int32_t> a_tokens = {10, 11, 12, 13}, b_tokens = {20};
  std::vector<int32_t> a_pages = {5, 2}, b_pages = {7, 0, 4};
  SequenceChunk chunks[2];
  chunks[0] = {a_tokens, /*num_cached=*/2, a_pages, LogitsWanted::kAll};   // kv 6 -> pages 5, 2
  chunks[1] = {b_tokens, /*num_cached=*/6, b_pages, LogitsWanted::kLast};  // kv 7 -> pages 7, 0, 4
  const StepShape shape = step_shape(chunks);
  EXPECT_EQ(shape.num_seqs, 2);
  EXPECT_EQ(shape.total_q, 5);
  EXPECT_EQ(shape.num_logits, 5);
  EXPECT_EQ(shape.max_q_len, 4);
  EXPECT_EQ(shape.max_kv_len, 7);
  Block block(5, 2, 5, 3);
  StepWriter w = block.writer(/*page_size=*/3);
  for (const SequenceChunk& c : chunks) ASSERT_TRUE(w.add(c).is_ok());
  const StepMetadata b = w.finish();
  EXPECT_EQ(vec(b.token_ids), (std::vector<int32_t>{10, 11, 12, 13, 20}));
  EXPECT_EQ(vec(b.positions), (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(vec(b.cu_seqlens_q), (std::vector<int32_t>{0, 4, 5}));
  EXPECT_EQ(vec(b.seqlens_kv), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(b.max_pages_per_seq, 3);
  EXPECT_EQ(vec(b.block_table), (std::vector<int32_t>{5, 2, 0, 7, 0, 4}));
  // position 2 -> page 5 offset 2; 3 -> page 2 offset 0; ...; b's position 6 -> page 4 offset 0.
  EXPECT_EQ(vec(b.slot_mapping), (std::vector<int32_t>{17, 6, 7, 8, 12}));
  EXPECT_EQ(vec(b.logits_indices), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(b.num_seqs(), 2);
  EXPECT_EQ(b.total_q(), 5);
  EXPECT_EQ(b.max_q_len, 4);
  EXPECT_EQ(b.max_kv_len, 7);
  EXPECT_EQ(b.min_page, 0);
  EXPECT_EQ(b.max_page, 7);
  EXPECT_EQ(b.min_token, 10);
  EXPECT_EQ(b.max_token, 20);
  EXPECT_FALSE(b.decode_only());
  // The spans are views of the one block, at the layout's offsets.
  EXPECT_EQ(b.token_ids.data(), block.words.data() + block.layout.ids);
  EXPECT_EQ(b.block_table.data(), block.words.data() + block.layout.bt);
}

TEST(StepWriter, LogitsSelectionAndCapacityPadding) {
  std::vector<int32_t> t = {1, 2, 3}, pages = {0};
  SequenceChunk c[3] = {
      {t, 0, pages, LogitsWanted::kNone}, {t, 0, pages, LogitsWanted::kLast}, {t, 0, pages, LogitsWanted::kAll}};
  Block block(16, 4, 8, 2);  // capacities above the step: rows past it stay the caller's
  StepWriter w = block.writer(16);
  for (const SequenceChunk& x : c) ASSERT_TRUE(w.add(x).is_ok());
  const StepMetadata b = w.finish();
  EXPECT_EQ(vec(b.logits_indices), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(b.max_pages_per_seq, 2);
  EXPECT_EQ(vec(b.block_table), (std::vector<int32_t>{0, 0, 0, 0, 0, 0}));  // unused columns are 0
  EXPECT_EQ(b.slot_mapping.data(), block.words.data() + block.layout.slot);
}

TEST(StepWriter, Errors) {
  std::vector<int32_t> t = {1, 2, 3, 4}, empty, one_page = {0};
  Block block(8, 2, 8, 2);
  StepWriter w = block.writer(2);
  Status s = w.add({t, 0, one_page, LogitsWanted::kLast});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("needs 2 KV pages"), std::string::npos) << s.message();
  EXPECT_FALSE(w.add({empty, 0, one_page, LogitsWanted::kLast}).is_ok());
  EXPECT_FALSE(w.add({t, -1, one_page, LogitsWanted::kLast}).is_ok());
  std::vector<int32_t> three_pages = {0, 1, 2};
  s = w.add({t, 2, three_pages, LogitsWanted::kLast});  // 3 pages > the layout's 2 per sequence
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.message();
  std::vector<int32_t> two_pages = {0, 1};
  ASSERT_TRUE(w.add({t, 0, two_pages, LogitsWanted::kLast}).is_ok());
  ASSERT_TRUE(w.add({t, 0, two_pages, LogitsWanted::kLast}).is_ok());
  EXPECT_FALSE(w.add({t, 0, two_pages, LogitsWanted::kLast}).is_ok());  // a third sequence
  EXPECT_EQ(w.finish().num_seqs(), 2);                                  // failed adds wrote nothing
}

}  // namespace
}  // namespace fg
