// Device code of the decode-sized GEMMs (gemv.h), one kernel template for bf16/f16 and e4m3
// operands and for the grouped expert GEMM (moe.cu), included by those .cu files only.
//
// A CTA computes 16 outputs (weight rows n0 .. n0 + 15) for every token of its row tile (8, 16 or 32
// tokens); its warps split k in chunks of 64 bytes (chunk c to warp c % kWarps). In a chunk, lane
// (g = lane / 4, t = lane % 4) loads the 16 bytes at offset 16 t of weight rows n0 + g and n0 + g
// + 8 and of token g of each 8-token tile. A dot product may visit k in any order, so those 16
// bytes feed two tensor-core products (bytes 0-7 the first, 8-15 the second: the k slots {2t, 2t +
// 1, 2t + 8, 2t + 9} of an m16n8k16 bf16/f16 mma, {4t..4t + 3, 16 + 4t..16 + 4t + 3} of an
// m16n8k32 e4m3 one) in A (weights, row-major) and B (tokens, column-major) alike. The tokens,
// small and in the L2, load one group of chunks ahead into registers. The weights either
//  - stream through a ring of kStages groups in shared memory (Kind::kWeightRing: the bf16/f16
//    dense kinds), kStages - 1 groups ahead of the one a warp multiplies, by cp.async marked
//    evict-first in the L2; a lane reads back only the cells its own copies wrote, so its
//    wait_group is the only synchronization. Bytes in flight cost no registers: the register path
//    holds one group ahead, which is what limited the qkv and o products' stream (docs/perf.md);
//  - or load one group ahead into registers (two buffers): the e4m3 and routed kinds, measured
//    1-9 % slower through the ring (most of their products, k = 4,096 e4m3 or 2,048 bf16, are two
//    groups a warp; the cause is not isolated), e4m3 at four token tiles too (3 or 5 stages: the
//    24-32-row products up to 11 % slower, the FP8 step at 32 rows 1.7 %; docs/perf.md).
// Where the weights do not depend on the kernel before (Kind::kRouted false) the first groups'
// weights load before the kernel waits for it (launch.cuh). Warps add their partial sums in a fixed
// order: a token's row is the same bits whatever the other rows.
//
// A Kind names the operands: Params, the CTA's slice of the problem (Cta: its rows of x, its
// weights; begin() finds it and may end the CTA), the rows' addresses, the mma and the epilogue.
#pragma once

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda::gemv {

constexpr int kWarps = 8;
// The code the device runs must be at least this __CUDA_ARCH__ for the kind's mma (the #if in each
// Kind::mma).
constexpr int kDenseMinArch = 800;
constexpr int kFp8MinArch = 890;
// Chunks of one group: 4 with one token tile, 2 with two, 1 with four (the tokens' fragments of a
// group stay in registers).
template <int kTiles>
constexpr int kUnroll = 4 / kTiles;
// Groups in the weight ring: 16-byte cells [warp][stage][cell][lane], two cells (rows g and g + 8)
// per chunk; 96 KB at one token tile, so two CTAs share an SM.
constexpr int kStages = 3;
template <class Kind, int kTiles>
constexpr size_t ring_bytes() {
  constexpr size_t kLaneBytes = size_t(kStages) * 2 * kUnroll<kTiles> * 16;  // a lane's cells
  return Kind::kWeightRing ? kWarps * 32 * kLaneBytes : 0;
}

// A plain product's slice for every CTA: the whole of x (m rows) against the whole of w.
template <class P>
struct WholeProduct {
  using Params = P;
  struct Cta {
    int64_t m;
  };
  static constexpr bool kRouted = false;
  static constexpr int kMinBlocks = 0;  // CTAs per SM for __launch_bounds__ (0: the compiler's choice)
  // The weights through the shared-memory ring (else one group ahead in registers).
  static constexpr bool kWeightRing = false;
  __device__ static bool begin(const Params& p, Cta& cta) {
    cta.m = p.m;
    return true;
  }
};

// bf16/f16 x and w, f32 accumulation in the mma, bias and the output's rounding in the epilogue.
template <class T, class O>
struct DenseKind : WholeProduct<GemvParams> {
  static constexpr bool kChunkScales = false;
  static constexpr bool kWeightRing = true;
  __device__ static const char* x_row(const Params& p, const Cta&, int64_t token) {
    return static_cast<const char*>(p.x) + token * p.ldx * int64_t(sizeof(T));
  }
  __device__ static const char* w_row(const Params& p, const Cta&, int64_t row) {
    return static_cast<const char*>(p.w) + row * p.ldw * int64_t(sizeof(T));
  }
  __device__ static int64_t k_bytes(const Params& p) { return p.k * int64_t(sizeof(T)); }
  __device__ static void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&acc)[4], float, float) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
  }
  __device__ static void store(const Params& p, const Cta&, int64_t token, int64_t j, float sum) {
    if (p.bias != nullptr) sum += to_f32(static_cast<const T*>(p.bias)[j]);
    static_cast<O*>(p.out)[token * p.ldo + j] = from_f32<O>(sum);
  }
};

