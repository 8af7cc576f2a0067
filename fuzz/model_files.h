// What the model-file fuzz targets check after a config parsed: the invariants every later stage
// relies on, and a load of the weights (validation, NaN checks, fusion, upload) on the CPU backend
// when the config is small enough to load in the fuzzer.
#pragma once

#include "backend/backend.h"
#include "fuzz_util.h"
#include "model/config.h"
#include "model/weights.h"

namespace fg::fuzz {

inline void check_config(const ModelConfig& c) {
  FG_FUZZ_CHECK(c.num_layers > 0 && c.num_layers <= 4096);
  FG_FUZZ_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.vocab_size > 0);
  FG_FUZZ_CHECK(c.num_q_heads > 0 && c.num_kv_heads > 0 && c.num_q_heads % c.num_kv_heads == 0);
  FG_FUZZ_CHECK(c.head_dim > 0 && c.rotary_dim >= 2 && c.rotary_dim <= c.head_dim && c.rotary_dim % 2 == 0);
  FG_FUZZ_CHECK(c.max_position_embeddings > 0 && c.max_position_embeddings <= (int64_t(1) << 24));
  FG_FUZZ_CHECK(c.rms_norm_eps > 0.0);
  FG_FUZZ_CHECK(c.layer_sliding_window.size() == size_t(c.num_layers));
}

// Elements of every weight the config asks for (saturating), to decide whether a load is cheap.
inline int64_t config_weight_elements(const ModelConfig& c) {
  const double per_layer = double(c.qkv_dim()) * double(c.hidden_size) + double(c.hidden_size) * double(c.q_dim()) +
                           3.0 * double(c.intermediate_size) * double(c.hidden_size);
  const double total = per_layer * c.num_layers + 2.0 * double(c.vocab_size) * double(c.hidden_size);
  return total > 1e15 ? int64_t(1e15) : int64_t(total);
}

// Loads the weights on the CPU backend when they are small; a load either succeeds with every
// tensor in place or fails with a message.
inline void try_load(const ModelConfig& c, const WeightSource& source) {
  if (config_weight_elements(c) > (int64_t(1) << 20)) return;
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  Result<ModelWeights> w = load_model_weights(c, source, *cpu);
  if (w.is_ok()) {
    FG_FUZZ_CHECK(w->embed.defined() && w->lm_head.defined() && w->layers.size() == size_t(c.num_layers));
  } else {
    FG_FUZZ_CHECK(!w.status().message().empty());
  }
}

}  // namespace fg::fuzz
