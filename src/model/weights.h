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
// different dtypes is kept as weight_dtype(f32) of their exact f32 values. An FP8 matrix (e4m3
// values with block or per-channel scales: an FP8 checkpoint, or `--quantization fp8` at load) is
// kept as weight_dtype(f8_e4m3) of its exact f32 values (e4m3 value * scale, model/fp8_weights.h):
// f32 on the CPU; or, where weight_dtype(f8_e4m3) is f8_e4m3 (CUDA) and the matrix is a linear
// layer's without a bias (k a multiple of 16) whose parts all have one scale per output channel, or
// all have 128 x 128 block scales and tile the matrix in whole blocks (a fine-grained checkpoint
// whose q/k/v or gate/up rows are multiples of 128, as real models' are), as its e4m3 codes plus
// their f32 scale tensor (LayerWeights::*_scale) for Backend::gemm_fp8.
// Norm weights (but Gemma's, f32) and biases are in the activation dtype.
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
#include "model/fp8_weights.h"
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
  // Where a backend keeps FP8 codes (weight f8_e4m3: CUDA, no bias): each such matrix's f32 scales
  // (real weight = code * scale), per output channel [n], or per 128 x 128 block
  // [ceil(n / 128), ceil(k / 128)] with Backend::gemm_fp8's padded row stride; else undefined.
  Tensor qkv_scale, o_scale, gate_up_scale, down_scale;
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
  std::string name;                    // as the file names it (for messages): "blk.0.attn_q.weight"
  std::string file;                    // the file that holds it (for messages)
  std::string dtype_name;              // as the file writes it: "BF16", "Q4_K", ...
  std::vector<int64_t> shape;          // row-major, outermost first
  std::optional<DType> dtype;          // as stored, which is what WeightSource::read yields: f32, f16,
                                       // bf16, a block-quantized dtype (whose rows are whole blocks) or
                                       // f8_e4m3 (a scaled FP8 matrix: fp8_blocks, read_fp8_scales);
                                       // nullopt: the loader cannot read this tensor
  Fp8Blocks fp8_blocks;                // f8_e4m3: the blocks its scales cover (model/fp8_weights.h)
  const void* handle = nullptr;        // the source's own record of the tensor
  const void* scale_handle = nullptr;  // f8_e4m3: the source's record of its scales

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
  // The f32 scales of an f8_e4m3 tensor, [fp8_scale_rows, fp8_scale_cols] row-major
  // (model/fp8_weights.h). Errors: a scale that is not finite and positive, naming the tensor.
  // Precondition: t came from find() with dtype f8_e4m3. Sources without FP8 tensors never get here.
  virtual Status read_fp8_scales(const WeightTensor& t, std::vector<float>& scales) const;
  // For messages: the tensor types this source can load ("F32, F16 or BF16"), and what holds the
  // model's shape ("config.json").
  virtual std::string loadable_types() const = 0;
  virtual std::string config_name() const = 0;
};

// The tensors of a safetensors checkpoint under their own names (which are Hugging Face's). With
// an FP8 `quant` (config.json's quantization_config), a weight stored as F8_E4M3 comes with its
// scale tensor (QuantConfig::scale_name: f32, bf16 or f16, of the shape its blocks give); an FP8
// weight of a module the config lists as kept unquantized, or one without quantization_config,
// is refused.
class SafetensorsWeightSource : public WeightSource {
 public:
  explicit SafetensorsWeightSource(const SafetensorsCheckpoint& ckpt, QuantConfig quant = {})
      : ckpt_(ckpt), quant_(std::move(quant)) {}
  Result<WeightTensor> find(const std::string& hf_name) const override;
  const void* read(const WeightTensor& t, std::vector<uint8_t>& scratch) const override;
  Status read_fp8_scales(const WeightTensor& t, std::vector<float>& scales) const override;
  std::string loadable_types() const override;
  std::string config_name() const override { return "config.json"; }

 private:
  const SafetensorsCheckpoint& ckpt_;
  QuantConfig quant_;
};

// What the loader does besides keeping weights as stored.
struct WeightLoadOptions {
  // kFp8: every linear layer's weight (not the embedding table, not the LM head, not a MoE router)
  // stored as f32, f16 or bf16 is quantized to e4m3 with one scale per output channel
  // (fp8_quantize_rows) and kept as the backend keeps an FP8 checkpoint's weights; weights already
  // FP8 stay as they are.
  LoadQuantization quantization = LoadQuantization::kNone;
};

// Bytes of every weight tensor as kept (a tied LM head counted once): what a decode step reads,
// but for all embedding rows except one.
int64_t weight_bytes(const ModelWeights& w);

// Validates and uploads every weight the config needs. Extra tensors in the checkpoint are
// ignored. Blocks until the upload is done.
// With a shard of a tensor-parallel split (tensor_parallel.h), only that rank's slices are kept
// (and read, but for FP8 parts, which are made whole on the host and then sliced: their scales span
// the tensor): the tensors above then have the shard's local shapes (shard_config), per-channel FP8
// scales those of the rank's rows (a row-parallel weight keeps every row's), and the row-parallel
// biases (o, down) are held by rank 0 alone.
Result<ModelWeights> load_model_weights(const ModelConfig& config, const WeightSource& source, Backend& backend,
                                        const TpShard& shard, const WeightLoadOptions& options = {});
Result<ModelWeights> load_model_weights(const ModelConfig& config, const WeightSource& source, Backend& backend,
                                        const WeightLoadOptions& options = {});
Result<ModelWeights> load_model_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend,
                                        const WeightLoadOptions& options = {});

}  // namespace fg
