// Sampler glue: turns the logits rows of one step into tokens.
//
// The token choice itself is Backend::sample (temperature, top-k, top-p, min-p; seeded by the
// request's seed and its output position, so it does not depend on batch mates or preemption).
// Penalties and logprobs are applied on the host, and only when a row asks for them: the whole
// logits block is copied to pinned host memory once, penalised rows are rewritten and copied back
// with one transfer, then the backend samples. Logprobs are the log-softmax of the logits after
// penalties and before temperature / truncation (the model's distribution the client can compare).
// Steps without penalties or logprobs move only the sampled ids back to the host.
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

class Sampler {
 public:
  Sampler(Backend& backend, int32_t vocab_size, int32_t max_rows);

  // logits: [seqs.size(), vocab] f32 on the backend, row i belongs to seqs[i]; penalised rows are
  // rewritten in place. Appends one SampledToken per row to `out`.
  Status sample(Tensor& logits, std::span<Sequence* const> seqs, std::vector<SampledToken>& out);

 private:
  void apply_penalties(const Sequence& seq, float* row) const;
  void fill_logprobs(const float* row, int32_t token, int n, SampledToken& out) const;

  Backend& backend_;
  int32_t vocab_;
  int32_t max_rows_;
  Buffer host_logits_;   // [rows, vocab] f32 pinned, grown to the largest block that needed it
  Buffer ids_device_;    // [max_rows] i32
  Buffer ids_host_;      // [max_rows] i32 pinned
  std::vector<SamplingRow> rows_;
};

}  // namespace fg