// e4m3 x and w (contiguous rows), each mma's result added to the f32 accumulators. Per-channel
// scales (kBlocks false) are applied in the epilogue; 128-block scales to each mma's result, by
// the factor x_scale(token, group) * w_scale(block row, group) of its 64-byte chunk's group (a
// CTA's 16 weight rows lie in one block row), from a table of the CTA's factors in shared memory
// (in registers next to each chunk they cost a CTA per SM: 170 registers).
template <class O, bool kBlocks>
struct Fp8Kind : WholeProduct<GemmFp8Params> {
  static constexpr bool kChunkScales = kBlocks;
  __device__ static const char* x_row(const Params& p, const Cta&, int64_t token) {
    return reinterpret_cast<const char*>(p.x) + token * p.k;
  }
  __device__ static const char* w_row(const Params& p, const Cta&, int64_t row) {
    return reinterpret_cast<const char*>(p.w) + row * p.k;
  }
  __device__ static int64_t k_bytes(const Params& p) { return p.k; }
  // The factors of a CTA's products (kBlocks): table[g * cols + token] = x_scale(token, group g) *
  // w_scale(the block row of n0, g) for tokens < m, else 0.
  // Rows for `rows` groups, those past k zero (the kernel's last chunks may lie past k).
  __device__ static void fill_factors(const Params& p, int64_t n0, float* table, int cols, int rows) {
    const int64_t groups = (p.k + 127) / 128;
    const float* ws = p.w_scales + (n0 / 128) * p.w_scale_stride;
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
      const int grp = e / cols, token = e - grp * cols;
      table[e] = token < p.m && grp < groups ? __fmul_rn(p.x_scales[grp * p.m + token], ws[grp]) : 0.0f;
    }
  }
  // f0 / f1: the factors of the fragment's two token columns (kBlocks only).
  __device__ static void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&acc)[4], float f0, float f1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    float d[4];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f), "f"(0.0f), "f"(0.0f), "f"(0.0f));
    if constexpr (kBlocks) {
      acc[0] = fmaf(d[0], f0, acc[0]);
      acc[1] = fmaf(d[1], f1, acc[1]);
      acc[2] = fmaf(d[2], f0, acc[2]);
      acc[3] = fmaf(d[3], f1, acc[3]);
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] += d[r];
    }
#endif
  }
  __device__ static void store(const Params& p, const Cta&, int64_t token, int64_t j, float sum) {
    static_cast<O*>(p.out)[token * p.n + j] =
        from_f32<O>(kBlocks ? sum : __fmul_rn(__fmul_rn(sum, p.x_scales[token]), p.w_scales[j]));
  }
};

// A Kind whose epilogue takes the two sums of a CTA's weight rows g and g + 8 at once
// (store_pair) and first fills a table of kEpilogueFloats floats in shared memory (prepare(),
// called before the kernel waits for the one that writes x).
template <class Kind>
concept PairEpilogue = requires {
  Kind::kEpilogueFloats;
};
template <class Kind>
constexpr int epilogue_floats() {
  if constexpr (PairEpilogue<Kind>)
    return Kind::kEpilogueFloats;
  else
    return 1;
}

