// Model: the one Llama-family decoder (Llama, Mistral, Qwen2, Qwen3 and their per-family options
// from the registry) running a ragged batch over a paged KV cache through the Backend interface.
//
// One step = one BatchSpec: the model writes all of the step's metadata into a host staging buffer,
// uploads it with ONE copy into device buffers it owns, plans attention once, runs every layer on
// those same buffers, and returns logits [num_logits, vocab] f32 on the device. Nothing in the
// layer loop creates metadata.
//
// Per layer: h = rms_norm(x); qkv = h @ Wqkv^T (+b); [q/k per-head rms_norm]; rope(q, k);
// kv_write; attention; x += o_proj; h = rms_norm(x); x += down(silu(gate) * up).
// The model never knows which backend runs it and never allocates KV pages.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace fg {

class Model {
 public:
  // Reads DIR/config.json (+ generation_config.json), validates and uploads the safetensors
  // weights to `backend` in its act dtype. `backend` must outlive the model.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, Backend& backend);
  // Reads DIR/config.json only and fills every weight with seeded random values on the device
  // (Backend::fill_uniform), for performance work at real shapes without a checkpoint
  // (model/dummy_weights.h; defined in dummy_weights.cc).
  static Result<std::unique_ptr<Model>> load_dummy(const std::string& dir, Backend& backend, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

  // Runs one step and returns logits [spec.num_logits(), vocab] f32 on the device, valid until the
  // next forward. The spec is validated against the model and the cache (ids in range, slots and
  // pages inside the cache); errors are InvalidArgument and leave the cache untouched.
  // Precondition: the results of the previous forward have been consumed (copy_to_host +
  // synchronize), because the host staging buffer is rewritten.
  Result<Tensor> forward(const BatchSpec& spec, KvCache& cache);

  // A KV cache for this model with `num_pages` pages of `page_size` tokens.
  Result<KvCache> make_kv_cache(int num_pages, int page_size) const {
    return KvCache::create(backend_, config_, num_pages, page_size);
  }

 private:
  Model(Backend& backend, ModelConfig config) : backend_(backend), config_(std::move(config)) {}
  Status validate(const BatchSpec& spec, const KvCache& cache) const;
  void reserve(int total_q, int num_logits, size_t meta_bytes);

  Backend& backend_;
  ModelConfig config_;
  ModelWeights weights_;
  Buffer inv_freq_;  // [rotary_dim / 2] f32, device

  // Workspace, grown on demand (capacities in rows).
  int cap_tokens_ = 0;
  int cap_logits_ = 0;
  Buffer residual_;  // [cap_tokens, hidden] act
  Buffer normed_;    // [cap_tokens, hidden] act
  Buffer delta_;     // [cap_tokens, hidden] act
  Buffer wide_;      // [cap_tokens, max(qkv_dim, 2 * inter)] act: qkv, then gate|up
  Buffer narrow_;    // [cap_tokens, max(q_dim, inter)] act: attention out, then silu*up
  Buffer sel_;       // [3, cap_logits, hidden] act: gathered residual, delta, normed
  Buffer logits_;    // [cap_logits, vocab] f32
  size_t cap_meta_ = 0;
  Buffer meta_host_;  // staging for one step's metadata (pinned on cuda)
  Buffer meta_dev_;   // the same bytes on the device
};

}  // namespace fg
