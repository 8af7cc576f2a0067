// Mixture-of-experts kernels of the CUDA backend (kernels.h; the contract is backend.h's
// moe_route / moe_gemm / moe_combine). Every launch size depends only on the step's token count,
// never on how the tokens were routed, and nothing is read back to the host: a layer records into
// a CUDA graph and replays for any routing.
//
// Routing: one warp per token (softmax over the experts, top_k rounds of a warp argmax, ties to the
// lower expert id); then ONE block counts the assignments per expert in shared memory, scans them
// into expert_offsets and places every assignment with a shared-memory cursor per expert. Steps of
// up to 128 tokens (decode) do both in one launch of one block; larger ones launch a top-k kernel
// over all tokens, then the sort. The order within an expert depends on atomics; the GEMM computes
// every row independently of its neighbours, so no result depends on it.
//
// Grouped GEMM (moe_gemm_kernel): out[r] = x_r @ w[e]^T for the rows r of each expert e, bf16
// mma.sync m16n8k16 with f32 accumulation, a multi-stage cp.async pipeline over k (32 per stage)
// and 128-byte-row XOR swizzled shared tiles. grid.x walks n in tiles of BN; grid.y enumerates
// (expert, m-tile) pairs in expert order, sized for the worst case (ceil(A / BM) + min(E, A)
// tiles); each block finds its pair by scanning expert_offsets in one warp and exits when past the
// last tile. The kernel is picked on the host from the step's mean rows per expert and the experts
// it may hit: on Hopper a persistent wgmma kernel (moe_gemm_wgmma_kernel: 128 x 256 tiles, a
// producer warpgroup and two consumer warpgroups) beyond 4 rows per expert or wherever the experts
// make two waves of its tiles; else, for decode (up to 16 rows per expert, the memory-bound regime)
// the decode GEMMs' weight stream (gemv_kernel.cuh: 16 weight rows per CTA read once for 8 or 16
// rows of x, 16-byte loads a group ahead in registers) where the weight rows are long enough, else
// 16 x 64 tiles; elsewhere 64-row mma.sync tiles for mid-size batches, 128 x 128 for prefill.
// With `gather` the rows of x are read through sorted_assign straight from the token rows, so no
// permuted copy of the activations is ever made.
//
// Combine (moe_combine_kernel): one block per token, the chosen experts' rows summed in ascending
// expert id with each product rounded (the CPU reference's order), 16-byte vectors of columns per
// thread where the rows allow, every row's loads independent of the others'.
#include <algorithm>
#include <climits>

#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/wgmma_util.cuh"

namespace fg::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Routing

constexpr int kTopkWarps = 4;  // tokens per block of moe_topk_kernel
constexpr int kMaxExperts = 512;
constexpr int kSortThreads = 1024;
constexpr int kSmallRouteTokens = 128;  // up to this many tokens, one block routes them all in one launch

