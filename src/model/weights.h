// The decoder's weights on the backend's device, in the backend's activation dtype, laid out for
// one GEMM per projection group:
//  - q/k/v fused into one [q_dim + 2 * kv_dim, hidden] matrix (rows: q heads, then k, then v) and
//    their biases into one [q_dim + 2 * kv_dim] vector (Qwen2, attention_bias);
//  - gate/up fused into one [2 * intermediate, hidden] matrix (rows: gate, then up), which is the
//    [gate | up] layout silu_mul expects;
//  - tied embeddings: lm_head is the embedding table itself.
// Hugging Face tensor names are resolved here (weight_name_*); the loader validates every dtype and
// shape against the config before allocating anything, so a bad checkpoint fails with a one-line
// message and leaves nothing half-loaded.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace fg {

struct LayerWeights {
  Tensor input_norm;    // [hidden] act
  Tensor qkv;           // [q_dim + 2 * kv_dim, hidden] act
  Tensor qkv_bias;      // [q_dim + 2 * kv_dim] act, or undefined
  Tensor q_norm;        // [head_dim] act, or undefined (Qwen3 only)
  Tensor k_norm;        // [head_dim] act, or undefined
  Tensor o;             // [hidden, q_dim] act
  Tensor o_bias;        // [hidden] act, or undefined
  Tensor post_norm;     // [hidden] act
  Tensor gate_up;       // [2 * intermediate, hidden] act
  Tensor gate_up_bias;  // [2 * intermediate] act, or undefined
  Tensor down;          // [hidden, intermediate] act
  Tensor down_bias;     // [hidden] act, or undefined
};

struct ModelWeights {
  Buffer arena;  // every tensor below lives in here
  Tensor embed;  // [vocab, hidden] act
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden] act
  Tensor lm_head;     // [vocab, hidden] act (the same memory as embed when tied)
};

// "model.layers.3.self_attn.q_proj.weight" etc.
std::string weight_name_layer(int layer, const char* suffix);

// Validates and uploads every weight the config needs. Extra tensors in the checkpoint are
// ignored. Blocks until the upload is done.
Result<ModelWeights> load_model_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend);

}  // namespace fg
