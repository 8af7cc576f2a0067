// The table of decoder families (see registry.h).
#include "model/registry.h"

#include <array>

namespace fg {
namespace {

constexpr std::array<ArchitectureSpec, 4> kArchitectures = {{
    {.name = "LlamaForCausalLM", .attention_bias_flag = true, .mlp_bias_flag = true},
    {.name = "MistralForCausalLM", .sliding = SlidingWindowRule::kAllLayers},
    {.name = "Qwen2ForCausalLM", .qkv_bias_always = true, .sliding = SlidingWindowRule::kQwen},
    {.name = "Qwen3ForCausalLM",
     .default_head_dim = 128,
     .attention_bias_flag = true,
     .qk_norm = true,
     .sliding = SlidingWindowRule::kQwen},
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