// Softmax and top-k of token t's router logits, by one full warp.
__device__ __forceinline__ void route_token(const MoeRouteParams& p, int t, int lane) {
  const float* x = p.logits + int64_t(t) * p.logits_stride;
  float m = -INFINITY;
  for (int e = lane; e < p.num_experts; e += 32) m = fmaxf(m, x[e]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int e = lane; e < p.num_experts; e += 32) sum += expf(x[e] - m);
  sum = warp_sum(sum);
  uint32_t taken = 0;  // bit i: expert lane + 32 * i is chosen (experts <= 512)
  float chosen_sum = 0.0f;
  float my_weight = 0.0f;
  int my_expert = 0;
  for (int round = 0; round < p.top_k; ++round) {
    float best = -1.0f;
    int best_e = INT_MAX;
    for (int i = 0, e = lane; e < p.num_experts; ++i, e += 32) {
      if ((taken >> i) & 1u) continue;
      const float prob = expf(x[e] - m) / sum;
      if (prob > best) {  // e grows: a tie keeps the lower id
        best = prob;
        best_e = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(kFullMask, best, o);
      const int oe = __shfl_xor_sync(kFullMask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    if (best_e >= p.num_experts) {  // only with non-finite logits: keep the indices in range
      best_e = 0;
      best = 0.0f;
    }
    if ((best_e & 31) == lane) taken |= 1u << (best_e >> 5);
    chosen_sum += best;
    if (lane == round) {
      my_weight = best;
      my_expert = best_e;
    }
  }
  if (lane < p.top_k) {
    const int64_t a = int64_t(t) * p.top_k + lane;
    p.topk_ids[a] = my_expert;
    p.topk_weights[a] = p.renormalize && chosen_sum > 0.0f ? my_weight / chosen_sum : my_weight;
  }
}

__global__ void __launch_bounds__(kTopkWarps * 32) moe_topk_kernel(MoeRouteParams p) {
  pdl_enter();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int t = int(blockIdx.x) * kTopkWarps + warp;
  if (t < p.num_tokens) route_token(p, t, lane);
}

// Counts, scans and places every assignment, by one whole block (the caller's shared arrays).
__device__ __forceinline__ void sort_assignments(const MoeRouteParams& p, int* counts, int* cursor) {
  const int E = p.num_experts;
  const int A = p.num_tokens * p.top_k;
  const int tid = int(threadIdx.x), lane = tid % 32;
  for (int e = tid; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int a = tid; a < A; a += blockDim.x) atomicAdd(&counts[p.topk_ids[a]], 1);
  __syncthreads();
  if (tid < 32) {  // exclusive scan: each lane a contiguous run of experts, then a warp scan
    const int per = (E + 31) / 32, lo = min(E, lane * per), hi = min(E, lo + per);
    int local = 0;
    for (int e = lo; e < hi; ++e) local += counts[e];
    int incl = local;
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += v;
    }
    int run = incl - local;
    for (int e = lo; e < hi; ++e) {
      cursor[e] = run;
      p.expert_offsets[e] = run;
      run += counts[e];
    }
    if (lane == 31) p.expert_offsets[E] = incl;
  }
  __syncthreads();
  for (int a = tid; a < A; a += blockDim.x) {
    const int pos = atomicAdd(&cursor[p.topk_ids[a]], 1);
    p.sorted_assign[pos] = a;
    p.assign_row[a] = pos;
  }
}

__global__ void __launch_bounds__(kSortThreads) moe_sort_kernel(MoeRouteParams p) {
  pdl_enter();
  __shared__ int counts[kMaxExperts];
  __shared__ int cursor[kMaxExperts];
  sort_assignments(p, counts, cursor);
}

// Small steps (decode): top-k by the block's warps, then the sort, in one launch.
__global__ void __launch_bounds__(kSortThreads) moe_route_small_kernel(MoeRouteParams p) {
  pdl_enter();
  __shared__ int counts[kMaxExperts];
  __shared__ int cursor[kMaxExperts];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int t = warp; t < p.num_tokens; t += kSortThreads / 32) route_token(p, t, lane);
  __syncthreads();  // the block's global writes of topk_ids are visible to the whole block after it
  sort_assignments(p, counts, cursor);
}

// ---------------------------------------------------------------------------------------------
// Grouped GEMM

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// c += a * b, bf16 inputs, f32 accumulators (m16n8k16).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kBk = 32;  // k per pipeline stage: one 64-byte row of 4 chunks
constexpr int kRowChunks = kBk / 8;

// Element offset of chunk c (8 elements) of row r in a [rows, kBk] tile, XOR-swizzled so that the
// 8 rows an ldmatrix phase reads sit in 8 distinct 16-byte bank groups.
__device__ __forceinline__ int tile_offset(int r, int c) {
  return r * kBk + ((c ^ ((r >> 1) & 3)) * 8);
}

// A tile shape: BM x BN per block, WM x WN warps, STAGES-deep pipeline.
template <int BM, int BN, int WM, int WN, int STAGES>
struct GemmCfg {
  static constexpr int kBm = BM, kBn = BN, kStages = STAGES;
  static constexpr int kWarpsN = WN;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;   // warp tile
  static constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;  // mma tiles per warp
  static constexpr int kStageElems = (BM + BN) * kBk;
  static constexpr int kSmemBytes = STAGES * kStageElems * 2;
  static constexpr int kAChunks = (BM * kRowChunks + kThreads - 1) / kThreads;  // A chunks per thread
  static constexpr int kBChunks = (BN * kRowChunks + kThreads - 1) / kThreads;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tiles are whole m16 x n16 blocks");
};

using CfgDecode = GemmCfg<16, 64, 1, 4, 8>;     // few rows per expert off the stream (short k, FG_GEMV=0)
using CfgMid = GemmCfg<64, 128, 2, 2, 4>;       // tens of rows per expert
using CfgPrefill = GemmCfg<128, 128, 2, 4, 4>;  // compute-bound

// The (expert, first row within the expert) of m-tile `tile` in expert order, or expert -1 past
// the last tile. Run by one full warp; returns the same values in every lane.
template <int BM>
__device__ __forceinline__ void find_tile(const MoeGemmParams& p, int tile, int& expert, int& row0) {
  const int lane = int(threadIdx.x) % 32;
  const int E = p.num_experts;
  const int per = (E + 31) / 32, lo = min(E, lane * per), hi = min(E, lo + per);
  int local = 0;
  for (int e = lo; e < hi; ++e) local += (p.expert_offsets[e + 1] - p.expert_offsets[e] + BM - 1) / BM;
  int incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += v;
  }
  int found_e = -1, found_row = 0;
  if (tile >= incl - local && tile < incl) {
    int first = incl - local;
    for (int e = lo; e < hi; ++e) {
      const int tiles = (p.expert_offsets[e + 1] - p.expert_offsets[e] + BM - 1) / BM;
      if (tile < first + tiles) {
        found_e = e;
        found_row = (tile - first) * BM;
        break;
      }
      first += tiles;
    }
  }
  // At most one lane found it; everyone takes the max.
  int e_all = found_e;
  for (int o = 16; o > 0; o >>= 1) e_all = max(e_all, __shfl_xor_sync(kFullMask, e_all, o));
  const unsigned owner = __ballot_sync(kFullMask, found_e >= 0);
  expert = e_all;
  row0 = owner ? __shfl_sync(kFullMask, found_row, __ffs(owner) - 1) : 0;
}