// The qkv projection with RoPE and the KV write in the epilogue (gemv.h's launch_gemv_rope): the
// products of DenseKind<T, T> on a permuted order of the weight rows, so that a CTA's rows g and
// g + 8 are the two channels (i, i + head_dim / 2) of one rotated pair. The pair's sums are
// rounded to T as DenseKind::store rounds them, rotated (q and k heads) as rope.cu rotates them,
// written to out and, for k and v heads, into the paged cache as rope.cu writes them.
template <class T>
struct QkvRopeKind : DenseKind<T, T> {
  using Params = GemvRopeParams;
  static constexpr int kEpilogueFloats = 2 * 8 * 8;  // cos, then sin: [token][8 pairs], up to 8 tokens
  // The weight row of the kernel's row r: tile b = r / 16 = h * (head_dim / 16) + j holds pairs
  // 8 j .. 8 j + 7 of head h, their first channels as rows 0-7, their second as rows 8-15.
  __device__ static int64_t weight_row(const Params& p, int64_t r) {
    const int d = p.rope.head_dim;
    const int64_t b = r >> 4, h = b / (d / 16), j = b - h * (d / 16);
    return h * d + ((r & 8) != 0 ? d / 2 : 0) + j * 8 + (r & 7);
  }
  __device__ static const char* w_row(const Params& p, const typename DenseKind<T, T>::Cta&, int64_t row) {
    return static_cast<const char*>(p.w) + weight_row(p, row) * p.ldw * int64_t(sizeof(T));
  }
  // The cos/sin of the CTA's 8 pairs for each token (none for v heads).
  __device__ static void prepare(const Params& p, const typename DenseKind<T, T>::Cta& cta, int64_t n0, float* table) {
    const int d = p.rope.head_dim;
    const int64_t first = weight_row(p, n0);
    const int head = int(first / d), i0 = int(first - int64_t(head) * d);
    if (head >= p.rope.num_q_heads + p.rope.num_kv_heads) return;
    for (int e = threadIdx.x; e < cta.m * 8; e += blockDim.x)
      rope_cos_sin(p.rope, e >> 3, i0 + (e & 7), table[e], table[64 + e]);
  }
  __device__ static void store_pair(const Params& p, const typename DenseKind<T, T>::Cta&, int64_t token, int64_t r,
                                    float lo, float hi, const float* table) {
    const int d = p.rope.head_dim, hq = p.rope.num_q_heads, hkv = p.rope.num_kv_heads;
    const int64_t row0 = weight_row(p, r), row1 = row0 + d / 2;
    const int head = int(row0 / d), i = int(row0 - int64_t(head) * d);
    if (p.bias != nullptr) {
      lo += to_f32(static_cast<const T*>(p.bias)[row0]);
      hi += to_f32(static_cast<const T*>(p.bias)[row1]);
    }
    T y0 = from_f32<T>(lo), y1 = from_f32<T>(hi);
    if (head < hq + hkv) {
      const int e = int(token) * 8 + (i & 7);
      float a, b;
      rope_rotate(to_f32(y0), to_f32(y1), table[e], table[64 + e], a, b);
      y0 = from_f32<T>(a);
      y1 = from_f32<T>(b);
    }
    T* out = static_cast<T*>(p.out) + token * p.ldo;
    out[row0] = y0;
    out[row1] = y1;
    const KvWriteParams& kv = p.rope.kv;
    if (head < hq || kv.slots[token] < 0) return;
    const bool is_k = head < hq + hkv;
    const int kvh = head - hq - (is_k ? 0 : hkv);
    kv_cache_store_pair<T>(is_k ? kv.k_cache : kv.v_cache, kv_cache_row(kv, kv.slots[token], kvh),
                           is_k ? kv.k_scale : kv.v_scale, kvh, i, i + d / 2, y0, y1);
  }
};

// Rows of the factor table (Kind::kChunkScales): one per 128-column group of every chunk the
// kernel's loop multiplies, past k included (a warp's last group may run past the last chunk).
template <int kTiles>
__host__ __device__ constexpr int factor_rows(int64_t k) {
  const int64_t chunks = (k + 63) / 64;
  return int((chunks + int64_t(kWarps) * kUnroll<kTiles> + 1) / 2);
}

