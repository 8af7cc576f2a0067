// StepBatch: the host-side description of one forward pass, as the batch builder lays it out in
// pinned host memory (one contiguous block, so the upload is one async copy). Every layer of the
// model reuses the uploaded copy; nothing is rebuilt per layer.
#pragma once

#include <cstdint>
#include <span>

namespace fg {

struct StepBatch {
  // All spans point into one pinned host block (`blob`), in this order, i32 each.
  std::span<const int32_t> token_ids;       // [total_q]
  std::span<const int32_t> positions;       // [total_q] position of each new token in its sequence
  std::span<const int32_t> cu_seqlens_q;    // [num_seqs + 1] prefix sums of new-token counts
  std::span<const int32_t> seqlens_kv;      // [num_seqs] kv length including this step's tokens
  std::span<const int32_t> block_table;     // [num_seqs, max_pages_per_seq] row-major, padded with 0
  std::span<const int32_t> slot_mapping;    // [total_q] page * page_size + offset of each new token
  std::span<const int32_t> logits_indices;  // [num_logits] rows of the step whose logits are sampled
  std::span<const int32_t> blob;            // everything above, contiguous (for the single upload)
  int32_t num_seqs = 0;
  int32_t total_q = 0;
  int32_t num_logits = 0;
  int32_t max_q_len = 0;
  int32_t max_kv_len = 0;
  int32_t max_pages_per_seq = 0;
  int32_t page_size = 0;
  bool decode_only = false;  // every sequence has exactly one new token (CUDA-graph eligible)
};

}  // namespace fg