// An (expert, m-tile) pair: the expert (-1 past the last tile), the sorted row of the tile's row 0
// and its rows (at most BM).
struct CtaTile {
  int expert, first_row, rows;
};
template <int BM>
__device__ __forceinline__ CtaTile tile_rows(const MoeGemmParams& p, int expert, int row0) {
  CtaTile t{expert, 0, 0};
  if (expert >= 0) {
    t.first_row = p.expert_offsets[expert] + row0;
    t.rows = min(BM, p.expert_offsets[expert + 1] - t.first_row);
  }
  return t;
}
// Pair `tile` as one full warp sees it (every lane the same).
template <int BM>
__device__ __forceinline__ CtaTile warp_tile(const MoeGemmParams& p, int tile) {
  int e, r0;
  find_tile<BM>(p, tile, e, r0);
  return tile_rows<BM>(p, e, r0);
}
// The CTA's pair of blockIdx.y as every thread of the block sees it. Every thread of the block
// calls it (a barrier inside).
template <int BM>
__device__ __forceinline__ CtaTile cta_tile(const MoeGemmParams& p) {
  __shared__ int s_expert, s_row0;
  if (threadIdx.x < 32) {
    int e, r0;
    find_tile<BM>(p, int(blockIdx.y), e, r0);
    if (threadIdx.x == 0) {
      s_expert = e;
      s_row0 = r0;
    }
  }
  __syncthreads();
  return tile_rows<BM>(p, s_expert, s_row0);
}

// Decode-sized steps (a few rows per expert): gemv_kernel.cuh's weight stream, a CTA per 16 weight
// rows of one (expert, kBm-row tile) pair; blockIdx.y enumerates the pairs as moe_gemm_kernel's.
template <int kBm>
struct MoeKind : gemv::DenseKind<__nv_bfloat16, __nv_bfloat16> {
  using Params = MoeGemmParams;
  struct Cta {
    int m;          // rows of the tile
    int first_row;  // sorted row of the tile's row 0
    const char* w;  // the expert's [n, k] weights
  };
  static constexpr bool kRouted = true;
  static constexpr int kMinBlocks = 2;        // 134 registers unbounded
  static constexpr bool kWeightRing = false;  // (measured slower through the ring: docs/perf.md)
  __device__ static bool begin(const Params& p, Cta& cta) {
    const CtaTile tile = cta_tile<kBm>(p);
    if (tile.expert < 0) return false;
    cta.first_row = tile.first_row;
    cta.m = tile.rows;
    cta.w = static_cast<const char*>(p.w) + int64_t(tile.expert) * p.n * p.k * 2;
    return true;
  }
  __device__ static const char* x_row(const Params& p, const Cta& cta, int64_t token) {
    const int sorted = cta.first_row + int(token);
    const int64_t src = p.gather ? p.sorted_assign[sorted] / p.top_k : sorted;
    return static_cast<const char*>(p.x) + src * p.ldx * 2;
  }
  __device__ static const char* w_row(const Params& p, const Cta& cta, int64_t row) { return cta.w + row * p.k * 2; }
  __device__ static int64_t k_bytes(const Params& p) { return int64_t(p.k) * 2; }
  __device__ static void store(const Params& p, const Cta& cta, int64_t token, int64_t j, float sum) {
    static_cast<__nv_bfloat16*>(p.out)[(cta.first_row + token) * p.ldo + j] = __float2bfloat16_rn(sum);
  }
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) moe_gemm_kernel(MoeGemmParams p) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using T = __nv_bfloat16;
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;

  const CtaTile tile = cta_tile<Cfg::kBm>(p);
  const int expert = tile.expert;
  if (expert < 0) return;
  const int first_row = tile.first_row, rows = tile.rows;  // sorted row of the tile's row 0; its rows
  const int n0 = int(blockIdx.x) * Cfg::kBn;
  if (n0 >= p.n) return;

  // This thread's copy sources: the rows are fixed for the whole k loop.
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w) + int64_t(expert) * p.n * p.k;
  const T* a_src[Cfg::kAChunks];
  bool a_valid[Cfg::kAChunks];
