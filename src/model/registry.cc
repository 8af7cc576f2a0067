// The table of decoder families (see registry.h).
#include "model/registry.h"

#include <array>

namespace fg {
namespace {

constexpr std::array<ArchitectureSpec, 9> kArchitectures = {{
    {.name = "LlamaForCausalLM", .attention_bias_flag = true, .mlp_bias_flag = true},
    {.name = "MistralForCausalLM", .sliding = SlidingWindowRule::kAllLayers},
    {.name = "Qwen2ForCausalLM", .qkv_bias_always = true, .sliding = SlidingWindowRule::kQwen},
    {.name = "Qwen3ForCausalLM",
     .default_head_dim = 128,
     .attention_bias_flag = true,
     .qk_norm = true,
     .sliding = SlidingWindowRule::kQwen},
    {.name = "Gemma2ForCausalLM",
     .dialect = ConfigDialect::kGemma2,
     .default_head_dim = 256,
     .attention_bias_flag = true,
     .sliding = SlidingWindowRule::kLayerTypes,
     .default_sliding_pattern = 2,
     .default_tied = true},
    {.name = "Gemma3ForCausalLM",
     .dialect = ConfigDialect::kGemma3,
     .default_head_dim = 256,
     .attention_bias_flag = true,
     .qk_norm = true,
     .sliding = SlidingWindowRule::kLayerTypes,
     .default_sliding_pattern = 6,
     .default_tied = true},
    {.name = "Phi3ForCausalLM", .dialect = ConfigDialect::kPhi3, .sliding = SlidingWindowRule::kAllLayers},
    {.name = "MixtralForCausalLM", .dialect = ConfigDialect::kMixtral, .sliding = SlidingWindowRule::kAllLayers},
    {.name = "Qwen3MoeForCausalLM",
     .dialect = ConfigDialect::kQwen3Moe,
     .attention_bias_flag = true,
     .qk_norm = true,
     .sliding = SlidingWindowRule::kFlagged},
}};

}  // namespace

const ArchitectureSpec* find_architecture(std::string_view name) {
  for (const ArchitectureSpec& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (const ArchitectureSpec& a : kArchitectures) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

}  // namespace fg
