// The body of one set of the CPU attention kernels (cpu_attention_kernels.h), written once over
// GCC vector types of FG_ATTN_VBYTES bytes and compiled for each set's instructions: the including
// file includes <cstdint>, <cstring> and <utility>, selects the target, defines FG_ATTN_VBYTES and
// includes this inside an anonymous namespace of the set's own. No include guard: a file includes
// it once per set.
//
// A register tile is up to four rows by four vectors; every element of it is its own chain of
// multiply-adds (contracted to FMA where the set has it), so tile shapes, row remainders and lane
// positions never change a result.

typedef float vf __attribute__((vector_size(FG_ATTN_VBYTES)));
typedef int32_t vi __attribute__((vector_size(FG_ATTN_VBYTES)));
constexpr int kLanes = FG_ATTN_VBYTES / 4;
constexpr int kVecs = 4;                // vectors per row of a register tile
constexpr int kWidth = kLanes * kVecs;  // keys (scores) or channels (accumulate) per tile
static_assert(kAttnStep % kWidth == 0, "a step must hold whole tiles");

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) {
  std::memcpy(p, &v, sizeof v);
}
// Every lane x (x - +0 is x, signed zeros included): one broadcast.
inline vf splat(float x) {
  return x - vf{};
}
inline vi splat_i(int32_t x) {
  return x - vi{};
}

// One butterfly stage of an in-register kLanes x kLanes transpose: rows i and i + S (i & S == 0)
// exchange their off-diagonal S-lane halves. After the stages S = kLanes / 2 .. 1, row c holds
// what was column c.
constexpr int swap_lo(int k, int S) {
  return (k & S) == 0 ? k : kLanes + k - S;
}
constexpr int swap_hi(int k, int S) {
  return (k & S) == 0 ? k + S : kLanes + k;
}
template <int S, int... K>
inline void butterfly(vf* v, std::integer_sequence<int, K...>) {
  for (int i = 0; i < kLanes; ++i) {
    if ((i & S) != 0) continue;
    const vf a = v[i], b = v[i + S];
    v[i] = __builtin_shufflevector(a, b, swap_lo(K, S)...);
    v[i + S] = __builtin_shufflevector(a, b, swap_hi(K, S)...);
  }
}
template <int S>
inline void transpose_stages(vf* v) {
  butterfly<S>(v, std::make_integer_sequence<int, kLanes>{});
  if constexpr (S > 1) transpose_stages<S / 2>(v);
}

void transpose(const float* const* rows, int64_t dim, float* kt, int64_t ldk) {
  const int64_t whole = dim / kLanes * kLanes;
  for (int64_t j0 = 0; j0 < kAttnStep; j0 += kLanes) {
    for (int64_t d0 = 0; d0 < whole; d0 += kLanes) {
      vf v[kLanes];
      for (int i = 0; i < kLanes; ++i) v[i] = load(rows[j0 + i] + d0);
      transpose_stages<kLanes / 2>(v);
      for (int i = 0; i < kLanes; ++i) store(kt + (d0 + i) * ldk + j0, v[i]);
    }
    for (int64_t d = whole; d < dim; ++d)
      for (int i = 0; i < kLanes; ++i) kt[d * ldk + j0 + i] = rows[j0 + i][d];
  }
}