#pragma unroll
  for (int i = 0; i < Cfg::kAChunks; ++i) {
    const int idx = tid + i * Cfg::kThreads;
    const int r = idx / kRowChunks, c = idx % kRowChunks;
    a_valid[i] = idx < Cfg::kBm * kRowChunks && r < rows;
    int64_t src_row = 0;
    if (a_valid[i]) {
      const int sorted = first_row + r;
      src_row = p.gather ? p.sorted_assign[sorted] / p.top_k : sorted;
    }
    a_src[i] = x + src_row * p.ldx + c * 8;
  }
  const T* b_src[Cfg::kBChunks];
  bool b_valid[Cfg::kBChunks];
#pragma unroll
  for (int i = 0; i < Cfg::kBChunks; ++i) {
    const int idx = tid + i * Cfg::kThreads;
    const int r = idx / kRowChunks, c = idx % kRowChunks;
    b_valid[i] = idx < Cfg::kBn * kRowChunks && n0 + r < p.n;
    b_src[i] = w + int64_t(b_valid[i] ? n0 + r : 0) * p.k + c * 8;
  }

  auto load_stage = [&](int stage, int kt) {
    T* as = smem + stage * Cfg::kStageElems;
    T* bs = as + Cfg::kBm * kBk;
    const int k0 = kt * kBk;
#pragma unroll
    for (int i = 0; i < Cfg::kAChunks; ++i) {
      const int idx = tid + i * Cfg::kThreads;
      if (idx >= Cfg::kBm * kRowChunks) break;
      const int r = idx / kRowChunks, c = idx % kRowChunks;
      const bool ok = a_valid[i] && k0 + c * 8 < p.k;
      cp_async16(smem_u32(as + tile_offset(r, c)), ok ? a_src[i] + k0 : x, ok);
    }
#pragma unroll
    for (int i = 0; i < Cfg::kBChunks; ++i) {
      const int idx = tid + i * Cfg::kThreads;
      if (idx >= Cfg::kBn * kRowChunks) break;
      const int r = idx / kRowChunks, c = idx % kRowChunks;
      const bool ok = b_valid[i] && k0 + c * 8 < p.k;
      cp_async16(smem_u32(bs + tile_offset(r, c)), ok ? b_src[i] + k0 : w, ok);
    }
  };

  float acc[Cfg::kMt][Cfg::kNt][4];
