// Dummy weights: every tensor a real checkpoint of this config would have, in the same fused
// layout as load_model_weights, filled on the device with seeded uniform values scaled so that
// activations stay finite through many layers (linear layers U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// norms 1, biases small). For throughput measurements at real shapes (engine_bench,
// `flashgen generate --dummy-weights`); the text such a model produces is meaningless.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace fg {

// Errors: the arena does not fit in the backend's memory. `quantization` kFp8: the linear weights
// without a bias are e4m3 codes with per-channel scales (random act rows quantized per row), as a
// backend that computes on FP8 weights keeps them (weights.h); a config with the fine-grained FP8
// quantization_config: the same codes with 128 x 128 block scales; Unsupported on other backends.
Result<ModelWeights> make_dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed,
                                        LoadQuantization quantization = LoadQuantization::kNone);

// Bytes the weights of this config occupy in `act` dtype (for the bandwidth floor of a decode step).
int64_t model_weight_bytes(const ModelConfig& config, DType act);
// The weight bytes one decode token reads: all of them for a dense model; for a mixture of experts
// only top_k experts of each MoE layer (plus everything else).
int64_t model_active_weight_bytes(const ModelConfig& config, DType act);

}  // namespace fg
