// One forward step's metadata (DESIGN.md's ForwardBatch): some new tokens for some sequences whose
// earlier tokens are already in the paged KV cache, as i32 arrays in ONE block of host memory
// (pinned on CUDA). A StepWriter writes it once per step, straight into the block the model
// uploads with one copy (Model::begin_step); every layer reuses the uploaded copy. Nothing here
// allocates, and nothing depends on a backend.
//
// Block layout (StepLayout, offsets in i32 words), each array at its capacity:
//   token_ids [total_q] | positions [total_q] | cu_seqlens_q [num_seqs + 1] | seqlens_kv [num_seqs]
//   | block_table [num_seqs, pages_per_seq] | slot_mapping [total_q] | logits_indices [num_logits]
//   | rope words [total_q] (dynamic-NTK and LongRoPE models only): the writer puts each token's
//     RoPE length there (i32, see SequenceChunk::rope_length); the model turns it into an f32
//     base (dynamic NTK) or an i32 table index (LongRoPE) before the upload
// Capacities can exceed the step (decode graphs lay every step of a bucket out at the bucket's
// size, so the recorded kernels see the same addresses); rows past the step are the model's to pad.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace fg {

// The sizes of one step.
struct StepShape {
  int num_seqs = 0;
  int total_q = 0;     // new tokens of all sequences
  int num_logits = 0;  // rows whose logits are wanted
  int max_q_len = 0;   // new tokens of one sequence, at most
  int max_kv_len = 0;  // kv length (cached + new) of one sequence, at most
  bool decode_only() const { return num_seqs > 0 && max_q_len == 1; }
};

// Where each array of a step's block sits, for given capacities.
struct StepLayout {
  int total_q = 0, num_seqs = 0, num_logits = 0, pages_per_seq = 0;  // capacities
  size_t ids = 0, pos = 0, cu = 0, skv = 0, bt = 0, slot = 0, lidx = 0, base = 0, words = 0;

  static StepLayout make(int total_q, int num_seqs, int num_logits, int pages_per_seq, bool rope_bases);
};

// A view of one step's block. The spans cover the step's own rows; `max_pages_per_seq` is the
// block table's row stride (the layout's capacity), so a row holds the sequence's pages then 0s.
struct StepMetadata {
  StepLayout layout;
  int32_t* words = nullptr;  // [layout.words]
  int page_size = 0;
  std::span<const int32_t> token_ids;       // [total_q]
  std::span<const int32_t> positions;       // [total_q] position of each new token in its sequence
  std::span<const int32_t> cu_seqlens_q;    // [num_seqs + 1] prefix sums of new-token counts
  std::span<const int32_t> seqlens_kv;      // [num_seqs] kv length including this step's tokens
  std::span<const int32_t> block_table;     // [num_seqs * max_pages_per_seq] row-major
  std::span<const int32_t> slot_mapping;    // [total_q] page * page_size + offset of each new token
  std::span<const int32_t> logits_indices;  // [num_logits] rows whose logits are wanted, in order
  int max_pages_per_seq = 0;
  // Summaries the writer keeps, so validating a step costs O(1): the largest new-token count and
  // kv length of a sequence, and the range of the page ids and token ids it wrote.
  int max_q_len = 0;
  int max_kv_len = 0;
  int32_t min_page = 0, max_page = -1;
  int32_t min_token = 0, max_token = -1;

  int num_seqs() const { return int(seqlens_kv.size()); }
  int total_q() const { return int(token_ids.size()); }
  int num_logits() const { return int(logits_indices.size()); }
  bool decode_only() const { return num_seqs() > 0 && max_q_len == 1; }
};

enum class LogitsWanted { kNone, kLast, kAll };

// The same step over another copy of its block (a tensor-parallel rank's): the spans point into
// `words` ([step.layout.words]) at the same offsets; the summaries are kept.
StepMetadata rebase_step(const StepMetadata& step, int32_t* words);

// One sequence's part of a step.
struct SequenceChunk {
  std::span<const int32_t> new_tokens;  // the tokens to run now (>= 1)
  int num_cached = 0;                   // tokens of this sequence already in the cache
  std::span<const int32_t> pages;       // the sequence's pages in order; must cover
                                        // num_cached + new_tokens.size() tokens
  LogitsWanted logits = LogitsWanted::kLast;
  // Length-dependent RoPE (LongRoPE): a new token at position p is rotated as in a sequence of
  // max(rope_length, p + 1) tokens. The engine passes the prompt length, which makes every key a
  // function of the sequence alone (not of how its prompt was chunked, batched, preempted or
  // speculated) and equal to transformers' for a prompt run at once then decoded token by token.
  // 0: the length after this step (transformers' rule for one forward call).
  int32_t rope_length = 0;
};

// The shape of a step made of `chunks` (no validation).
StepShape step_shape(std::span<const SequenceChunk> chunks);

// Writes sequences one after another into a block laid out by `layout`. Rows of the logits
// follow the same order (all rows of a kAll chunk, the last row of a kLast chunk).
class StepWriter {
 public:
  // words: [layout.words]; the step may use less than the layout's capacities.
  StepWriter(const StepLayout& layout, int32_t* words, int page_size);

  // Appends one sequence. Errors (nothing is written): no new tokens, a negative cached length,
  // too few pages, or more tokens / sequences / logits rows / pages than the layout holds.
  Status add(const SequenceChunk& chunk);
  // After the sequences: `count` more logits rows, of the new tokens [first_token, first_token +
  // count) of the step (indices over all sequences' new tokens), returned after the chunks' rows.
  Status add_logits_rows(int first_token, int count);
  // The finished step's view.
  StepMetadata finish() const;

 private:
  StepMetadata m_;
  int seqs_ = 0, tokens_ = 0, logits_ = 0;
};

}  // namespace fg