// kTiles token tiles of 8: at most 8 * kTiles rows of x per CTA (Kind::begin's cta.m). Dynamic
// shared memory: ring_bytes<Kind, kTiles>(), then Kind::kChunkScales' factor table.
template <class Kind, int kTiles>
__global__ void __launch_bounds__(kWarps * 32, Kind::kMinBlocks) gemv_kernel(typename Kind::Params p) {
  __shared__ float partial[kWarps][kTiles][32][4];
  __shared__ float epilogue_table[epilogue_floats<Kind>()];  // PairEpilogue kinds
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  typename Kind::Cta cta;
  if constexpr (Kind::kRouted) {  // which weights and rows: known once the kernel before is done
    pdl_enter();
    if (!Kind::begin(p, cta)) return;
  } else {
    Kind::begin(p, cta);
  }
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  const int64_t row_lo = n0 + g, row_hi = n0 + g + 8;
  const bool lo_ok = row_lo < p.n, hi_ok = row_hi < p.n;
  const char* w_lo = Kind::w_row(p, cta, lo_ok ? row_lo : 0);
  const char* w_hi = Kind::w_row(p, cta, hi_ok ? row_hi : 0);
  const int64_t k_bytes = Kind::k_bytes(p);
  float acc[kTiles][4] = {};
  constexpr int kU = kUnroll<kTiles>;
  const int64_t chunks = (k_bytes + 63) / 64, step = int64_t(kWarps) * kU;
  struct WFrag {
    uint4 wl[kU], wh[kU];
  };
  struct XFrag {
    uint4 xv[kU][kTiles];
  };
  // Kind::kChunkScales: the factors of each 128-column group for the CTA's kTiles * 8 token slots.
  float* factors = reinterpret_cast<float*>(gemv_smem + ring_bytes<Kind, kTiles>());
  constexpr int kCols = kTiles * 8;
  auto load_x = [&](XFrag& f, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t off = (c0 + int64_t(u) * kWarps) * 64 + t * 16;
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int64_t token = int64_t(i) * 8 + g;
        f.xv[u][i] = off < k_bytes && token < cta.m
                         ? __ldg(reinterpret_cast<const uint4*>(Kind::x_row(p, cta, token) + off))
                         : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto multiply = [&](const WFrag& w, const XFrag& x, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t a0[4] = {w.wl[u].x, w.wh[u].x, w.wl[u].y, w.wh[u].y};
      const uint32_t a1[4] = {w.wl[u].z, w.wh[u].z, w.wl[u].w, w.wh[u].w};
      const int64_t c = c0 + int64_t(u) * kWarps;
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        float f0 = 1.0f, f1 = 1.0f;  // tokens 8 i + 2 t and 8 i + 2 t + 1
        if constexpr (Kind::kChunkScales) {
          const float2 f = reinterpret_cast<const float2*>(factors)[(int(c) >> 1) * (kCols / 2) + i * 4 + t];
          f0 = f.x;
          f1 = f.y;
        }
        Kind::mma(a0, x.xv[u][i].x, x.xv[u][i].y, acc[i], f0, f1);
        Kind::mma(a1, x.xv[u][i].z, x.xv[u][i].w, acc[i], f0, f1);
      }
    }
  };
  XFrag xa, xb;
  if constexpr (Kind::kWeightRing) {
    // This warp's groups: chunks warp + step * gi + kWarps * u, u < kU (k < 2^37 bytes: int).
    const int groups = warp < chunks ? (int(chunks) - warp + int(step) - 1) / int(step) : 0;
    auto chunk0 = [&](int gi) { return int64_t(warp) + gi * step; };
    // This lane's cell of (stage, cell) in the warp's ring.
    const uint32_t ring = smem_u32(gemv_smem) + uint32_t((warp * kStages * 2 * kU) * 32 + lane) * 16u;
    auto cell = [&](int stage, int c) { return ring + uint32_t((stage * 2 * kU + c) * 32) * 16u; };
    // The weights are read once: evict-first in the L2 (as __ldcs marks them on the register path).
    const uint64_t policy = l2_evict_first_policy();
    auto issue_w = [&](int stage, int64_t c0) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t off = (c0 + int64_t(u) * kWarps) * 64 + t * 16;
        const bool in_k = off < k_bytes;  // k_bytes % 16 == 0: a lane's 16 bytes are all in or all out
        cp_async16(cell(stage, 2 * u), in_k && lo_ok ? w_lo + off : w_lo, in_k && lo_ok, policy);
        cp_async16(cell(stage, 2 * u + 1), in_k && hi_ok ? w_hi + off : w_hi, in_k && hi_ok, policy);
      }
    };
    auto read_w = [&](WFrag& f, int stage) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        f.wl[u] = ld_shared16(cell(stage, 2 * u));
        f.wh[u] = ld_shared16(cell(stage, 2 * u + 1));
      }
    };
    // The first kStages - 1 groups' weights (complete before any step) load while the previous
    // kernel, which writes x, finishes; x and the output wait for it. One commit per group, empty
    // ones too, so that wait_group's count always names the group to be multiplied next.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < groups) issue_w(s, chunk0(s));
      cp_async_commit();
    }
    if constexpr (PairEpilogue<Kind>) Kind::prepare(p, cta, n0, epilogue_table);
    pdl_enter();
    if (groups > 0) load_x(xa, chunk0(0));
    if constexpr (Kind::kChunkScales) {  // while the first groups' loads are in flight
      Kind::fill_factors(p, n0, factors, kCols, factor_rows<kTiles>(p.k));
      __syncthreads();
    }
    int read_stage = 0, write_stage = kStages - 1;
    // Group gi: the weights of group gi + kStages - 1 into the stage group gi - 1 left and the
    // next group's tokens (both in flight before this one's wait), then gi's weights from the
    // ring and its products.
    auto run_group = [&](int gi, const XFrag& cur, XFrag& next) {
      if (gi + kStages - 1 < groups) issue_w(write_stage, chunk0(gi + kStages - 1));
      cp_async_commit();
      if (gi + 1 < groups) load_x(next, chunk0(gi + 1));
      cp_async_wait<kStages - 1>();
      WFrag w;
      read_w(w, read_stage);
      multiply(w, cur, chunk0(gi));
      read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
    };
    for (int gi = 0; gi < groups; gi += 2) {
      run_group(gi, xa, xb);
      if (gi + 1 < groups) run_group(gi + 1, xb, xa);
    }
  } else {
    // Two register buffers: the next group's weights and tokens load while the current one is
    // multiplied; the first group's weights before the wait (where they do not depend on it).
    auto load_w = [&](WFrag& f, int64_t c0) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t off = (c0 + int64_t(u) * kWarps) * 64 + t * 16;
        const bool in_k = off < k_bytes;
        f.wl[u] = in_k && lo_ok ? __ldcs(reinterpret_cast<const uint4*>(w_lo + off)) : make_uint4(0, 0, 0, 0);
        f.wh[u] = in_k && hi_ok ? __ldcs(reinterpret_cast<const uint4*>(w_hi + off)) : make_uint4(0, 0, 0, 0);
      }
    };
    WFrag wa, wb;
    int64_t c0 = warp;
    if (c0 < chunks) load_w(wa, c0);
    if constexpr (PairEpilogue<Kind>) Kind::prepare(p, cta, n0, epilogue_table);
    pdl_enter();
    if (c0 < chunks) load_x(xa, c0);
    if constexpr (Kind::kChunkScales) {  // while the first group's loads are in flight
      Kind::fill_factors(p, n0, factors, kCols, factor_rows<kTiles>(p.k));
      __syncthreads();
    }
    while (c0 < chunks) {
      if (c0 + step < chunks) {
        load_w(wb, c0 + step);
        load_x(xb, c0 + step);
      }
      multiply(wa, xa, c0);
      c0 += step;
      if (c0 >= chunks) break;
      if (c0 + step < chunks) {
        load_w(wa, c0 + step);
        load_x(xa, c0 + step);
      }
      multiply(wb, xb, c0);
      c0 += step;
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) partial[warp][i][lane][r] = acc[i][r];
  __syncthreads();
  // Accumulator r of lane (g, t) in tile i: weight row n0 + g (+ 8 for r >= 2), token 8 i + 2 t + (r & 1).
  if constexpr (PairEpilogue<Kind>) {
    for (int e = threadIdx.x; e < kTiles * 32 * 2; e += blockDim.x) {
      const int i = e / 64, l = (e / 2) % 32, r = e % 2;
      const int64_t j = n0 + (l >> 2);
      const int64_t token = int64_t(i) * 8 + (l & 3) * 2 + r;
      if (j + 8 >= p.n || token >= cta.m) continue;
      float lo = 0.0f, hi = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        lo += partial[w][i][l][r];
        hi += partial[w][i][l][r + 2];
      }
      Kind::store_pair(p, cta, token, j, lo, hi, epilogue_table);
    }
  } else {
    for (int e = threadIdx.x; e < kTiles * 32 * 4; e += blockDim.x) {
      const int i = e / 128, l = (e / 4) % 32, r = e % 4;
      const int64_t j = n0 + (l >> 2) + (r >= 2 ? 8 : 0);
      const int64_t token = int64_t(i) * 8 + (l & 3) * 2 + (r & 1);
      if (j >= p.n || token >= cta.m) continue;
      float sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) sum += partial[w][i][l][r];
      Kind::store(p, cta, token, j, sum);
    }
  }
}

// Lets gemv_kernel<Kind, kTiles> (a Kind::kWeightRing kind) take its ring, more than the default
// 48 KB of dynamic shared memory; on the current device, before its first launch.
template <class Kind, int kTiles>
void allow_gemv_smem() {
  CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<Kind, kTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(ring_bytes<Kind, kTiles>())));
}

}  // namespace fg::cuda::gemv
