// Single-sequence helpers on top of Model::forward for the CLI and the tests: greedy or seeded
// sampling generation, and the logits of every prompt position. Pages are assigned sequentially
// from a private KV cache; the engine (src/engine) does the real scheduling and paging.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/model.h"

namespace fg {

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplingRow sampling;           // temperature <= 0: greedy; `counter` is set per step
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
  int page_size = 16;
  int prefill_chunk = 0;          // > 0: run the prompt in chunks of this many tokens
  std::optional<DType> kv_dtype;  // the KV cache's dtype (kv_cache.h); nullopt: the act dtype
};

// The generated ids (the stop id included when one ends generation). Errors: empty prompt, token
// ids outside the vocabulary, bad page size.
Result<std::vector<int32_t>> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& options);

// Logits of every prompt position, row-major [prompt.size(), vocab] f32 on the host.
// `kv_dtype` as GenerateOptions::kv_dtype.
Result<std::vector<float>> prompt_logits(Model& model, std::span<const int32_t> prompt, int page_size,
                                         int prefill_chunk = 0, std::optional<DType> kv_dtype = std::nullopt);

}  // namespace fg
