// BatchBuilder::build: positions, cu_seqlens, block table and slot mapping of one ragged step.
#include "engine/batch_builder.h"

#include <algorithm>

namespace fg {

namespace {
size_t blob_elems(int32_t tokens, int32_t seqs, int32_t pages_per_seq) {
  // token_ids + positions + slot_mapping + logits_indices (<= tokens) + cu + seqlens + table.
  return 4 * size_t(tokens) + size_t(seqs + 1) + size_t(seqs) + size_t(seqs) * size_t(pages_per_seq);
}
}  // namespace

BatchBuilder::BatchBuilder(Backend& backend, int32_t max_tokens, int32_t max_seqs,
                           int32_t max_pages_per_seq, int32_t page_size)
    : max_tokens_(max_tokens), max_seqs_(max_seqs), max_pages_per_seq_(max_pages_per_seq), page_size_(page_size) {
  FG_CHECK(max_tokens > 0 && max_seqs > 0 && max_pages_per_seq > 0 && page_size > 0);
  pinned_ = backend.alloc_host(blob_elems(max_tokens, max_seqs, max_pages_per_seq) * sizeof(int32_t));
}

const StepBatch& BatchBuilder::build(const StepPlan& plan) {
  const int32_t num_seqs = int32_t(plan.seqs.size());
  int32_t total_q = 0, num_logits = 0, max_q = 0, max_kv = 0, max_pages = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    total_q += s.num_new;
    num_logits += s.sample ? 1 : 0;
    max_q = std::max(max_q, s.num_new);
    const int32_t kv = s.seq->num_computed + s.num_new;
    max_kv = std::max(max_kv, kv);
    max_pages = std::max(max_pages, (kv + page_size_ - 1) / page_size_);
  }
  FG_CHECK(total_q <= max_tokens_ && num_seqs <= max_seqs_ && max_pages <= max_pages_per_seq_,
           "step larger than the batch builder was sized for");

  int32_t* base = static_cast<int32_t*>(pinned_.data());
  int32_t* token_ids = base;
  int32_t* positions = token_ids + total_q;
  int32_t* cu = positions + total_q;
  int32_t* seqlens_kv = cu + num_seqs + 1;
  int32_t* table = seqlens_kv + num_seqs;
  int32_t* slots = table + size_t(num_seqs) * size_t(max_pages);
  int32_t* logits_idx = slots + total_q;
  int32_t* end = logits_idx + num_logits;

  int32_t q = 0, li = 0;
  cu[0] = 0;
  for (int32_t i = 0; i < num_seqs; ++i) {
    const ScheduledSeq& s = plan.seqs[size_t(i)];
    const Sequence& seq = *s.seq;
    const int32_t kv = seq.num_computed + s.num_new;
    FG_CHECK(int64_t(seq.pages.size()) * page_size_ >= kv, "sequence scheduled without enough pages");
    for (int32_t j = 0; j < s.num_new; ++j) {
      const int32_t pos = seq.num_computed + j;
      token_ids[q] = seq.tokens[size_t(pos)];
      positions[q] = pos;
      slots[q] = seq.pages[size_t(pos / page_size_)] * page_size_ + pos % page_size_;
      ++q;
    }
    cu[i + 1] = q;
    seqlens_kv[i] = kv;
    int32_t* row = table + size_t(i) * size_t(max_pages);
    const int32_t used = (kv + page_size_ - 1) / page_size_;
    std::copy(seq.pages.begin(), seq.pages.begin() + used, row);
    std::fill(row + used, row + max_pages, 0);
    if (s.sample) logits_idx[li++] = q - 1;
  }

  StepBatch& b = batch_;
  b.token_ids = {token_ids, size_t(total_q)};
  b.positions = {positions, size_t(total_q)};
  b.cu_seqlens_q = {cu, size_t(num_seqs + 1)};
  b.seqlens_kv = {seqlens_kv, size_t(num_seqs)};
  b.block_table = {table, size_t(num_seqs) * size_t(max_pages)};
  b.slot_mapping = {slots, size_t(total_q)};
  b.logits_indices = {logits_idx, size_t(num_logits)};
  b.blob = {base, size_t(end - base)};
  b.num_seqs = num_seqs;
  b.total_q = total_q;
  b.num_logits = num_logits;
  b.max_q_len = max_q;
  b.max_kv_len = max_kv;
  b.max_pages_per_seq = max_pages;
  b.page_size = page_size_;
  b.decode_only = num_seqs > 0 && max_q == 1 && num_logits == num_seqs;
  return b;
}

}  // namespace fg