#pragma unroll
  for (int mt = 0; mt < Cfg::kMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < Cfg::kNt; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

  const int k_tiles = (p.k + kBk - 1) / kBk;
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  const int wm = warp / Cfg::kWarpsN, wn = warp % Cfg::kWarpsN;
  const int warp_row = wm * Cfg::kWarpM, warp_col = wn * Cfg::kWarpN;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is no longer read
    const int next = kt + Cfg::kStages - 1;
    if (next < k_tiles) load_stage(next % Cfg::kStages, next);
    cp_async_commit();

    const T* as = smem + (kt % Cfg::kStages) * Cfg::kStageElems;
    const T* bs = as + Cfg::kBm * kBk;
#pragma unroll
    for (int ks = 0; ks < kBk / 16; ++ks) {
      uint32_t af[Cfg::kMt][4];
#pragma unroll
      for (int mt = 0; mt < Cfg::kMt; ++mt) {
        const int r = warp_row + mt * 16 + (lane % 16);
        const int c = ks * 2 + lane / 16;
        ldmatrix_x4(smem_u32(as + tile_offset(r, c)), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
      }
      uint32_t bf[Cfg::kNt][2];
#pragma unroll
      for (int np = 0; np < Cfg::kNt / 2; ++np) {
        const int r = warp_col + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int c = ks * 2 + ((lane >> 3) & 1);
        ldmatrix_x4(smem_u32(bs + tile_offset(r, c)), bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0],
                    bf[2 * np + 1][1]);
      }
#pragma unroll
      for (int mt = 0; mt < Cfg::kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::kNt; ++nt) mma_bf16(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: thread (g, t) of a warp holds rows g and g + 8, columns 2t and 2t + 1 of each tile.
  T* out = static_cast<T*>(p.out);
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mt = 0; mt < Cfg::kMt; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row + mt * 16 + g + 8 * h;
      if (r >= rows) continue;
      T* orow = out + int64_t(first_row + r) * p.ldo;
#pragma unroll
      for (int nt = 0; nt < Cfg::kNt; ++nt) {
        const int col = n0 + warp_col + nt * 8 + 2 * tq;
        if (col >= p.n) continue;  // n is even: col + 1 < n too
        *reinterpret_cast<__nv_bfloat162*>(orow + col) =
            __floats2bfloat162_rn(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Grouped GEMM on Hopper warpgroup MMA (sm_90a builds on sm_90 only): every step of more than 4
// rows per expert on average, and smaller ones whose experts make enough tiles (launch_moe_gemm).
//
// Persistent: one CTA per SM walks the (m-tile pair, n-tile) grid, 128 rows x 256 columns a tile,
// m-tile pairs in groups of kWgGroupM per n-tile so the CTAs running together share an expert's
// weight rows and the token rows in L2. 384 threads:
//  - warpgroup 0, the producer: per 64-wide k step copies the tile's 128 x rows (gathered through
//    sorted_assign) and 256 weight rows with 16-byte cp.async into 128-byte-swizzled shared memory
//    (attention_wgmma_kernel.cuh's layout), each stage's copies signalling an mbarrier as they
//    land; it runs ahead across tile boundaries while the consumers store a finished tile;
//  - warpgroups 1 and 2, the consumers: 64 rows each, D (64 x 256) += A (64 x 16) B (16 x 256) as
//    four wgmma per stage with both operands in shared memory, f32 accumulators in registers; a
//    stage goes back to the producer once the next stage's MMAs are issued and its own are done.
// Rows past the tile's and columns past k are zero-filled by the copies, so any k (a multiple of
// 8) and n (even) work. A row's sums over k run in one order that depends only on n and k.
// Measured on an H200 (docs/perf.md, tenth session), against the dense cuBLASLt GEMM of the same
// bytes and FLOPs: 59-81 % at 4,096 tokens (the 128 x 128 mma.sync tiles: 32-38 %), 94-103 % from
// 16 to 1,024 tokens (the stream and the 64 x 128 tiles: 41-94 %); tiles of 128 weight rows
// measured 50-59 % at 4,096 tokens, tiles of 64 token rows 52-55 %.

constexpr int kWgBm = 128;       // rows of x per tile: two consumer warpgroups of 64
constexpr int kWgBn = 256;       // weight rows (output columns) per tile
constexpr int kWgMinWaves = 2;   // tiles per SM below which steps of <= 4 rows per expert keep the stream
constexpr int kWgThreads = 384;  // producer warpgroup + two consumer warpgroups

// Shared memory: kStages x (128 rows of x + kWgBn weight rows) x 128 bytes, then the barriers.
struct WgGemm {
  static constexpr int kABytes = kWgBm * 128;
  static constexpr int kBBytes = kWgBn * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = 4;
  static constexpr int kBarOffset = kStages * kStageBytes;
  // + 1 KB so the kernel can align the base to the 1024 bytes the swizzle atoms need.
  static constexpr int kBytes = kBarOffset + 2 * kStages * 8 + 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kWgBk = 64;     // k per stage: one 128-byte row per operand row
constexpr int kWgGroupM = 8;  // m-tile pairs per raster group
constexpr int kWgConsumers = 256;

// The persistent walk both roles take: f(tile, n0) for each of this CTA's tiles that has rows, in
// order. Tile t is m-tile pair g * kWgGroupM + r % gm and n-tile r / gm, where g = t / (kWgGroupM *
// n_tiles), r its remainder and gm the pairs of group g.
template <class F>
__device__ __forceinline__ void wg_gemm_walk(const MoeGemmParams& p, int m_pairs, int n_tiles, F&& f) {
  const int per_group = kWgGroupM * n_tiles;
  for (int t = int(blockIdx.x); t < m_pairs * n_tiles; t += int(gridDim.x)) {
    const int g = t / per_group, r = t - g * per_group;
    const int gm = min(kWgGroupM, m_pairs - g * kWgGroupM);
    const CtaTile tile = warp_tile<kWgBm>(p, g * kWgGroupM + r % gm);
    if (tile.expert >= 0) f(tile, (r / gm) * kWgBn);
  }
}

using WgRing = StageRing<WgGemm::kStages>;

__device__ __forceinline__ void wg_gemm_producer(const MoeGemmParams& p, uint32_t base, int m_pairs, int n_tiles) {
  using L = WgGemm;
  using T = __nv_bfloat16;
  const int tid = int(threadIdx.x);  // 0..127
  const int c = tid % 8, r0 = tid / 8;
  const uint32_t chunk_off = uint32_t((c ^ (r0 & 7)) << 4);  // rows r0 + 16 j all share r0 & 7
  const int k_tiles = (p.k + kWgBk - 1) / kWgBk;
  const T* x = static_cast<const T*>(p.x);
  WgRing ring;
  wg_gemm_walk(p, m_pairs, n_tiles, [&](const CtaTile& tile, int n0) {
    int64_t a_row[kWgBm / 16];  // element offset of row r0 + 16 j of x, -1 past the tile's rows
#pragma unroll
    for (int j = 0; j < kWgBm / 16; ++j) {
      const int r = r0 + 16 * j;
      a_row[j] = -1;
      if (r < tile.rows) {
        const int sorted = tile.first_row + r;
        a_row[j] = int64_t(p.gather ? p.sorted_assign[sorted] / p.top_k : sorted) * p.ldx;
      }
    }
    const T* w = static_cast<const T*>(p.w) + int64_t(tile.expert) * p.n * p.k + int64_t(n0) * p.k;
    const int w_rows = min(kWgBn, p.n - n0);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int col = kt * kWgBk + c * 8;
      const bool in_k = col < p.k;
      mbar_wait(base + L::kBarOffset + 8 * (L::kStages + ring.stage), ring.phase ^ 1);  // empty
      const uint32_t a_dst = base + uint32_t(ring.stage * L::kStageBytes) + chunk_off;
#pragma unroll
      for (int j = 0; j < kWgBm / 16; ++j) {
        const bool ok = in_k && a_row[j] >= 0;
        cp_async16(a_dst + uint32_t((r0 + 16 * j) * 128), ok ? x + a_row[j] + col : x, ok);
      }
      const uint32_t b_dst = a_dst + L::kABytes;
#pragma unroll
      for (int j = 0; j < kWgBn / 16; ++j) {
        const int r = r0 + 16 * j;
        const bool ok = in_k && r < w_rows;
        cp_async16(b_dst + uint32_t(r * 128), ok ? w + int64_t(r) * p.k + col : w, ok);
      }
      mbar_arrive_cp_async(base + L::kBarOffset + 8 * ring.stage);  // full
      ring.next();
    }
  });
}

__device__ __forceinline__ void wg_gemm_consumer(const MoeGemmParams& p, uint32_t base, int m_pairs, int n_tiles) {
  using L = WgGemm;
  using T = __nv_bfloat16;
  const int ctid = int(threadIdx.x) - 128;
  const int wg = ctid >> 7;  // rows 64 wg .. 64 wg + 63 of the tile
  const int warp = (ctid >> 5) & 3, lane = ctid & 31;
  const int row_a = 64 * wg + 16 * warp + (lane >> 2);  // this thread's accumulator rows: row_a, row_a + 8
  const int k_tiles = (p.k + kWgBk - 1) / kWgBk;
  const uint32_t bars = base + L::kBarOffset;
  T* out = static_cast<T*>(p.out);
  WgRing ring;
  wg_gemm_walk(p, m_pairs, n_tiles, [&](const CtaTile& tile, int n0) {
    float acc[kWgBn / 8][4];
#pragma unroll
    for (int i = 0; i < kWgBn / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    consume_stages(ring, bars, k_tiles, acc, [&](int stage) {
      const uint32_t a = base + uint32_t(stage * L::kStageBytes) + uint32_t(64 * wg * 128);
      const uint32_t b = base + uint32_t(stage * L::kStageBytes) + L::kABytes;
#pragma unroll
      for (int kk = 0; kk < kWgBk / 16; ++kk)
        wgmma_ss_n256<true>(acc, wg_desc(a + kk * 32, 16), wg_desc(b + kk * 32, 16), 1);
    });

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_a + 8 * h;
      if (r >= tile.rows) continue;
      T* orow = out + int64_t(tile.first_row + r) * p.ldo + n0 + 2 * (lane & 3);
#pragma unroll
      for (int i = 0; i < kWgBn / 8; ++i) {
        if (n0 + 8 * i + 2 * (lane & 3) >= p.n) continue;  // n is even: the pair's second column too
        *reinterpret_cast<__nv_bfloat162*>(orow + 8 * i) = __floats2bfloat162_rn(acc[i][2 * h], acc[i][2 * h + 1]);
      }
    }
  });
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Launched only on sm_90 by a build that includes sm_90a (MoeGemmParams::wgmma_ctas > 0); elsewhere
// the body is empty.
__global__ void __launch_bounds__(kWgThreads, 1)
    moe_gemm_wgmma_kernel(const __grid_constant__ MoeGemmParams p, int m_pairs) {
  pdl_enter();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
  using L = WgGemm;
  const uint32_t base = (smem_u32(wg_smem_raw) + 1023) & ~1023u;
  init_stage_ring<L::kStages>(base + L::kBarOffset, kWgConsumers);
  const int n_tiles = (p.n + kWgBn - 1) / kWgBn;
  if (threadIdx.x < 128)
    wg_gemm_producer(p, base, m_pairs, n_tiles);
  else
    wg_gemm_consumer(p, base, m_pairs, n_tiles);
#else
  (void)p;
  (void)m_pairs;
#endif
}

template <class Cfg>
void set_gemm_smem_attr() {
  CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
}

// The grid's (expert, m-tile) pairs for tiles of `bm` rows, for the worst routing.
unsigned tile_pairs(const MoeGemmParams& p, int bm) {
  const int64_t tiles = (int64_t(p.num_assign) + bm - 1) / bm + std::min(p.num_experts, p.num_assign);
  FG_CHECK(tiles <= 65535,
           "moe_gemm: " + std::to_string(p.num_assign) + " assignments need more tiles than a grid holds");
  return unsigned(tiles);
}

template <class Cfg>
void launch_gemm_cfg(const MoeGemmParams& p, cudaStream_t stream) {
  dim3 grid(unsigned((p.n + Cfg::kBn - 1) / Cfg::kBn), tile_pairs(p, Cfg::kBm));
  launch_kernel(moe_gemm_kernel<Cfg>, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, p);
}

void launch_gemm_wgmma(const MoeGemmParams& p, cudaStream_t stream) {
  const unsigned m_pairs = tile_pairs(p, kWgBm);
  const int64_t tiles = int64_t(m_pairs) * ((p.n + kWgBn - 1) / kWgBn);
  const unsigned ctas = unsigned(std::min<int64_t>(p.wgmma_ctas, tiles));
  launch_kernel(moe_gemm_wgmma_kernel, ctas, kWgThreads, WgGemm::kBytes, stream, p, int(m_pairs));
}

// Tiles of kBm rows (8 or 16) for gemv_kernel.cuh's kernel.
template <int kBm>
void launch_gemv_tiles(const MoeGemmParams& p, cudaStream_t stream) {
  dim3 grid(unsigned((p.n + 15) / 16), tile_pairs(p, kBm));
  launch_kernel(gemv::gemv_kernel<MoeKind<kBm>, kBm / 8>, grid, gemv::kWarps * 32, 0, stream, p);
}

// ---------------------------------------------------------------------------------------------
// Combine

constexpr int kCombineThreads = 256;
constexpr int kMaxTopK = 16;

// The chosen experts' (row of y, weight) of token t in ascending expert id, in shared memory (the
// whole block reads them for every column).
__device__ __forceinline__ void combine_order(const MoeCombineParams& p, int t, int* rows, float* weights) {
  __shared__ int ids[kMaxTopK];
  const int k = p.top_k;
  if (int(threadIdx.x) < k) ids[threadIdx.x] = p.topk_ids[int64_t(t) * k + threadIdx.x];
  __syncthreads();
  if (int(threadIdx.x) < k) {  // rank by id (ties, which routing never makes, by position)
    const int j = int(threadIdx.x), id = ids[j];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += ids[i] < id || (ids[i] == id && i < j);
    const int64_t a = int64_t(t) * k + j;
    rows[rank] = p.assign_row[a];
    weights[rank] = p.topk_weights[a];
  }
  __syncthreads();
}

// One block per token. Each product is rounded to f32 and added in ascending expert id (the CPU
// reference's order); kVec columns per thread (8: 16-byte rows, else 1).
template <int kVec>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineParams p) {
  pdl_enter();
  __shared__ int rows[kMaxTopK];
  __shared__ float weights[kMaxTopK];
  const int t = int(blockIdx.x);
  combine_order(p, t, rows, weights);
  const __nv_bfloat16* y = static_cast<const __nv_bfloat16*>(p.y);
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + int64_t(t) * p.ldo;
  for (int c = int(threadIdx.x) * kVec; c < p.h; c += kCombineThreads * kVec) {
    float acc[kVec] = {};
#pragma unroll 4
    for (int j = 0; j < p.top_k; ++j) {
      const __nv_bfloat16* src = y + int64_t(rows[j]) * p.ldy + c;
      __nv_bfloat16 v[kVec];
      if constexpr (kVec == 8)
        *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(src);
      else
        v[0] = src[0];
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(__bfloat162float(v[i]), weights[j]));
    }
    __nv_bfloat16 o[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] = __float2bfloat16_rn(acc[i]);
    if constexpr (kVec == 8)
      *reinterpret_cast<uint4*>(out + c) = *reinterpret_cast<const uint4*>(o);
    else
      out[c] = o[0];
  }
}

}  // namespace

int init_moe_kernels() {
  set_gemm_smem_attr<CfgDecode>();
  set_gemm_smem_attr<CfgMid>();
  set_gemm_smem_attr<CfgPrefill>();
  const int sms = wgmma_sms();
  if (sms > 0)
    CUDA_CHECK(
        cudaFuncSetAttribute(moe_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WgGemm::kBytes));
  return sms;
}

void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  FG_CHECK(p.num_experts > 0 && p.num_experts <= kMaxExperts && p.top_k > 0 && p.top_k <= kMaxTopK &&
               p.top_k <= p.num_experts,
           "moe_route: " + std::to_string(p.num_experts) + " experts, top " + std::to_string(p.top_k) +
               " is outside the kernels' limits");
  if (p.num_tokens == 0) return;
  if (p.num_tokens <= kSmallRouteTokens) {
    launch_kernel(moe_route_small_kernel, 1, kSortThreads, 0, stream, p);
    return;
  }
  launch_kernel(moe_topk_kernel, unsigned((p.num_tokens + kTopkWarps - 1) / kTopkWarps), kTopkWarps * 32, 0, stream, p);
  launch_kernel(moe_sort_kernel, 1, kSortThreads, 0, stream, p);
}

void launch_moe_gemm(const MoeGemmParams& p, DType act, cudaStream_t stream) {
  FG_CHECK(act == DType::kBF16, "moe_gemm: bf16 only");
  if (p.num_assign == 0 || p.n == 0) return;
  // Rows per expert that has any, on average, if the assignments spread over every expert.
  const int64_t active = std::min(p.num_experts, p.num_assign);
  const int64_t mean_rows = (int64_t(p.num_assign) + active - 1) / active;
  // The weight stream where its CTAs read long enough rows (several groups of loads per warp):
  // k >= 2,048 for 8-row tiles, k >= 4,096 for 16-row ones (whose warps load half the chunks per
  // group, and whose experts more often take two tiles, reading their weights twice). Measured on
  // an H200 (docs/perf.md, ninth session): Qwen3-MoE's down projection (k = 768) at 32 tokens 0.125
  // -> 0.167 ms on the stream; its gate_up (k = 2,048) at 16 rows per expert cost 11 % of 1k/1k
  // throughput; Mixtral's (k = 4,096 and 14,336) gained at 8 and 16 rows per expert.
  const bool stream_weights = p.decode_gemv && p.k >= (mean_rows <= 4 ? 2048 : 4096);
  // The wgmma kernel where it runs, for every step beyond 4 rows per expert and wherever the
  // experts that may be hit (active) make kWgMinWaves waves of its tiles over the SMs even at one
  // tile each: a 128 x 256 tile is near the H200's ridge point whatever its rows, so it reads the
  // weights at the dense GEMM's rate from 1-2 rows per expert up (93-100 % at 4-64 tokens; the
  // stream 66-94 %, the 64 x 128 tiles 41-72 %) and computes at 61-81 % of the dense rate at 4,096
  // tokens (the 128 x 128 tiles 32-38 %). At a few rows per expert with fewer tiles (batch-1
  // decode: Mixtral's down projection makes 2 x 16) SMs would idle, where the stream's 16-row CTAs
  // spread over all of them.
  const int64_t wg_tiles = active * ((p.n + kWgBn - 1) / kWgBn);
  const bool wgmma = p.wgmma_ctas > 0 && (mean_rows > 4 || wg_tiles >= kWgMinWaves * int64_t(p.wgmma_ctas));
  // Batch-invariant mode: one kernel whatever the step, so a row's k-loop never depends on how
  // many rows its expert got: the wgmma kernel where it runs (each row's sums in one order for
  // given n and k), else the mid-size tile (decode wastes some math on it, prefill some bandwidth).
  if (p.batch_invariant && p.wgmma_ctas > 0)
    launch_gemm_wgmma(p, stream);
  else if (p.batch_invariant)
    launch_gemm_cfg<CfgMid>(p, stream);
  else if (wgmma)
    launch_gemm_wgmma(p, stream);
  else if (mean_rows <= 4 && stream_weights)
    launch_gemv_tiles<8>(p, stream);
  else if (mean_rows <= 16 && stream_weights)
    launch_gemv_tiles<16>(p, stream);
  else if (mean_rows <= 16)
    launch_gemm_cfg<CfgDecode>(p, stream);
  else if (mean_rows <= 64)
    launch_gemm_cfg<CfgMid>(p, stream);
  else
    launch_gemm_cfg<CfgPrefill>(p, stream);
}

void launch_moe_combine(const MoeCombineParams& p, DType act, cudaStream_t stream) {
  FG_CHECK(act == DType::kBF16, "moe_combine: bf16 only");
  FG_CHECK(p.top_k > 0 && p.top_k <= kMaxTopK, "moe_combine: top_k outside [1, 16]");
  if (p.num_tokens == 0 || p.h == 0) return;
  const bool vectors = p.h % 8 == 0 && (p.num_tokens <= 1 || p.ldo % 8 == 0) && p.ldy % 8 == 0 &&
                       (reinterpret_cast<uintptr_t>(p.y) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
  if (vectors)
    launch_kernel(moe_combine_kernel<8>, unsigned(p.num_tokens), kCombineThreads, 0, stream, p);
  else
    launch_kernel(moe_combine_kernel<1>, unsigned(p.num_tokens), kCombineThreads, 0, stream, p);
}

}  // namespace fg::cuda
