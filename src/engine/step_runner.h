// StepRunner: what the engine needs from a model — one forward pass over a StepBatch, returning
// the logits of the rows the step samples. ModelRunner (model_runner.h) implements it over the
// model layer; tests implement it with small fakes. The engine knows nothing else of the model.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/step_batch.h"

namespace fg {

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // The backend the logits live on; the sampler runs there too.
  virtual Backend& backend() = 0;
  virtual int32_t vocab_size() const = 0;
  // Longest sequence (prompt + output) the model accepts.
  virtual int32_t max_model_len() const = 0;
  // The model's end-of-sequence ids (config / generation_config).
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // Geometry of the paged KV cache the runner allocated; the engine's page pool mirrors it.
  virtual int32_t kv_num_pages() const = 0;
  virtual int32_t kv_page_size() const = 0;

  // Runs the model over the batch. Returns logits [batch.num_logits, vocab] f32 on backend(),
  // row i for batch.logits_indices[i]; valid (and writable by the sampler) until the next call.
  virtual Result<Tensor> forward(const StepBatch& batch) = 0;
};

}  // namespace fg
