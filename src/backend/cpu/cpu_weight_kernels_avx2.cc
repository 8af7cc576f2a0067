// The AVX2 + FMA + F16C weight-row kernels (cpu_weight_kernels.h). Only this file's own functions
// are compiled for those instructions (#pragma GCC target below, after every include, so no inline
// function shared with other files is emitted with them); the rest of the binary stays plain
// x86-64, and cpu_weight_kernels.cc calls in here only on a CPU that has them.
//
// Each dtype has a decoder that hands out 32 values at a time as four vectors of 8 f32, computed
// with exactly the reference's operations (core/dequant.h: the same f32 products and sums, in the
// same order; integers widened exactly); this file is compiled with contraction off, so a product
// and a sum of a decoder never become one FMA. The dot products then accumulate with FMA, two
// accumulators per activation row. Scale conversions use F16C, which is exact for every f16 that
// is not a NaN (a NaN stays a NaN, with its quiet bit set).
#include <cstring>

#include "backend/cpu/cpu_weight_dispatch.h"
#include "backend/cpu/cpu_weight_kernels.h"
#include "core/dequant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#if defined(__clang__)  // clang has no GCC target pragma; the attribute reaches lambdas too
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace fg::cpu {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Bytes 0..7 / 8..15 of a 128-bit register, widened to 8 f32 (unsigned or signed bytes).
inline __m256 u8_lo(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}
inline __m256 u8_hi(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(v, v)));
}
inline __m256 i8_lo(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
inline __m256 i8_hi(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

// A 256-bit register of 32 bytes as four vectors of 8 f32 (byte order), unsigned or signed.
struct Four {
  __m256 v[4];
};
inline Four widen_u8(__m256i q) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  return {{u8_lo(lo), u8_hi(lo), u8_lo(hi), u8_hi(hi)}};
}
inline Four widen_i8(__m256i q) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  return {{i8_lo(lo), i8_hi(lo), i8_lo(hi), i8_hi(hi)}};
}

// ---- decoders: block(b, f) calls f(offset, Four values) for each 32 values of the block at b,
// offset = the values' index within the block. Float types use 32-value "blocks" and a scalar
// tail (tail(p, i) = the exact value i of the row at p).

struct DecF32 {
  static constexpr int64_t kBlock = 32, kBytes = 128;
  static constexpr bool kTail = true;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const auto* p = reinterpret_cast<const float*>(b);
    f(0, Four{{_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)}});
  }
  static inline float tail(const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
};

struct DecF16 {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kTail = true;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    auto h = [b](int i) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * i))); };
    f(0, Four{{h(0), h(1), h(2), h(3)}});
  }
  static inline float tail(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return f16_to_f32(h);
  }
};

struct DecBF16 {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kTail = true;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    auto h = [b](int i) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * i)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    };
    f(0, Four{{h(0), h(1), h(2), h(3)}});
  }
  static inline float tail(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return bf16_to_f32(h);
  }
};

// q8_0: x = q * d
struct DecQ8_0 {
  static constexpr int64_t kBlock = 32, kBytes = 34;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const __m256 d = _mm256_set1_ps(half_at(b));
    Four q = widen_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
    for (__m256& v : q.v) v = _mm256_mul_ps(v, d);
    f(0, q);
  }
};

// Low and high nibbles of 16 bytes: values 0..15 and 16..31 of a q4_0 / q4_1 block.
inline void nibbles16(const uint8_t* qs, __m128i& lo, __m128i& hi) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  lo = _mm_and_si128(q, mask);
  hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
}

// q4_0: x = (q - 8) * d
struct DecQ4_0 {
  static constexpr int64_t kBlock = 32, kBytes = 18;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const __m256 d = _mm256_set1_ps(half_at(b));
    __m128i lo, hi;
    nibbles16(b + 2, lo, hi);
    const __m128i eight = _mm_set1_epi8(8);
    lo = _mm_sub_epi8(lo, eight);  // q - 8 in [-8, 7], exact in a signed byte
    hi = _mm_sub_epi8(hi, eight);
    f(0, Four{{_mm256_mul_ps(i8_lo(lo), d), _mm256_mul_ps(i8_hi(lo), d), _mm256_mul_ps(i8_lo(hi), d),
               _mm256_mul_ps(i8_hi(hi), d)}});
  }
};

