// StepRunner: what the engine needs from a model — a block to write each step's metadata into,
// and one forward pass over it, returning the logits of the rows the step samples. ModelRunner (model_runner.h)
// implements it over the model layer; tests implement it with small fakes. The engine knows nothing else of the model.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"

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
  // The sliding window every layer attends through (the widest), or 0 when some layer sees the
  // whole context. With one, the scheduler releases pages no future query can reach.
  virtual int32_t kv_window() const { return 0; }
  // Sequences whose K/V differ for the same tokens get different variants, so the prefix cache
  // never shares pages between them (LongRoPE: a prompt longer than the pretraining length rotates
  // every key with the long table). 0 for most models.
  virtual uint64_t kv_variant(int32_t prompt_len) const {
    (void)prompt_len;
    return 0;
  }

  // The block the next step's metadata is written into, laid out for `shape` (pinned memory the
  // forward uploads as it is). Precondition: the previous step's logits have been consumed.
  virtual StepWriter begin_step(const StepShape& shape) = 0;
  // Runs the model over the step written into begin_step's block. Returns logits
  // [step.num_logits(), vocab] f32 on backend(), row i for step.logits_indices[i]; valid (and
  // writable by the sampler) until the next call.
  virtual Result<Tensor> forward(const StepMetadata& step) = 0;

  // How many steps so far did one-time setup inside forward (recorded a CUDA graph for a new batch
  // size, ...): a step that moved it took longer than the same step will from now on, so the
  // engine's step-time model (engine/step_latency.h) does not learn from it. The draft's count
  // is its own.
  virtual int64_t setup_steps() const { return 0; }

  // The draft model for speculative decoding, on the same backend with its own KV cache (as many
  // pages as this runner's), or nullptr when none was loaded.
  virtual StepRunner* draft() { return nullptr; }
};

}  // namespace fg
