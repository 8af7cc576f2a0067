// Sampler glue: turns the logits rows of one step into tokens.
//
// The token choice itself is Backend::sample (temperature, top-k, top-p, min-p; seeded by the
// request's seed and its output position, so it does not depend on batch mates or preemption).
// Penalties, logit biases and min_new_tokens' masking of the tokens that end a request (its
// end-of-sequence ids unless ignore_eos, and its stop_token_ids, while fewer output tokens than
// that precede the row) are applied on the host, and only when a row asks for them: the whole
// logits block is copied to pinned host memory once, those rows are rewritten and copied back with
// one transfer, then the backend samples. Logprobs come from the backend (Backend::logprobs, after
// sampling, for the rows that ask): the log-softmax of the logits after penalties, biases and masks and
// before temperature / truncation (the model's distribution the client can compare), the sampled
// token's value and the top n; only those few numbers travel to the host. Steps without penalties or
// biases move only the sampled ids (and asked-for logprobs) back to the host.
//
// Speculative verification: a sequence with drafts owns 1 + k consecutive rows (the target's
// logits after its last token and after each draft). Every row gets the sampling rule with the
// output position it would have without speculation; greedy requests take the backend's argmax of
// each row and spec::verify_greedy (so their tokens are exactly the non-speculative ones), sampled
// requests are verified on the host by rejection sampling (spec::verify_sampled) against the rule's
// distribution of each row, which the backend computes with the sample (a kernel on CUDA) and
// copies back. Penalties of row j see the drafts before it as if accepted.
//
// Constrained sequences (Sequence::constraint): their token masks are filled on the host while
// the GPU runs the step, then applied to their rows (Backend::mask_logits, or on the host copy
// when the step needs one) before penalties' effects are sampled; logprobs are then those of the
// constrained distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"

namespace fg {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                    // when the request asked for logprobs
  std::vector<TokenLogprob> top_logprobs;  // top n, best first
};

// One sequence's rows of a step's logits: one row, or 1 + draft.size() rows to verify.
struct SampleGroup {
  Sequence* seq = nullptr;
  std::span<const int32_t> draft;      // the drafted tokens the rows after the first follow
  std::span<const float> draft_probs;  // [draft.size(), vocab] the proposer's distributions, or
                                       // empty (a point-mass proposer, or greedy)
  int32_t rows() const { return 1 + int32_t(draft.size()); }
};

// What a group produced: the accepted drafts, then one token of the target's.
struct SampleOutcome {
  std::vector<SampledToken> tokens;
  int32_t accepted = 0;
};

class Sampler {
 public:
  // eos_ids: the model's end-of-sequence tokens (masked with min_new_tokens).
  Sampler(Backend& backend, int32_t vocab_size, int32_t max_rows, std::vector<int32_t> eos_ids);

  // logits: [sum of the groups' rows, vocab] f32 on the backend, in group order; penalised rows
  // are rewritten in place. Appends one outcome per group to `out`.
  Status sample(Tensor& logits, std::span<const SampleGroup> groups, std::vector<SampleOutcome>& out);

  // Prompt logprobs: for each row i of logits ([r, vocab] f32 on the backend, read-only), the
  // log-softmax at targets[i] (the prompt token that row predicts) and the top n (n <= 20). The
  // rows are the model's as they are: nothing is applied to them. out[i].id = targets[i].
  Status prompt_logprobs(const Tensor& logits, std::span<const int32_t> targets, int n,
                         std::vector<PromptLogprob>& out);

 private:
  // Whether row j of the sequence's group changes on the host: penalties or biases, or tokens that
  // end the request masked because fewer than min_new_tokens output tokens precede it.
  static bool adjusts(const Sequence& seq, int32_t j) {
    return seq.params.adjusts_logits() || seq.num_output() + j < seq.params.min_new_tokens;
  }
  // Penalties as if `extra` (drafts before this row) followed the sequence's tokens, then the
  // request's logit biases, then min_new_tokens' masks.
  void adjust_row(const Sequence& seq, std::span<const int32_t> extra, float* row) const;

  Backend& backend_;
  int32_t vocab_;
  int32_t max_rows_;
  std::vector<int32_t> eos_ids_;
  Buffer host_logits_;  // [rows, vocab] f32 pinned, grown to the largest block that needed it
  Buffer ids_device_;   // [max_rows] i32
  Buffer ids_host_;     // [max_rows] i32 pinned
  std::vector<SamplingRow> rows_;
  // Sampled verification: the rule's distribution of each verified row ([rows, vocab] f32), from
  // Backend::sample, on the device and pinned on the host.
  Buffer dist_device_, dist_host_;
  // Token masks of constrained rows (engine/token_constraint.h), pinned and on the device.
  Buffer mask_host_, mask_device_, mask_rows_host_, mask_rows_device_;
  // Backend::logprobs: the rows that ask (pinned and on the device), and its outputs for up to
  // max_rows rows, [stats (r, 2) f32 | top ids (r, n) i32 | top logprobs (r, n) f32] in 4-byte words.
  static constexpr size_t kLpWords = 2 + 2 * size_t(Backend::kMaxTopLogprobs);
  std::vector<int32_t> lp_rows_;
  Buffer lp_rows_host_, lp_rows_device_, lp_out_host_, lp_out_device_;
  // prompt_logprobs: [rows | targets] i32 and the same output block, grown to the largest call.
  int64_t prompt_cap_ = 0;
  Buffer prompt_in_host_, prompt_in_device_, prompt_out_host_, prompt_out_device_;
};

}  // namespace fg
