// ggml block formats and their dequantization (see gguf_quant.h). Each block layout is written out
// in the comment of its function; byte offsets are read with memcpy because blocks in a file have
// no alignment. Built with -ffp-contract=off (src/gguf/CMakeLists.txt): a fused multiply-add
// would round once where the reference rounds twice and break bit-exactness.
#include "gguf/gguf_quant.h"

#include <array>
#include <cstring>

#include "core/dtype.h"
#include "core/status.h"

namespace fg {
namespace {

constexpr int64_t kQK = 32;  // elements per block of the 32-element formats

constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, false},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, false},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, false},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, false},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, false},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, false},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, false},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, false},
    {GgmlType::kNVFP4, "NVFP4", 64, 36, false},
    {GgmlType::kQ1_0, "Q1_0", 128, 18, false},
}};

float read_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K / Q5_K block:
// bytes 0..3 hold the low 6 bits of scales 0..3, bytes 4..7 those of mins 0..3, bytes 8..11 the
// low 4 bits of scales/mins 4..7, whose top 2 bits sit in the top bits of bytes 0..7.
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_0, 18 bytes / 32 values: f16 d, 16 bytes of nibbles (low nibbles: values 0..15, high: 16..31).
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

// Q4_1, 20 bytes / 32 values: f16 d, f16 m, 16 bytes of nibbles as in Q4_0. x = q * d + m
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

// Q8_0, 34 bytes / 32 values: f16 d, 32 int8. x = q * d
void dequant_q8_0(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 34, y += kQK) {
    const float d = read_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
  }
}

// Q4_K, 144 bytes / 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins (scale_min_k4),
// 128 bytes of nibbles. Each 64 values use 32 bytes: low nibbles with sub-block 2k, high nibbles
// with sub-block 2k+1. x = (d * sc) * q - (dmin * m)
void dequant_q4_k(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 144) {
    const float d = read_f16(b), dmin = read_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(j, scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(j + 1, scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// Q5_K, 176 bytes / 256 values: f16 d, f16 dmin, 12 bytes of scales/mins, 32 bytes of fifth bits
// (bit 2k of qh[l] for the low nibbles of pass k, bit 2k+1 for the high ones), 128 bytes of
// nibbles laid out as in Q4_K. x = (d * sc) * q - (dmin * m), q in [0, 32)
void dequant_q5_k(const uint8_t* b, float* y, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, b += 176) {
    const float d = read_f16(b), dmin = read_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      uint8_t sc, m;
      scale_min_k4(j, scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(j + 1, scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// Q6_K, 210 bytes / 256 values: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8
// scales (one per 16 values), f16 d last. Each half of 128 values reads 64 ql bytes, 32 qh bytes
// and 8 scales. x = (d * sc) * (q - 32), q in [0, 64)
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
  const int64_t blocks = n / info->block_size;
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = read_f16(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ4_0: dequant_q4_0(src, dst, blocks); return;
    case GgmlType::kQ4_1: dequant_q4_1(src, dst, blocks); return;
    case GgmlType::kQ8_0: dequant_q8_0(src, dst, blocks); return;
    case GgmlType::kQ4_K: dequant_q4_k(src, dst, blocks); return;
    case GgmlType::kQ5_K: dequant_q5_k(src, dst, blocks); return;
    case GgmlType::kQ6_K: dequant_q6_k(src, dst, blocks); return;
    default: break;
  }
  FG_CHECK(false, "ggml_dequantize: no dequantizer for a type marked loadable");
}

}  // namespace fg
