// The decoder families flashgen runs, keyed by config.json's `architectures[0]`. One decoder
// implementation (model/model.h) serves them all; an entry only says how a family differs: default
// head_dim, which projections carry biases, per-head q/k norms, which layers use the sliding
// window, the Gemma norms, embedding scale and soft-capping, fused checkpoint tensors, and
// mixture-of-experts MLPs. Adding a Llama-like family is one table row here plus fixtures.
// Never depends on JSON, weights or a backend.
#pragma once

#include <string>
#include <string_view>

namespace fg {

// Which layers attend through a sliding window.
enum class SlidingWindowRule {
  kNone,        // never (Llama)
  kAllLayers,   // every layer when `sliding_window` is set (Mistral, Mixtral, Phi-3)
  kQwen,        // `layer_types` when given, else layers >= max_window_layers when
                // use_sliding_window is true (Qwen2, Qwen3)
  kFlagged,     // every layer when use_sliding_window is true (Qwen3-MoE)
  kLayerTypes,  // `layer_types` when given, else every layer but each `sliding_window_pattern`-th
                // (Gemma 2: pattern 2; Gemma 3: sliding_window_pattern, default 6)
};

// How a family's config and checkpoint describe its decoder beyond the Llama layout.
enum class ConfigDialect {
  kLlama,     // Llama, Mistral, Qwen2, Qwen3
  kGemma2,    // hidden_activation, query_pre_attn_scalar, attn/final logit soft-capping
  kGemma3,    // Gemma 2's plus q/k norms, rope_local_base_freq / per-layer-type rope_parameters
  kPhi3,      // fused qkv_proj / gate_up_proj, LongRoPE ("su" and "yarn" are its old names)
  kMixtral,   // num_local_experts, block_sparse_moe.experts.E.w1/w2/w3
  kQwen3Moe,  // num_experts, moe_intermediate_size, norm_topk_prob, mlp_only_layers,
              // decoder_sparse_step, mlp.experts.E.gate_proj/up_proj/down_proj
};

struct ArchitectureSpec {
  std::string_view name;  // e.g. "LlamaForCausalLM"
  ConfigDialect dialect = ConfigDialect::kLlama;
  int default_head_dim = 0;          // used when config.json has no head_dim; 0 = hidden / heads
  bool qkv_bias_always = false;      // Qwen2: q/k/v have a bias whatever the config says
  bool attention_bias_flag = false;  // `attention_bias` switches q/k/v/o biases (Llama, Qwen3)
  bool mlp_bias_flag = false;        // `mlp_bias` switches gate/up/down biases (Llama)
  bool qk_norm = false;              // per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3)
  SlidingWindowRule sliding = SlidingWindowRule::kNone;
  int default_sliding_pattern = 0;  // kLayerTypes: every n-th layer is global when no layer_types
  bool default_tied = false;        // tie_word_embeddings when config.json does not say (Gemma)
};

// The entry for `name`, or nullptr when flashgen does not run that architecture.
const ArchitectureSpec* find_architecture(std::string_view name);

// "LlamaForCausalLM, MistralForCausalLM, ..." for error messages.
std::string supported_architectures();

}  // namespace fg
