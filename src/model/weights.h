// The decoder's weights on the backend's device, laid out for one GEMM per projection group:
//  - q/k/v fused into one [q_dim + 2 * kv_dim, hidden] matrix (rows: q heads, then k, then v) and
//    their biases into one [q_dim + 2 * kv_dim] vector (Qwen2, attention_bias);
//  - gate/up fused into one [2 * intermediate, hidden] matrix (rows: gate, then up), which is the
//    [gate | up] layout silu_mul expects;
//  - tied embeddings: lm_head is the embedding table itself;
//  - Phi-3 checkpoints store qkv_proj and gate_up_proj already fused in that layout;
//  - Gemma's (1 + weight) RMSNorm weights are stored as 1 + weight in f32 (added in f32 at load,
//    as transformers computes them; the act dtype would round away the low bits of weight);
//  - a mixture-of-experts layer's experts are stacked into one [num_experts, 2 * moe_inter,
//    hidden] gate/up tensor and one [num_experts, hidden, moe_inter] down tensor, assembled
//    from the checkpoint's per-expert tensors (Mixtral's w1/w3/w2, Qwen3-MoE's
//    gate_proj/up_proj/down_proj), so each projection is one grouped GEMM (in the activation
//    dtype, as is the router).
// Matrices (the embedding table and every GEMM weight) are kept in the dtype the backend asks for
// (Backend::weight_dtype of the stored dtype): the CPU keeps f32, f16, bf16 and GGUF's quantized
// blocks as stored, CUDA converts to its activation dtype. A fused matrix whose parts are stored in
// different dtypes is kept as weight_dtype(f32) of their exact f32 values. Norm weights (but
// Gemma's, f32) and biases are in the activation dtype.
// Hugging Face tensor names are resolved here (weight_name_*); the loader validates every dtype and
// shape against the config before allocating anything, and every value while uploading (a NaN or
// infinity refuses the file, naming the tensor), so a bad checkpoint fails with a one-line message
// and leaves nothing half-loaded.
//
// Checkpoints come in through a WeightSource, which answers for Hugging Face tensor names: a
// safetensors checkpoint directly, a GGUF file (model/gguf_model.h) by renaming and undoing its
// row permutations. Both feed the same validate-fuse-upload code below, which dequantizes or
// converts (core/dequant.h, Backend::convert) only what the backend does not keep as stored.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensor_parallel.h"

