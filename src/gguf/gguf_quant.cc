// The ggml type table (see gguf_quant.h). The loadable types are flashgen dtypes; their block
// layouts and exact dequantization live in core/dequant.h, which both the loader and the CPU
// backend's kernels use.
#include "gguf/gguf_quant.h"

#include <array>

#include "core/dequant.h"
#include "core/status.h"

namespace fg {
namespace {

constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4, true, DType::kF32},
    {GgmlType::kF16, "F16", 1, 2, true, DType::kF16},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true, DType::kQ4_0},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true, DType::kQ4_1},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, false, {}},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, false, {}},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true, DType::kQ8_0},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, false, {}},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, false, {}},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, false, {}},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true, DType::kQ4_K},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true, DType::kQ5_K},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true, DType::kQ6_K},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false, {}},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false, {}},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false, {}},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false, {}},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false, {}},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, false, {}},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false, {}},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false, {}},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, false, {}},
    {GgmlType::kI8, "I8", 1, 1, false, {}},
    {GgmlType::kI16, "I16", 1, 2, false, {}},
    {GgmlType::kI32, "I32", 1, 4, false, {}},
    {GgmlType::kI64, "I64", 1, 8, false, {}},
    {GgmlType::kF64, "F64", 1, 8, false, {}},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false, {}},
    {GgmlType::kBF16, "BF16", 1, 2, true, DType::kBF16},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false, {}},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false, {}},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, false, {}},
    {GgmlType::kNVFP4, "NVFP4", 64, 36, false, {}},
    {GgmlType::kQ1_0, "Q1_0", 128, 18, false, {}},
}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

std::string ggml_loadable_types() {
  // In the order users meet them: plain floats first, then the quantized formats.
  static const GgmlType kOrder[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                                    GgmlType::kQ4_1, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  std::string s;
  for (GgmlType t : kOrder) s += std::string(s.empty() ? "" : ", ") + ggml_type_info(t)->name;
  return s;
}

void ggml_dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  FG_CHECK(info != nullptr && info->loadable, "ggml_dequantize: type cannot be dequantized");
  FG_CHECK(n >= 0 && n % info->block_size == 0, "ggml_dequantize: element count is not a whole number of blocks");
  dequantize(info->dtype, src, dst, n);
}

}  // namespace fg
