// The AVX-512 weight-row kernels (cpu_weight_kernels.h): the AVX2 set's decoders with 16-lane
// vectors, for CPUs with AVX-512F (Zen 4 and 5, Intel server parts), where they decode about
// twice as many values per cycle (docs/perf.md). As in cpu_weight_kernels_avx2.cc, only this
// file's own functions are compiled for these instructions (#pragma GCC target after every
// include), the decoders do exactly the reference's f32 operations (contraction off), scale
// conversions use F16C (exact for every f16 that is not a NaN), and only the accumulation uses
// FMA. The byte-level unpacking (nibbles, high bits) is the AVX2 set's, on 128/256-bit registers;
// each 16 bytes then widen to one vector of 16 f32.
#include <cstring>

#include "backend/cpu/cpu_weight_dispatch.h"
#include "backend/cpu/cpu_weight_kernels.h"
#include "core/dequant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)  // clang has no GCC target pragma; the attribute reaches lambdas too
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

namespace fg::cpu {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 32 values as two vectors of 16 f32.
struct Two {
  __m512 v[2];
};

inline __m512 u8x16(__m128i v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}
inline __m512 i8x16(__m128i v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}
inline Two widen_u8(__m256i q) {
  return {{u8x16(_mm256_castsi256_si128(q)), u8x16(_mm256_extracti128_si256(q, 1))}};
}
inline Two widen_i8(__m256i q) {
  return {{i8x16(_mm256_castsi256_si128(q)), i8x16(_mm256_extracti128_si256(q, 1))}};
}

// ---- decoders: block(b, f) calls f(offset, Two values) for each 32 values of the block at b (see
// the AVX2 file for the layouts; float types use 32-value "blocks" and a scalar tail).

struct DecF32 {
  static constexpr int64_t kBlock = 32, kBytes = 128;
  static constexpr bool kTail = true;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const auto* p = reinterpret_cast<const float*>(b);
    f(0, Two{{_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)}});
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
    auto h = [b](int i) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * i))); };
    f(0, Two{{h(0), h(1)}});
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
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * i)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    };
    f(0, Two{{h(0), h(1)}});
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
    const __m512 d = _mm512_set1_ps(half_at(b));
    Two q = widen_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
    for (__m512& v : q.v) v = _mm512_mul_ps(v, d);
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
    const __m512 d = _mm512_set1_ps(half_at(b));
    __m128i lo, hi;
    nibbles16(b + 2, lo, hi);
    const __m128i eight = _mm_set1_epi8(8);
    f(0, Two{{_mm512_mul_ps(i8x16(_mm_sub_epi8(lo, eight)), d), _mm512_mul_ps(i8x16(_mm_sub_epi8(hi, eight)), d)}});
  }
};

// q4_1: x = q * d + m (a product, rounded, then a sum, rounded: never fused)
struct DecQ4_1 {
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static constexpr bool kTail = false;
  template <class F>
  static inline void block(const uint8_t* b, F&& f) {
    const __m512 d = _mm512_set1_ps(half_at(b)), m = _mm512_set1_ps(half_at(b + 2));
    __m128i lo, hi;
    nibbles16(b + 4, lo, hi);
    f(0, Two{{_mm512_add_ps(_mm512_mul_ps(u8x16(lo), d), m), _mm512_add_ps(_mm512_mul_ps(u8x16(hi), d), m)}});
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
inline Two k_values(__m256i q, float dl, float ml) {
  const __m512 d = _mm512_set1_ps(dl), m = _mm512_set1_ps(ml);
  Two v = widen_u8(q);
  for (__m512& x : v.v) x = _mm512_sub_ps(_mm512_mul_ps(d, x), m);
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
    auto fifth = [&](int s) {  // bit s of each byte as 0 or 16
      return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), one), 4);
    };
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * j));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), fifth(2 * j));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), fifth(2 * j + 1));
      f(64 * j, k_values(lo, dl[2 * j], ml[2 * j]));
      f(64 * j + 32, k_values(hi, dl[2 * j + 1], ml[2 * j + 1]));
    }
  }
};

// q6_k: x = (d * sc) * (q - 32); the 16-value scale groups are exactly the two vectors of 32.
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
        Two v = widen_i8(q);
        v.v[0] = _mm512_mul_ps(_mm512_set1_ps(d * float(sc[8 * h + 2 * i])), v.v[0]);
        v.v[1] = _mm512_mul_ps(_mm512_set1_ps(d * float(sc[8 * h + 2 * i + 1])), v.v[1]);
        f(128 * h + 32 * i, v);
      }
    }
  }
};

// ---- the two kernels over any decoder

template <class D>
void decode_row_t(const WeightRows& w, int64_t j, float* dst) {
  const uint8_t* row = w.data + j * w.row_bytes;
  const int64_t blocks = w.k / D::kBlock;
  for (int64_t ib = 0; ib < blocks; ++ib) {
    float* out = dst + ib * D::kBlock;
    D::block(row + ib * D::kBytes, [out](int64_t off, const Two& v) {
      _mm512_storeu_ps(out + off, v.v[0]);
      _mm512_storeu_ps(out + off + 16, v.v[1]);
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
    __m512 acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < blocks; ++ib) {
      const float* xb = a.x + ib * D::kBlock;
      D::block(row + ib * D::kBytes, [&](int64_t off, const Two& v) {
        for (int r = 0; r < M; ++r) {
          const float* xr = xb + r * a.ldx + off;
          acc0[r] = _mm512_fmadd_ps(v.v[0], _mm512_loadu_ps(xr), acc0[r]);
          acc1[r] = _mm512_fmadd_ps(v.v[1], _mm512_loadu_ps(xr + 16), acc1[r]);
        }
      });
    }
    const float b = a.bias != nullptr ? a.bias[j] : 0.0f;
    for (int r = 0; r < M; ++r) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
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

void avx512_decode_row(const WeightRows& w, int64_t j, float* dst) {
  if (!with_decoder<Decoders>(w.dtype, [&]<class D>() { decode_row_t<D>(w, j, dst); }))
    generic_weight_kernels().decode_row(w, j, dst);
}

void avx512_gemv(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a) {
  if (!with_decoder<Decoders>(w.dtype, [&]<class D>() { gemv_rows<D>(w, j0, j1, a); }))
    generic_weight_kernels().gemv(w, j0, j1, a);
}

const WeightKernels kAvx512 = {"avx512", avx512_decode_row, avx512_gemv, 24};

}  // namespace

const WeightKernels& avx512_weight_kernels() {
  return kAvx512;
}

}  // namespace fg::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace fg::cpu {

bool avx512_weight_kernels_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && avx2_weight_kernels_supported();
}

}  // namespace fg::cpu

#else  // not x86: the portable kernels only

namespace fg::cpu {

const WeightKernels& avx512_weight_kernels() {
  return generic_weight_kernels();
}
bool avx512_weight_kernels_supported() {
  return false;
}

}  // namespace fg::cpu

#endif