template <int RB>
inline void score_tile(const float* q, int64_t ldq, const float* kt, int64_t ldk, int64_t dim, float* s, int64_t lds) {
  vf acc[RB][kVecs];
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = vf{};
  for (int64_t d = 0; d < dim; ++d) {
    vf k[kVecs];
    for (int v = 0; v < kVecs; ++v) k[v] = load(kt + d * ldk + v * kLanes);
    for (int r = 0; r < RB; ++r) {
      const vf qd = splat(q[r * ldq + d]);
      for (int v = 0; v < kVecs; ++v) acc[r][v] += qd * k[v];
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < kVecs; ++v) store(s + r * lds + v * kLanes, acc[r][v]);
}

void scores(const float* q, int64_t ldq, int rows, const float* kt, int64_t ldk, int64_t dim, int64_t keys, float* s,
            int64_t lds) {
  for (int64_t j0 = 0; j0 < keys; j0 += kWidth) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) score_tile<4>(q + r * ldq, ldq, kt + j0, ldk, dim, s + r * lds + j0, lds);
    switch (rows - r) {
      case 3: score_tile<3>(q + r * ldq, ldq, kt + j0, ldk, dim, s + r * lds + j0, lds); break;
      case 2: score_tile<2>(q + r * ldq, ldq, kt + j0, ldk, dim, s + r * lds + j0, lds); break;
      case 1: score_tile<1>(q + r * ldq, ldq, kt + j0, ldk, dim, s + r * lds + j0, lds); break;
      default: break;
    }
  }
}

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-7 polynomial (the minimax
// coefficients of the Cephes library's expf, about 1 ulp), times 2^n built in the exponent bits.
// Below ln(2^-126) (and for NaN) the result is 0.
inline vf exp_nonpositive(vf x) {
  const vf lo = splat(-87.33654475f);
  const vi keep = x >= lo;
  x = (vf)(((vi)x & keep) | ((vi)lo & ~keep));  // finite arithmetic below, masked off at the end
  const vf fx = x * splat(1.44269504088896341f) + splat(0.5f);
  vf n = __builtin_convertvector(__builtin_convertvector(fx, vi), vf);  // toward zero
  n += __builtin_convertvector(n > fx, vf);                             // -1 where that rounded up: floor
  const vf r = x - n * splat(0.693359375f) - n * splat(-2.12194440e-4f);
  const vf z = r * r;
  vf y = splat(1.9875691500e-4f);
  y = y * r + splat(1.3981999507e-3f);
  y = y * r + splat(8.3334519073e-3f);
  y = y * r + splat(4.1665795894e-2f);
  y = y * r + splat(1.6666665459e-1f);
  y = y * r + splat(5.0000001201e-1f);
  y = y * z + r + splat(1.0f);
  const vi two_n = (__builtin_convertvector(n, vi) + splat_i(127)) << splat_i(23);
  return (vf)((vi)(y * (vf)two_n) & keep);
}

void exp_shifted(float* x, int64_t n, float m) {
  const vf mv = splat(m);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) store(x + j, exp_nonpositive(load(x + j) - mv));
  if (j < n) {  // the tail through the same vector code
    float tail[kLanes];
    for (int i = 0; i < kLanes; ++i) tail[i] = j + i < n ? x[j + i] : m;
    store(tail, exp_nonpositive(load(tail) - mv));
    for (int64_t i = 0; j + i < n; ++i) x[j + i] = tail[i];
  }
}

template <int RB>
inline void accumulate_tile(const float* p, int64_t ldp, const float* const* v_rows, int64_t c0, int64_t keys,
                            float* acc, int64_t lda) {
  vf a[RB][kVecs];
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < kVecs; ++v) a[r][v] = load(acc + r * lda + c0 + v * kLanes);
  for (int64_t j = 0; j < keys; ++j) {
    const float* row = v_rows[j] + c0;
    vf vv[kVecs];
    for (int v = 0; v < kVecs; ++v) vv[v] = load(row + v * kLanes);
    for (int r = 0; r < RB; ++r) {
      const vf pj = splat(p[r * ldp + j]);
      for (int v = 0; v < kVecs; ++v) a[r][v] += pj * vv[v];
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < kVecs; ++v) store(acc + r * lda + c0 + v * kLanes, a[r][v]);
}

void accumulate(const float* p, int64_t ldp, int rows, const float* const* v_rows, int64_t keys, int64_t dim_pad,
                float* acc, int64_t lda) {
  for (int64_t c0 = 0; c0 < dim_pad; c0 += kWidth) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) accumulate_tile<4>(p + r * ldp, ldp, v_rows, c0, keys, acc + r * lda, lda);
    switch (rows - r) {
      case 3: accumulate_tile<3>(p + r * ldp, ldp, v_rows, c0, keys, acc + r * lda, lda); break;
      case 2: accumulate_tile<2>(p + r * ldp, ldp, v_rows, c0, keys, acc + r * lda, lda); break;
      case 1: accumulate_tile<1>(p + r * ldp, ldp, v_rows, c0, keys, acc + r * lda, lda); break;
      default: break;
    }
  }
}
