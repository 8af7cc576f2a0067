// The decoder families flashgen runs, keyed by config.json's `architectures[0]`. One decoder
// implementation (model/model.h) serves them all; an entry only says how a family differs: default
// head_dim, which projections carry biases, per-head q/k norms, and which layers use the sliding
// window. Adding a Llama-like family is one table row here plus fixtures.
// Never depends on JSON, weights or a backend.
#pragma once

#include <string>
#include <string_view>

namespace fg {

// Which layers attend through a sliding window.
enum class SlidingWindowRule {
  kNone,       // never (Llama)
  kAllLayers,  // every layer when `sliding_window` is set (Mistral)
  kQwen,       // `layer_types` when given, else layers >= max_window_layers when
               // use_sliding_window is true (Qwen2, Qwen3)
};

struct ArchitectureSpec {
  std::string_view name;             // e.g. "LlamaForCausalLM"
  int default_head_dim = 0;          // used when config.json has no head_dim; 0 = hidden / heads
  bool qkv_bias_always = false;      // Qwen2: q/k/v have a bias whatever the config says
  bool attention_bias_flag = false;  // `attention_bias` switches q/k/v/o biases (Llama, Qwen3)
  bool mlp_bias_flag = false;        // `mlp_bias` switches gate/up/down biases (Llama)
  bool qk_norm = false;              // per-head q/k RMSNorm before RoPE (Qwen3)
  SlidingWindowRule sliding = SlidingWindowRule::kNone;
};

// The entry for `name`, or nullptr when flashgen does not run that architecture.
const ArchitectureSpec* find_architecture(std::string_view name);

// "LlamaForCausalLM, MistralForCausalLM, ..." for error messages.
std::string supported_architectures();

}  // namespace fg