namespace fg {

// "weight" below = the matrix's weight dtype (Backend::weight_dtype, see above); "act" = the
// backend's activation dtype. All contiguous, row-major.
struct LayerWeights {
  Tensor input_norm;     // [hidden] act
  Tensor qkv;            // [q_dim + 2 * kv_dim, hidden] weight
  Tensor qkv_bias;       // [q_dim + 2 * kv_dim] act, or undefined
  Tensor q_norm;         // [head_dim] act, or undefined (Qwen3, Gemma 3)
  Tensor k_norm;         // [head_dim] act, or undefined
  Tensor o;              // [hidden, q_dim] weight
  Tensor o_bias;         // [hidden] act, or undefined
  Tensor attn_out_norm;  // [hidden] act: the attention output's norm (Gemma's post_attention_layernorm), or undefined
  Tensor post_norm;  // [hidden] act: the MLP's input norm (post_attention_layernorm; Gemma's pre_feedforward_layernorm)
  Tensor mlp_out_norm;  // [hidden] act: the MLP output's norm (Gemma's post_feedforward_layernorm), or undefined
  // Dense MLP (undefined in a mixture-of-experts layer)
  Tensor gate_up;       // [2 * intermediate, hidden] weight
  Tensor gate_up_bias;  // [2 * intermediate] act, or undefined
  Tensor down;          // [hidden, intermediate] weight
  Tensor down_bias;     // [hidden] act, or undefined
  // Mixture of experts (undefined in a dense layer)
  Tensor router;          // [num_experts, hidden] act
  Tensor expert_gate_up;  // [num_experts, 2 * moe_intermediate, hidden] act (per expert: gate rows, then up)
  Tensor expert_down;     // [num_experts, hidden, moe_intermediate] act
};

struct ModelWeights {
  Buffer arena;  // every tensor below lives in here
  Tensor embed;  // [vocab, hidden] weight
  std::vector<LayerWeights> layers;
  Tensor final_norm;         // [hidden] act
  Tensor lm_head;            // [vocab, hidden] weight (the same memory as embed when tied)
  int64_t source_bytes = 0;  // bytes read out of the checkpoint's tensors (a shard reads only its slices)
};

// Part of a checkpoint tensor: indices [begin, end) of dimension `dim` (0: rows, 1: columns of a
// matrix); dim < 0: all of it.
struct WeightSlice {
  int dim = -1;
  int64_t begin = 0, end = 0;
};

// "model.layers.3.self_attn.q_proj.weight" etc.
std::string weight_name_layer(int layer, const char* suffix);

// A tensor as a WeightSource describes it, before any of its data is read.
struct WeightTensor {
  std::string name;              // as the file names it (for messages): "blk.0.attn_q.weight"
  std::string file;              // the file that holds it (for messages)
  std::string dtype_name;        // as the file writes it: "BF16", "Q4_K", ...
  std::vector<int64_t> shape;    // row-major, outermost first
  std::optional<DType> dtype;    // as stored, which is what WeightSource::read yields: f32, f16,
                                 // bf16 or a block-quantized dtype (whose rows are whole blocks);
                                 // nullopt: the loader cannot read this tensor
  const void* handle = nullptr;  // the source's own record of the tensor

  int64_t numel() const;
  std::string shape_string() const;  // "[64, 128]"
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor stored under a Hugging Face name, or NotFound naming the file that should hold it.
  virtual Result<WeightTensor> find(const std::string& hf_name) const = 0;
  // The tensor's values as stored (t.dtype), row-major, on the host: either straight from the file
  // or written into `scratch` (rows reordered). Valid until `scratch` changes or the source goes.
  // Precondition: t came from find() and t.dtype is set.
  virtual const void* read(const WeightTensor& t, std::vector<uint8_t>& scratch) const = 0;
  // For messages: the tensor types this source can load ("F32, F16 or BF16"), and what holds the
  // model's shape ("config.json").
  virtual std::string loadable_types() const = 0;
  virtual std::string config_name() const = 0;
};

// The tensors of a safetensors checkpoint under their own names (which are Hugging Face's).
class SafetensorsWeightSource : public WeightSource {
 public:
  explicit SafetensorsWeightSource(const SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}
  Result<WeightTensor> find(const std::string& hf_name) const override;
  const void* read(const WeightTensor& t, std::vector<uint8_t>& scratch) const override;
  std::string loadable_types() const override { return "F32, F16 or BF16"; }
  std::string config_name() const override { return "config.json"; }

 private:
  const SafetensorsCheckpoint& ckpt_;
};

// Bytes of every weight tensor as kept (a tied LM head counted once): what a decode step reads,
// but for all embedding rows except one.
int64_t weight_bytes(const ModelWeights& w);

// Validates and uploads every weight the config needs. Extra tensors in the checkpoint are
// ignored. Blocks until the upload is done.
// With a shard of a tensor-parallel split (tensor_parallel.h), only that rank's slices are read and
// kept: the tensors above then have the shard's local shapes (shard_config), and the row-parallel
// biases (o, down) are held by rank 0 alone.
Result<ModelWeights> load_model_weights(const ModelConfig& config, const WeightSource& source, Backend& backend,
                                        const TpShard& shard);
Result<ModelWeights> load_model_weights(const ModelConfig& config, const WeightSource& source, Backend& backend);
Result<ModelWeights> load_model_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend);

}  // namespace fg
