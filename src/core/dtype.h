// Element types flashgen moves around, and host-side bf16/f16 <-> f32 conversion.
// Never depends on any backend: every layer may include it.
//
// Besides element types (f32, f16, bf16, integers) a tensor may hold block-quantized weights, the
// ggml block formats GGUF files store (core/dequant.h gives their layouts and exact f32 values):
// a row of k values is k / block_size blocks of block_bytes each. Shapes and strides of such a
// tensor still count VALUES (a [n, k] q4_1 matrix has stride {k, 1}); only byte arithmetic goes
// through the block geometry (dtype_bytes), and views may only start on a block boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace fg {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kI64,
  kU8,
  kF8E4M3,  // OCP float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no inf, max 448,
            // NaN = S.1111.111 (what FP8 checkpoints and Hopper's FP8 tensor cores use)
  // Block-quantized (weights only; the names and layouts are ggml's).
  kQ8_0,  // 32 values in 34 bytes
  kQ4_0,  // 32 values in 18 bytes
  kQ4_1,  // 32 values in 20 bytes
  kQ4_K,  // 256 values in 144 bytes
  kQ5_K,  // 256 values in 176 bytes
  kQ6_K,  // 256 values in 210 bytes
};

// True for the block-quantized types.
constexpr bool dtype_is_blocked(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

// Values per block: 1 for element types.
constexpr int64_t dtype_block_size(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return 256;
    default: return 1;
  }
}

// Bytes per value of an element type; 0 for the block-quantized types, which have no whole number
// of bytes per value (use dtype_bytes).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kF8E4M3: return 1;
    default: return 0;
  }
}

// Bytes per block: dtype_size for element types.
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_1: return 20;
    case DType::kQ4_K: return 144;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
    default: return int64_t(dtype_size(t));
  }
}

// Bytes of n consecutive values (a whole number of blocks for the block-quantized types; the
// remainder of a partial block is not counted, so callers check divisibility first).
constexpr size_t dtype_bytes(DType t, int64_t n) {
  return size_t(n / dtype_block_size(t)) * size_t(dtype_block_bytes(t));
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kF8E4M3: return "f8_e4m3";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
  }
  return "?";
}

// bf16: the top 16 bits of an IEEE f32. Conversion from f32 rounds to nearest even; NaN stays NaN.
inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

// IEEE half precision, round to nearest even, with subnormals, inf and NaN.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf (after rounding)
  if (abs < 0x38800000u) {                                  // subnormal or zero in f16
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 113 - exp + 13
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

// float8 e4m3fn (OCP): exponent bias 7, subnormals below 2^-6, largest finite 448, no infinity;
// 0x7f / 0xff are NaN. Decoding is exact (every e4m3 value is an f32).
inline float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  uint32_t bits;
  if (exp == 0xf && mant == 0x7) {
    bits = sign | 0x7fc00000u;  // NaN
  } else if (exp == 0) {
    float f = float(mant) * 0.001953125f;  // mant * 2^-9
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else {
    bits = sign | ((exp + 127 - 7) << 23) | (mant << 20);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// f32 -> e4m3fn, round to nearest even, saturating: finite values beyond 448 (and +-inf) become
// +-448 (the convention of FP8 quantizers, which scale into range first); NaN stays NaN.
inline uint8_t f32_to_f8e4m3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint8_t(sign | 0x7f);   // NaN
  if (abs >= 0x43e00000u) return uint8_t(sign | 0x7e);  // >= 448 (incl. inf): saturate
  if (abs < 0x3c800000u) {                              // below 2^-6: subnormal in e4m3 (step 2^-9)
    float a;
    std::memcpy(&a, &abs, 4);
    const float q = a * 512.0f;  // exact: a power-of-two scale
    uint32_t n = uint32_t(q);
    const float rem = q - float(n);
    if (rem > 0.5f || (rem == 0.5f && (n & 1u))) ++n;  // n <= 8: 8 is the smallest normal, 0x08
    return uint8_t(sign | n);
  }
  // Normal: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
  const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t e = (r >> 23) - 127 + 7;  // 1..15 (448 rounds no higher: checked above)
  return uint8_t(sign | (e << 3) | ((r >> 20) & 0x7u));
}

}  // namespace fg