// q4_1: x = q * d + m (a product, rounded, then a sum, rounded: never fused)
struct DecQ4_1 {
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const __m256 d = _mm256_set1_ps(half_at(b)), m = _mm256_set1_ps(half_at(b + 2));
    __m128i lo, hi;
    nibbles16(b + 4, lo, hi);
    auto x = [&](__m256 q) { return _mm256_add_ps(_mm256_mul_ps(q, d), m); };
    f(0, Four{{x(u8_lo(lo)), x(u8_hi(lo)), x(u8_lo(hi)), x(u8_hi(hi))}});
  }
};

// The 8 sub-block factors of a q4_k / q5_k block: dl[j] = d * sc_j, ml[j] = dmin * m_j.
inline void k_scales(const uint8_t* b, float* dl, float* ml) {
  const float d = half_at(b), dmin = half_at(b + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, b + 4, sc, m);
    dl[j] = d * float(sc);
    ml[j] = dmin * float(m);
  }
}

// x = (d * sc) * q - (dmin * m) for 32 byte values q of one sub-block.
inline Four k_values(__m256i q, float dl, float ml) {
  const __m256 d = _mm256_set1_ps(dl), m = _mm256_set1_ps(ml);
  Four v = widen_u8(q);
  for (__m256& x : v.v) x = _mm256_sub_ps(_mm256_mul_ps(d, x), m);
  return v;
}

// q4_k: pass j reads 32 bytes; low nibbles are sub-block 2j, high nibbles 2j + 1.
struct DecQ4_K {
  static constexpr int64_t kBlock = 256, kBytes = 144;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    float dl[8], ml[8];
    k_scales(b, dl, ml);
    const __m256i mask = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j));
      f(64 * j, k_values(_mm256_and_si256(q, mask), dl[2 * j], ml[2 * j]));
      f(64 * j + 32, k_values(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), dl[2 * j + 1], ml[2 * j + 1]));
    }
  }
};

// q5_k: as q4_k, plus a fifth bit (16) from qh: bit 2j of qh[l] for the low nibbles of pass j,
// bit 2j + 1 for the high ones.
struct DecQ5_K {
  static constexpr int64_t kBlock = 256, kBytes = 176;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    float dl[8], ml[8];
    k_scales(b, dl, ml);
    const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    // Bit s of each byte, as 0 or 16 (16-bit shifts: bits from the neighbouring byte land above
    // bit 0 and are masked off).
    auto fifth = [&](int s) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), one), 4); };
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * j));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), fifth(2 * j));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), fifth(2 * j + 1));
      f(64 * j, k_values(lo, dl[2 * j], ml[2 * j]));
      f(64 * j + 32, k_values(hi, dl[2 * j + 1], ml[2 * j + 1]));
    }
  }
};

// q6_k: per half of 128 values, value l + 32 i takes its low nibble from ql[l + 32 (i & 1)] (high
// nibble for i >= 2), bits 4-5 from (qh[l] >> 2 i) & 3, and the scale sc[l / 16 + 2 i];
// x = (d * sc) * (q - 32).
struct DecQ6_K {
  static constexpr int64_t kBlock = 256, kBytes = 210;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const float d = half_at(b + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const __m256i mask = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      for (int i = 0; i < 4; ++i) {
        const __m256i src = (i & 1) ? c : a;
        const __m256i low = _mm256_and_si256(i < 2 ? src : _mm256_srli_epi16(src, 4), mask);
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), three), 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), bias);  // q - 32 in [-32, 31]
        const __m256 d0 = _mm256_set1_ps(d * float(sc[8 * h + 2 * i]));
        const __m256 d1 = _mm256_set1_ps(d * float(sc[8 * h + 2 * i + 1]));
        Four v = widen_i8(q);
        v.v[0] = _mm256_mul_ps(d0, v.v[0]);
        v.v[1] = _mm256_mul_ps(d0, v.v[1]);
        v.v[2] = _mm256_mul_ps(d1, v.v[2]);
        v.v[3] = _mm256_mul_ps(d1, v.v[3]);
        f(128 * h + 32 * i, v);
      }
    }
  }
};

