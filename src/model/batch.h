// BatchSpec: the host-side description of one forward step (DESIGN.md's ForwardBatch before
// upload): some new tokens for some sequences whose earlier tokens are already in the paged KV
// cache. Built once per step; the model uploads it with one copy and every layer reuses it.
// build_batch_spec makes one from per-sequence chunks; page allocation is the caller's business.
// Never depends on a backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace fg {

// A non-owning view of one step's metadata, in BatchSpec's layout: what Model::forward reads.
// The engine fills it straight from its pinned step block, so a step's metadata is copied on the
// host exactly once (into the model's staging buffer, which is also where padding for the decode
// graphs happens).
struct BatchView {
  std::span<const int32_t> token_ids;     // [total_q]
  std::span<const int32_t> positions;     // [total_q]
  std::span<const int32_t> cu_seqlens_q;  // [num_seqs + 1]
  std::span<const int32_t> seqlens_kv;    // [num_seqs]
  std::span<const int32_t> block_table;   // [num_seqs * max_pages_per_seq] row-major
  int max_pages_per_seq = 0;
  std::span<const int32_t> slot_mapping;    // [total_q]
  std::span<const int32_t> logits_indices;  // [num_logits]

  int num_seqs() const { return int(seqlens_kv.size()); }
  int total_q() const { return int(token_ids.size()); }
  int num_logits() const { return int(logits_indices.size()); }
};

struct BatchSpec {
  std::vector<int32_t> token_ids;     // [total_q] new tokens of all sequences, sequence-major
  std::vector<int32_t> positions;     // [total_q] position of each new token in its sequence
  std::vector<int32_t> cu_seqlens_q;  // [num_seqs + 1] prefix sums of new-token counts
  std::vector<int32_t> seqlens_kv;    // [num_seqs] kv length including this step's tokens
  std::vector<int32_t> block_table;   // [num_seqs * max_pages_per_seq] page ids, row-major
  int max_pages_per_seq = 0;
  std::vector<int32_t> slot_mapping;    // [total_q] page * page_size + offset of each new token
  std::vector<int32_t> logits_indices;  // [num_logits] rows of the batch whose logits are wanted

  int num_seqs() const { return int(seqlens_kv.size()); }
  int total_q() const { return int(token_ids.size()); }
  int num_logits() const { return int(logits_indices.size()); }
  BatchView view() const {
    return BatchView{token_ids,   positions,         cu_seqlens_q, seqlens_kv,
                     block_table, max_pages_per_seq, slot_mapping, logits_indices};
  }
};

enum class LogitsWanted { kNone, kLast, kAll };

// One sequence's part of a step.
struct SequenceChunk {
  std::span<const int32_t> new_tokens;  // the tokens to run now (>= 1)
  int num_cached = 0;                   // tokens of this sequence already in the cache
  std::span<const int32_t> pages;       // the sequence's pages in order; must cover
                                        // num_cached + new_tokens.size() tokens
  LogitsWanted logits = LogitsWanted::kLast;
};

// Lays out the chunks in order; logits rows follow the same order (all rows of a kAll chunk, the
// last row of a kLast chunk). Errors: empty chunk, negative num_cached, too few pages.
Result<BatchSpec> build_batch_spec(std::span<const SequenceChunk> chunks, int page_size);

}  // namespace fg
