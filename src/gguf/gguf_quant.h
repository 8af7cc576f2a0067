// ggml tensor types as GGUF files store them: the type ids, their block geometry (elements per
// block, bytes per block) and exact dequantization to f32 of the types flashgen loads.
//
// Every type the format defines is listed, so the GGUF reader can check the byte size of any
// tensor (and name a type flashgen cannot load). The loadable ones (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q4_K, Q5_K, Q6_K) are flashgen dtypes (core/dtype.h), so a backend can keep them as they
// are stored; their exact dequantization, bit for bit the reference one, is core/dequant.h.
// Never depends on anything but core.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace fg {

// ggml type ids (the values stored in a GGUF tensor table).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;     // "Q4_K"
  int64_t block_size;   // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool loadable;        // a flashgen dtype: ggml_dequantize handles it
  DType dtype;          // that dtype (loadable types only)
};

// The entry for a type id, or nullptr when the id is not a ggml type.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
inline const GgmlTypeInfo* ggml_type_info(GgmlType t) {
  return ggml_type_info(static_cast<uint32_t>(t));
}

// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K" for error messages.
std::string ggml_loadable_types();

// Dequantizes `n` elements stored as `type` into f32.
// src: n / block_size blocks of block_bytes each (any alignment); dst: [n] f32.
// Preconditions (FG_CHECK): the type is loadable and n is a multiple of its block size.
void ggml_dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace fg
