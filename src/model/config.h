// ModelConfig: what flashgen needs from a Hugging Face checkpoint's config.json (and
// generation_config.json), resolved into one flat struct so the decoder never looks at JSON or at
// the architecture name again.
//
// Both config.json dialects are read:
//  - classic (most published checkpoints): top-level `rope_theta`, `rope_scaling` {type|rope_type,
//    factor, ...}, `torch_dtype` (Gemma 3: `rope_local_base_freq` for its sliding layers);
//  - transformers 5: `rope_parameters` {rope_type, rope_theta, factor, ...}, or nested per layer
//    type {"full_attention": {...}, "sliding_attention": {...}} (Gemma 3), `dtype`.
// Per-architecture defaults and rules (which layers use a sliding window, which projections carry a
// bias, per-head q/k norms, the Gemma norms and soft-capping, mixture-of-experts layers) are
// resolved here, from the registry in model/registry.h. An option flashgen does not implement is
// refused by name, never ignored. This file never touches weights or a backend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/quant_config.h"

namespace fg {

enum class RopeScaling { kDefault, kLinear, kDynamic, kLlama3, kLongRope };

const char* rope_scaling_name(RopeScaling s);

struct RopeConfig {
  RopeScaling type = RopeScaling::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                 // linear, dynamic, llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position = 0;   // llama3 (defaults to max_position_embeddings)
  double partial_rotary_factor = 1.0;  // rotary_dim = head_dim * partial_rotary_factor
  // LongRoPE (Phi-3): per-frequency divisors [rotary_dim / 2] for sequences up to
  // original_max_position tokens (short) and past it (long), and the factor cos and sin are
  // multiplied by (attention_factor, from the config or sqrt(1 + ln(factor) / ln(original))).
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  double attention_factor = 1.0;
  // Per-frequency divisors, [rotary_dim / 2] (a GGUF file's rope_freqs.weight, which is how
  // llama.cpp stores Llama 3.1-style scaling); empty: none.
  std::vector<float> freq_divisors;
};

// The gated MLP's activation: act(gate) * up.
enum class Activation { kSilu, kGeluTanh };

// Per-family switches, filled from the architecture registry plus the config's own flags.
struct DecoderOptions {
  bool qkv_bias = false;          // q/k/v projections have a bias (Qwen2 always; Llama/Qwen3 attention_bias)
  bool o_bias = false;            // o_proj has a bias (Llama/Qwen3 attention_bias)
  bool mlp_bias = false;          // gate/up/down have a bias (Llama mlp_bias)
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  bool norm_plus_one = false;     // RMSNorms scale by (1 + weight) (Gemma); folded into the weights at load
  bool sandwich_norms = false;    // the attention and MLP outputs are RMSNormed before the residual add
                                  // (Gemma 2/3: post_attention_layernorm, post_feedforward_layernorm; the
                                  // MLP's input norm is then pre_feedforward_layernorm)
  bool fused_checkpoint = false;  // the checkpoint stores qkv_proj and gate_up_proj already fused (Phi-3)
  Activation activation = Activation::kSilu;
};

// Mixture-of-experts MLPs (Mixtral, Qwen3-MoE). Each MoE layer routes every token to top_k of
// num_experts experts: softmax over the router's logits, the top_k probabilities (renormalized to
// sum to 1 when `renormalize`), and the sum of the chosen experts' gated MLPs weighted by them.
constexpr int kMaxExperts = 512;         // experts of one MoE layer, at most (the routing kernels' limit)
constexpr int kMaxExpertsPerToken = 16;  // top_k, at most

struct MoeConfig {
  int num_experts = 0;  // 0: a dense model
  int top_k = 0;
  int64_t intermediate_size = 0;  // of one expert
  bool renormalize = true;        // Mixtral always; Qwen3-MoE norm_topk_prob
};

struct ModelConfig {
  std::string dir;           // the model directory this came from
  std::string architecture;  // architectures[0]
  std::string model_type;    // informational
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  DecoderOptions options;
  RopeConfig rope;
  int rotary_dim = 0;  // head_dim * partial_rotary_factor, even
  // Sliding window per layer (0 = full attention); size num_layers.
  std::vector<int> layer_sliding_window;
  // Gemma 3: the RoPE of the sliding-window layers (its own base, no scaling); unset: every layer
  // uses `rope`. Same rotary_dim.
  std::optional<RopeConfig> local_rope;
  double attention_scale = 0.0;  // multiplies q.k: 1 / sqrt(head_dim), or query_pre_attn_scalar^-0.5
  double attn_softcap = 0.0;     // 0 = off; else attention scores become cap * tanh(score / cap)
  double final_softcap = 0.0;    // the same on the final logits (Gemma 2)
  double embedding_scale = 1.0;  // the embedding rows are multiplied by this (Gemma: sqrt(hidden))
  MoeConfig moe;
  // Which layers have a mixture-of-experts MLP (size num_layers; all 0 for dense models).
  std::vector<uint8_t> layer_moe;
  DType checkpoint_dtype = DType::kF32;  // torch_dtype / dtype as declared (informational)
  QuantConfig quant;                     // quantization_config (FP8 checkpoints; model/quant_config.h)
  int64_t bos_token_id = -1;             // -1 = none
  // End-of-sequence ids from config.json and generation_config.json (union, deduplicated).
  std::vector<int64_t> eos_token_ids;

  int64_t q_dim() const { return int64_t(num_q_heads) * head_dim; }
  int64_t kv_dim() const { return int64_t(num_kv_heads) * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  bool is_moe_layer(int layer) const { return !layer_moe.empty() && layer_moe[size_t(layer)] != 0; }
  // The sliding window of every layer when all of them have one (the largest), else 0: the KV a
  // sequence keeps can then be bounded (engine/scheduler.h, "Sliding windows").
  int every_layer_window() const;
};

// The longest context a config may declare (16M tokens): larger values are refused as corrupt, so
// nothing is sized from them.
inline constexpr int64_t kMaxPositions = int64_t(1) << 24;

// Parses `config.json` text (for tests; `path` is used in messages only). Errors name the path and
// the problem in one line.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& path);

// Reads DIR/config.json and, when present, DIR/generation_config.json (for extra eos ids).
Result<ModelConfig> load_model_config(const std::string& dir);

// Reads a whole file; errors name the file.
Result<std::string> read_text_file(const std::string& path);

}  // namespace fg
