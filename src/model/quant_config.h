// QuantConfig: the `quantization_config` of an FP8 checkpoint's config.json, and the on-the-fly FP8
// quantization a user may ask for at load (`--quantization fp8`).
//
// Two published FP8 checkpoint formats are read (docs/architecture.md, "FP8 weights"):
//  - transformers' fine-grained FP8 (quant_method "fp8", as Qwen3-*-FP8 ship): float8_e4m3fn
//    weights with one f32 scale per 128 x 128 block (`<module>.weight_scale_inv`, despite the name
//    the factor the stored value is multiplied by), activations scaled dynamically;
//    `modules_to_not_convert` lists modules kept in bf16;
//  - compressed-tensors "float-quantized" (quant_method "compressed-tensors", as the
//    "-FP8-dynamic" checkpoints ship): float8_e4m3fn weights with one scale per output channel
//    (`<module>.weight_scale`, [out, 1]), activations scaled dynamically per token; `ignore` lists
//    modules (names or "re:" regexes) kept in bf16.
// In both, real weight = e4m3 value * scale of its block. Any other method, field or value
// (static activation scales, int8, other block sizes, a KV-cache scheme) is refused by name.
// This file never touches weights or a backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg {

enum class WeightQuantization {
  kNone,
  kFp8Block,    // e4m3 weights, one scale per block_rows x block_cols block
  kFp8Channel,  // e4m3 weights, one scale per output channel (row)
};

const char* weight_quantization_name(WeightQuantization q);

struct QuantConfig {
  WeightQuantization method = WeightQuantization::kNone;
  std::string quant_method;  // as config.json names it ("fp8", "compressed-tensors"), for messages
  int64_t block_rows = 0;    // kFp8Block: weight_block_size
  int64_t block_cols = 0;
  // Modules kept unquantized: exact module names ("lm_head", "model.layers.0.mlp.gate") or, for
  // compressed-tensors, "re:<regex>" matched against the whole module name.
  std::vector<std::string> ignored;

  bool quantized() const { return method != WeightQuantization::kNone; }
  // The checkpoint name of a weight's scale tensor: "<module>.weight_scale_inv" (fine-grained) or
  // "<module>.weight_scale" (compressed-tensors). Precondition: quantized(), weight_name ends in ".weight".
  std::string scale_name(const std::string& weight_name) const;
  // Whether the module that owns `weight_name` ("model.layers.0.mlp.down_proj.weight") is listed
  // as kept unquantized. transformers matches modules_to_not_convert as substrings of the module
  // name; compressed-tensors matches whole names or "re:" regexes.
  bool is_ignored(const std::string& weight_name) const;
};

// Parses the `quantization_config` object (as JSON text); `path` names config.json in messages.
Result<QuantConfig> parse_quant_config(const std::string& json_text, const std::string& path);

// What a user asks the loader to do to a checkpoint's linear weights (`--quantization`).
enum class LoadQuantization {
  kNone,  // keep them as stored
  kFp8,   // quantize float linear weights to e4m3 with per-output-channel scales (amax / 448)
};

// "fp8" -> kFp8, "" or "none" -> kNone; anything else InvalidArgument naming the value.
Result<LoadQuantization> parse_load_quantization(const std::string& name);

}  // namespace fg
