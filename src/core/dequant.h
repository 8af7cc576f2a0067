// The f32 value of every stored weight value: element types (f32, f16, bf16) converted, and the
// block-quantized types of core/dtype.h (ggml's block formats, as GGUF files store them) decoded
// exactly as the reference dequantization does (the `gguf` Python package and ggml: the same
// products and sums in the same order, in f32). These values are the model's weights: every
// backend kernel that computes on stored blocks must use exactly them (tests hold the CPU kernels
// to this function bit for bit). dequant.cc is compiled with floating-point contraction off, so
// no compiler fuses a product and a sum into an FMA, which would round once where the reference
// rounds twice.
//
// Block layouts (little-endian, no alignment; d, dmin, m are f16):
//   q4_0  18 B / 32:  d, 16 B of nibbles (low nibbles: values 0..15, high: 16..31)   x = (q - 8) * d
//   q4_1  20 B / 32:  d, m, 16 B of nibbles as q4_0                                  x = q * d + m
//   q8_0  34 B / 32:  d, 32 int8                                                      x = q * d
//   q4_k 144 B / 256: d, dmin, 12 B of 6-bit scales/mins (8 sub-blocks of 32), 128 B of nibbles:
//                     each 64 values use 32 bytes, low nibbles with sub-block 2j, high with 2j+1
//                     x = (d * sc) * q - (dmin * m)
//   q5_k 176 B / 256: d, dmin, 12 B of scales/mins, 32 B of fifth bits (bit 2j of qh[l] for the low
//                     nibbles of pass j, bit 2j+1 for the high ones), 128 B of nibbles as q4_k
//                     x = (d * sc) * q - (dmin * m), q in [0, 32)
//   q6_k 210 B / 256: 128 B of low nibbles, 64 B of high 2-bit pairs, 16 int8 scales (one per 16
//                     values), d last. Each half of 128 values reads 64 ql, 32 qh bytes, 8 scales:
//                     value l + 32 i of the half has low bits from ql[l + 32 (i & 1)] (low nibble
//                     for i < 2, else high), high bits (qh[l] >> 2 i) & 3, scale sc[l / 16 + 2 i]
//                     x = (d * sc) * (q - 32), q in [0, 64)
// Never depends on anything but the standard library and core.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fg {

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a q4_k / q5_k block:
// bytes 0..3 hold the low 6 bits of scales 0..3, bytes 4..7 those of mins 0..3, bytes 8..11 the
// low 4 bits of scales/mins 4..7, whose top 2 bits sit in the top bits of bytes 0..7.
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// True for the dtypes dequantize() reads: f32, f16, bf16 and the block-quantized ones.
constexpr bool dtype_is_dequantizable(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || dtype_is_blocked(t);
}

// dst[i] = the f32 value of stored value i, for n values stored as `dtype`.
// src: dtype_bytes(dtype, n) bytes (any alignment); dst: [n] f32.
// Preconditions (FG_CHECK): dtype_is_dequantizable(dtype), n a whole number of blocks.
void dequantize(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace fg
