// Exact dequantization of the stored weight types (see dequant.h for the block layouts). Block
// bytes are read with memcpy because blocks in a file have no alignment. Built with
// -ffp-contract=off (src/core/CMakeLists.txt): a fused multiply-add would break bit-exactness.
#include "core/dequant.h"

#include <cstring>

#include "core/status.h"

namespace fg {
namespace {

constexpr int64_t kQK = 32;  // values per block of the 32-value formats

float read_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// x = (q - 8) * d
void dequant_q4_0(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 18, y += kQK) {
    const float d = read_f16(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = float((qs[j] & 0xF) - 8) * d;
      y[j + 16] = float((qs[j] >> 4) - 8) * d;
    }
  }
}

// x = q * d + m
void dequant_q4_1(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 20, y += kQK) {
    const float d = read_f16(b), m = read_f16(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = float(qs[j] & 0xF) * d + m;
      y[j + 16] = float(qs[j] >> 4) * d + m;
    }
  }
}

// x = q * d
void dequant_q8_0(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 34, y += kQK) {
    const float d = read_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
  }
}

// x = (d * sc) * q - (dmin * m)
void dequant_q4_k(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 144) {
    const float d = read_f16(b), dmin = read_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      q4k_scale_min(j, scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      q4k_scale_min(j + 1, scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// x = (d * sc) * q - (dmin * m), q in [0, 32)
void dequant_q5_k(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 176) {
    const float d = read_f16(b), dmin = read_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      uint8_t sc, m;
      q4k_scale_min(j, scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      q4k_scale_min(j + 1, scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// x = (d * sc) * (q - 32), q in [0, 64)
void dequant_q6_k(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 210) {
    const float d = read_f16(b + 208);
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace

void dequantize(DType dtype, const void* src_bytes, float* dst, int64_t n) {
  FG_CHECK(dtype_is_dequantizable(dtype), "dequantize: " + std::string(dtype_name(dtype)) + " has no f32 values");
  FG_CHECK(n >= 0 && n % dtype_block_size(dtype) == 0, "dequantize: " + std::to_string(n) +
                                                           " values are not a whole number of " +
                                                           std::string(dtype_name(dtype)) + " blocks");
  const auto* src = static_cast<const uint8_t*>(src_bytes);
  const int64_t blocks = n / dtype_block_size(dtype);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = read_f16(src + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::kQ4_0: dequant_q4_0(src, dst, blocks); return;
    case DType::kQ4_1: dequant_q4_1(src, dst, blocks); return;
    case DType::kQ8_0: dequant_q8_0(src, dst, blocks); return;
    case DType::kQ4_K: dequant_q4_k(src, dst, blocks); return;
    case DType::kQ5_K: dequant_q5_k(src, dst, blocks); return;
    case DType::kQ6_K: dequant_q6_k(src, dst, blocks); return;
    default: break;
  }
  FG_CHECK(false, "dequantize: no decoder for a dequantizable dtype");
}

}  // namespace fg