// ---- the two kernels over any decoder

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <class D>
void decode_row_t(const WeightRows& w, int64_t j, float* dst) {
  const uint8_t* row = w.data + j * w.row_bytes;
  const int64_t blocks = w.k / D::kBlock;
  for (int64_t ib = 0; ib < blocks; ++ib) {
    float* out = dst + ib * D::kBlock;
    D::block(row + ib * D::kBytes, [out](int64_t off, const Four& v) {
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + off + 8 * i, v.v[i]);
    });
  }
  if constexpr (D::kTail)
    for (int64_t i = blocks * D::kBlock; i < w.k; ++i) dst[i] = D::tail(row, i);
}

template <class D, int M>
void gemv_t(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a) {
  const int64_t blocks = w.k / D::kBlock;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
    __m256 acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < blocks; ++ib) {
      const float* xb = a.x + ib * D::kBlock;
      D::block(row + ib * D::kBytes, [&](int64_t off, const Four& v) {
        for (int r = 0; r < M; ++r) {
          const float* xr = xb + r * a.ldx + off;
          acc0[r] = _mm256_fmadd_ps(v.v[0], _mm256_loadu_ps(xr), acc0[r]);
          acc1[r] = _mm256_fmadd_ps(v.v[1], _mm256_loadu_ps(xr + 8), acc1[r]);
          acc0[r] = _mm256_fmadd_ps(v.v[2], _mm256_loadu_ps(xr + 16), acc0[r]);
          acc1[r] = _mm256_fmadd_ps(v.v[3], _mm256_loadu_ps(xr + 24), acc1[r]);
        }
      });
    }
    const float b = a.bias != nullptr ? a.bias[j] : 0.0f;
    for (int r = 0; r < M; ++r) {
      float s = hsum(_mm256_add_ps(acc0[r], acc1[r]));
      if constexpr (D::kTail) {
        const float* xr = a.x + r * a.ldx;
        for (int64_t i = blocks * D::kBlock; i < w.k; ++i) s += D::tail(row, i) * xr[i];
      }
      a.out[r * a.ldo + j] = b + s;
    }
  }
}

template <class D>
void gemv_rows(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a) {
  switch (a.m) {
    case 1: return gemv_t<D, 1>(w, j0, j1, a);
    case 2: return gemv_t<D, 2>(w, j0, j1, a);
    case 3: return gemv_t<D, 3>(w, j0, j1, a);
    default: return gemv_t<D, 4>(w, j0, j1, a);
  }
}

// This set's decoders, by dtype (cpu_weight_dispatch.h).
struct Decoders {
  using F32 = DecF32;
  using F16 = DecF16;
  using BF16 = DecBF16;
  using Q8_0 = DecQ8_0;
  using Q4_0 = DecQ4_0;
  using Q4_1 = DecQ4_1;
  using Q4_K = DecQ4_K;
  using Q5_K = DecQ5_K;
  using Q6_K = DecQ6_K;
};

void avx2_decode_row(const WeightRows& w, int64_t j, float* dst) {
  if (!with_decoder<Decoders>(w.dtype, [&]<class D>() { decode_row_t<D>(w, j, dst); }))
    generic_weight_kernels().decode_row(w, j, dst);
}

void avx2_gemv(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a) {
  if (!with_decoder<Decoders>(w.dtype, [&]<class D>() { gemv_rows<D>(w, j0, j1, a); }))
    generic_weight_kernels().gemv(w, j0, j1, a);
}

const WeightKernels kAvx2 = {"avx2", avx2_decode_row, avx2_gemv, 16};

}  // namespace

const WeightKernels& avx2_weight_kernels() {
  return kAvx2;
}

}  // namespace fg::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace fg::cpu {

bool avx2_weight_kernels_supported() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): not every compiler's __builtin_cpu_supports names it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

}  // namespace fg::cpu

#else  // not x86: the portable kernels only

namespace fg::cpu {

const WeightKernels& avx2_weight_kernels() {
  return generic_weight_kernels();
}
bool avx2_weight_kernels_supported() {
  return false;
}

}  // namespace fg::cpu

#endif
