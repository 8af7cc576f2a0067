// ModelConfig: what flashgen needs from a Hugging Face checkpoint's config.json (and
// generation_config.json), resolved into one flat struct so the decoder never looks at JSON or at
// the architecture name again.
//
// Both config.json dialects are read:
//  - classic (most published checkpoints): top-level `rope_theta`, `rope_scaling` {type|rope_type,
//    factor, ...}, `torch_dtype`;
//  - transformers 5: `rope_parameters` {rope_type, rope_theta, factor, ...}, `dtype`.
// Per-architecture defaults and rules (which layers use a sliding window, which projections carry a
// bias, per-head q/k norms) are resolved here, from the registry in model/registry.h.
// This file never touches weights or a backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace fg {

enum class RopeScaling { kDefault, kLinear, kDynamic, kLlama3 };

const char* rope_scaling_name(RopeScaling s);

struct RopeConfig {
  RopeScaling type = RopeScaling::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                 // linear, dynamic, llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position = 0;   // llama3 (defaults to max_position_embeddings)
  double partial_rotary_factor = 1.0;  // rotary_dim = head_dim * partial_rotary_factor
  // Per-frequency divisors, [rotary_dim / 2] (a GGUF file's rope_freqs.weight, which is how
  // llama.cpp stores Llama 3.1-style scaling); empty: none.
  std::vector<float> freq_divisors;
};

// Per-family switches, filled from the architecture registry plus the config's own flags.
struct DecoderOptions {
  bool qkv_bias = false;  // q/k/v projections have a bias (Qwen2 always; Llama/Qwen3 attention_bias)
  bool o_bias = false;    // o_proj has a bias (Llama/Qwen3 attention_bias)
  bool mlp_bias = false;  // gate/up/down have a bias (Llama mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3)
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
  DType checkpoint_dtype = DType::kF32;  // torch_dtype / dtype as declared (informational)
  int64_t bos_token_id = -1;             // -1 = none
  // End-of-sequence ids from config.json and generation_config.json (union, deduplicated).
  std::vector<int64_t> eos_token_ids;

  int64_t q_dim() const { return int64_t(num_q_heads) * head_dim; }
  int64_t kv_dim() const { return int64_t(num_kv_heads) * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
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
