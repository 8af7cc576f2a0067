// Mid-size bf16 GEMMs on Hopper warpgroup MMA (gemm_mid.h).
//
// The weights are the MMA's 64-row A operand and the tokens its N-wide B operand (all of them in
// one tile: N = the row count rounded up to 32, at most 256), so each weight is read once and a
// CTA's tile is 128 weight rows x every token. A problem is the n/128 weight tiles times its k/64
// steps, split evenly over one persistent CTA per SM ("stream-K"): CTA c takes steps [c u, (c + 1)
// u) of that sequence, which may end inside a tile. A tile computed by one CTA is stored from its
// registers; a tile shared by CTAs is summed through the workspace: each writes its partial sums
// (in the accumulator layout, 16-byte coalesced), counts itself in the tile's counter, and the
// last to arrive adds every share in CTA order (so the result does not depend on who came last),
// stores the tile and resets the counter. No CTA waits for another.
//
// 384 threads: warpgroup 0, the producer, copies each step's 128 weight rows and N token rows of
// 64 k (128 bytes a row) with 16-byte cp.async into 128-byte-swizzled shared memory (the layout of
// moe.cu's grouped GEMM and the attention kernel), each stage's copies signalling an mbarrier as
// they land; the first stages' weights are requested before the kernel waits for the one that
// writes x (launch.cuh). Warpgroups 1 and 2, the consumers, run D (64 x N) += A (64 x 16) B (16 x
// N) from shared memory, 64 weight rows each, and give a stage back once the next one's MMAs are
// issued. Stages: as many as fit in ~200 KB (8 at 32 tokens, 4 at 256).
//
// Gated (run_gated: a gated MLP's gate/up projection with its activation): a tile's 128 rows are 64
// gate rows and the 64 up rows of the same output columns, interleaved by 8 so that every consumer
// thread's two accumulator rows are one column's gate and up; the epilogue writes act(gate) * up,
// and the [m, 2 * inter] gate_up product never reaches memory.
#include <algorithm>

#include "backend/cuda/gemm_mid.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/stream_k.h"
#include "backend/cuda/wgmma_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kBm = 128;  // weight rows per tile: two consumer warpgroups of 64
constexpr int kBk = 64;   // k per step: one 128-byte row per operand row
constexpr int kThreads = 384;
constexpr int kMaxTiles = 8192;  // counters: n up to 1M weight rows
constexpr int kMinStepsPerCta = 4;
constexpr int kMaxShare = 8;  // a tile's steps in at most 8 runs (9 CTAs): the last one reads them all

struct MidParams {
  const __nv_bfloat16* x;
  int64_t ldx;
  const __nv_bfloat16* w;
  int64_t ldw;
  const __nv_bfloat16* bias;
  void* out;
  int64_t ldo;
  int m, n, k;
  // Gated (the gate/up projection with its activation): w is [gate | up] of half = n / 2 rows each,
  // out [m, half] = act(x gate^T) * (x up^T), act SiLU or (gelu) GELU(tanh).
  int half;
  bool gelu;
  StreamKSplit split;  // tiles (n / 128, or half / 64 gated) of k / 64 steps
  float* ws;
  int* counters;
};

template <int N>
struct Layout {
  static constexpr int kABytes = kBm * 128;
  static constexpr int kBBytes = N * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = std::min(8, (200 * 1024) / kStageBytes);
  static constexpr int kBarOffset = kStages * kStageBytes;
  // Barriers, then the last-arrival flag; + 1 KB so the base can be aligned to the 1024 bytes the
  // swizzle atoms need.
  static constexpr int kBytes = kBarOffset + 2 * kStages * 8 + 16 + 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kConsumers = 256;

template <int N, bool kGated>
__device__ __forceinline__ void mid_producer(const MidParams& p, uint32_t base) {
  using L = Layout<N>;
  const int tid = int(threadIdx.x);  // 0..127
  const int c = tid % 8, r0 = tid / 8;
  const uint32_t chunk_off = uint32_t((c ^ (r0 & 7)) << 4);  // rows r0 + 16 j all share r0 & 7
  const uint32_t bars = base + L::kBarOffset;
  // One step's copies: the weights (A) and, once x may be read, the tokens (B). Row r0 + 16 j of
  // a tile is weight row n0 + r0 + 16 j; gated, it is gate row (r0 < 8) or up row (r0 >= 8) g0 +
  // 8 j + r0 % 8, so each consumer thread's two accumulator rows (8 apart) are the gate and the up
  // of one output column.
  auto load_a = [&](int tile, int kt, int stage) {
    const int col = kt * kBk + c * 8;
    const uint32_t dst = base + uint32_t(stage * L::kStageBytes) + chunk_off;
#pragma unroll
    for (int j = 0; j < kBm / 16; ++j) {
      const int r = r0 + 16 * j;
      int row;
      bool ok;
      if constexpr (kGated) {
        const int g = tile * (kBm / 2) + 8 * j + (r0 & 7);
        row = (r0 < 8 ? 0 : p.half) + g;
        ok = col < p.k && g < p.half;
      } else {
        row = tile * kBm + r;
        ok = col < p.k && row < p.n;
      }
      cp_async16(dst + uint32_t(r * 128), ok ? p.w + int64_t(row) * p.ldw + col : p.w, ok);
    }
  };
  auto load_b = [&](int kt, int stage) {
    const int col = kt * kBk + c * 8;
    const uint32_t dst = base + uint32_t(stage * L::kStageBytes + L::kABytes) + chunk_off;
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      const int r = r0 + 16 * j;
      const bool ok = col < p.k && r < p.m;
      cp_async16(dst + uint32_t(r * 128), ok ? p.x + int64_t(r) * p.ldx + col : p.x, ok);
    }
  };
  // The first kStages steps' weights before the wait (every stage is free then).
  int step = 0;
  p.split.walk(int(blockIdx.x), [&](int tile, int kb, int ke, bool) {
    for (int kt = kb; kt < ke && step < L::kStages; ++kt) load_a(tile, kt, step++);
  });
  pdl_enter();
  step = 0;
  StageRing<L::kStages> ring;
  p.split.walk(int(blockIdx.x), [&](int tile, int kb, int ke, bool) {
    for (int kt = kb; kt < ke; ++kt, ++step) {
      if (step >= L::kStages) {
        mbar_wait(bars + 8 * (L::kStages + ring.stage), ring.phase ^ 1);  // empty
        load_a(tile, kt, ring.stage);
      }
      load_b(kt, ring.stage);
      mbar_arrive_cp_async(bars + 8 * ring.stage);  // full
      ring.next();
    }
  });
}

template <int N, class O, bool kGated>
__device__ __forceinline__ void mid_consumer(const MidParams& p, uint32_t base) {
  using L = Layout<N>;
  const int ctid = int(threadIdx.x) - 128;
  const int wg = ctid >> 7;  // weight rows 64 wg .. 64 wg + 63 of the tile
  const int warp = (ctid >> 5) & 3, lane = ctid & 31;
  const int row_a = 64 * wg + 16 * warp + (lane >> 2);  // this thread's rows: row_a, row_a + 8
  const uint32_t bars = base + L::kBarOffset;
  volatile int* flag = reinterpret_cast<volatile int*>(
      reinterpret_cast<unsigned char*>(__cvta_shared_to_generic(bars + 2 * L::kStages * 8)));
  O* out = static_cast<O*>(p.out);
  float4* ws = reinterpret_cast<float4*>(p.ws);
  pdl_wait();  // before the first store
  StageRing<L::kStages> ring;
  p.split.walk(int(blockIdx.x), [&](int tile, int kb, int ke, bool first) {
    float acc[N / 8][4];
#pragma unroll
    for (int i = 0; i < N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    consume_stages(ring, bars, ke - kb, acc, [&](int stage) {
      const uint32_t a = base + uint32_t(stage * L::kStageBytes) + uint32_t(64 * wg * 128);
      const uint32_t b = base + uint32_t(stage * L::kStageBytes) + L::kABytes;
#pragma unroll
      for (int kk = 0; kk < kBk / 16; ++kk)
        wgmma_ss<N, true>(acc, wg_desc(a + kk * 32, 16), wg_desc(b + kk * 32, 16), 1);
    });

    if (kb > 0 || ke < p.split.steps) {            // a shared tile: this CTA's share to the workspace
      constexpr int kSlot = (N / 8) * kConsumers;  // float4s per partial tile
      float4* mine = ws + int64_t(2 * int(blockIdx.x) + (first ? 0 : 1)) * kSlot + ctid;
#pragma unroll
      for (int i = 0; i < N / 8; ++i)
        __stcg(mine + i * kConsumers, make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
      __threadfence();
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      const int c_first = p.split.first_cta(tile), c_last = p.split.last_cta(tile);
      if (ctid == 0) *flag = atomicAdd(p.counters + tile, 1) == c_last - c_first;
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      if (!*flag) return;
      __threadfence();
#pragma unroll
      for (int i = 0; i < N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
      for (int cta = c_first; cta <= c_last; ++cta) {
        const float4* share = ws + int64_t(2 * cta + (p.split.begins_in(cta, tile) ? 0 : 1)) * kSlot + ctid;
#pragma unroll
        for (int i = 0; i < N / 8; ++i) {
          const float4 v = __ldcg(share + i * kConsumers);
          acc[i][0] += v.x;
          acc[i][1] += v.y;
          acc[i][2] += v.z;
          acc[i][3] += v.w;
        }
      }
      if (ctid == 0) p.counters[tile] = 0;
    }

    if constexpr (kGated) {
      // Rows row_a and row_a + 8 are the gate and the up of output column col, rounded to bf16
      // as a stored gate_up would be, then silu_mul's / gelu_tanh_mul's arithmetic.
      const int col = tile * (kBm / 2) + 32 * wg + 8 * warp + (lane >> 2);
      if (col >= p.half) return;
      const float bg = p.bias != nullptr ? __bfloat162float(p.bias[col]) : 0.f;
      const float bu = p.bias != nullptr ? __bfloat162float(p.bias[p.half + col]) : 0.f;
#pragma unroll
      for (int i = 0; i < N / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = 8 * i + 2 * (lane & 3) + e;
          if (t >= p.m) continue;
          const __nv_bfloat16 g = __float2bfloat16_rn(acc[i][e] + bg), u = __float2bfloat16_rn(acc[i][2 + e] + bu);
          out[int64_t(t) * p.ldo + col] =
              p.gelu ? act_mul_one<__nv_bfloat16, true>(g, u) : act_mul_one<__nv_bfloat16, false>(g, u);
        }
      }
    } else {
      const int n0 = tile * kBm;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = n0 + row_a + 8 * h;  // the output column: a weight row
        if (col >= p.n) continue;
        const float b = p.bias != nullptr ? __bfloat162float(p.bias[col]) : 0.f;
#pragma unroll
        for (int i = 0; i < N / 8; ++i) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int t = 8 * i + 2 * (lane & 3) + e;
            if (t < p.m) out[int64_t(t) * p.ldo + col] = from_f32<O>(acc[i][2 * h + e] + b);
          }
        }
      }
    }
  });
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Launched only on sm_90 by a build that includes sm_90a (GemmMid::create); elsewhere the body is
// empty.
template <int N, class O, bool kGated>
__global__ void __launch_bounds__(kThreads, 1) gemm_mid_kernel(const __grid_constant__ MidParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char mid_smem_raw[];
  using L = Layout<N>;
  const uint32_t base = (smem_u32(mid_smem_raw) + 1023) & ~1023u;
  init_stage_ring<L::kStages>(base + L::kBarOffset, kConsumers);
  if (threadIdx.x < 128)
    mid_producer<N, kGated>(p, base);
  else
    mid_consumer<N, O, kGated>(p, base);
#else
  pdl_enter();
  (void)p;
#endif
}

// The kernels a problem may launch: plain with bf16 or f32 out, gated (bf16 out).
template <int N, class F>
void each_kernel(F&& f) {
  f(gemm_mid_kernel<N, __nv_bfloat16, false>, Layout<N>::kBytes);
  f(gemm_mid_kernel<N, float, false>, Layout<N>::kBytes);
  f(gemm_mid_kernel<N, __nv_bfloat16, true>, Layout<N>::kBytes);
}

template <class O, bool kGated>
void launch_rows(const MidParams& p, cudaStream_t stream) {
  auto go = [&]<int N>() {
    launch_kernel(gemm_mid_kernel<N, O, kGated>, unsigned(p.split.ctas), kThreads, Layout<N>::kBytes, stream, p);
  };
  switch ((p.m + 31) / 32) {
    case 1: return go.template operator()<32>();
    case 2: return go.template operator()<64>();
    case 3: return go.template operator()<96>();
    case 4: return go.template operator()<128>();
    case 5: return go.template operator()<160>();
    case 6: return go.template operator()<192>();
    case 7: return go.template operator()<224>();
    default: return go.template operator()<256>();
  }
}

void set_smem_attrs() {
  auto set = [](auto kernel, int bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  };
  each_kernel<32>(set);
  each_kernel<64>(set);
  each_kernel<96>(set);
  each_kernel<128>(set);
  each_kernel<160>(set);
  each_kernel<192>(set);
  each_kernel<224>(set);
  each_kernel<256>(set);
}

bool aligned16(const void* q) {
  return (reinterpret_cast<uintptr_t>(q) & 15) == 0;
}

}  // namespace

std::unique_ptr<GemmMid> GemmMid::create() {
  const int sms = wgmma_sms();
  if (sms == 0) return nullptr;
  set_smem_attrs();
  float* ws = nullptr;
  int* counters = nullptr;
  CUDA_CHECK(cudaMalloc(&ws, size_t(sms) * 2 * kBm * kGemmMidMaxRows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&counters, kMaxTiles * sizeof(int)));
  CUDA_CHECK(cudaMemset(counters, 0, kMaxTiles * sizeof(int)));
  // The memset runs on the legacy stream, which the backend's non-blocking stream does not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
  return std::unique_ptr<GemmMid>(new GemmMid(sms, ws, counters));
}

GemmMid::GemmMid(int sms, float* workspace, int* counters) : sms_(sms), workspace_(workspace), counters_(counters) {}

GemmMid::~GemmMid() {
  (void)cudaFree(workspace_);
  (void)cudaFree(counters_);
}

bool GemmMid::fits(const GemvParams& p, DType in, DType out) const {
  return in == DType::kBF16 && (out == DType::kBF16 || out == DType::kF32) && p.m >= 1 && p.m <= kGemmMidMaxRows &&
         p.n >= 1 && (p.n + kBm - 1) / kBm <= kMaxTiles && p.k >= 1 && p.k % 8 == 0 && p.k <= (int64_t(1) << 22) &&
         aligned16(p.x) && aligned16(p.w) && (p.m == 1 || p.ldx % 8 == 0) && (p.n == 1 || p.ldw % 8 == 0);
}

bool GemmMid::fits_gated(const GemvParams& p, DType in) const {
  return p.n % 2 == 0 && p.n >= 2 && fits(p, in, DType::kBF16);
}

namespace {

MidParams mid_params(const GemvParams& p, float* ws, int* counters) {
  MidParams mp{};
  mp.x = static_cast<const __nv_bfloat16*>(p.x);
  mp.ldx = p.ldx;
  mp.w = static_cast<const __nv_bfloat16*>(p.w);
  mp.ldw = p.ldw;
  mp.bias = static_cast<const __nv_bfloat16*>(p.bias);
  mp.out = p.out;
  mp.ldo = p.ldo;
  mp.m = int(p.m);
  mp.n = int(p.n);
  mp.k = int(p.k);
  mp.half = int(p.n / 2);
  mp.ws = ws;
  mp.counters = counters;
  return mp;
}

}  // namespace

void GemmMid::run(const GemvParams& p, DType out, cudaStream_t stream) {
  FG_CHECK(fits(p, DType::kBF16, out), "gemm_mid: the problem is outside the kernel's limits");
  MidParams mp = mid_params(p, workspace_, counters_);
  mp.split = StreamKSplit::make((p.n + kBm - 1) / kBm, (p.k + kBk - 1) / kBk, sms_, kMinStepsPerCta, kMaxShare);
  if (out == DType::kF32)
    launch_rows<float, false>(mp, stream);
  else
    launch_rows<__nv_bfloat16, false>(mp, stream);
}

void GemmMid::run_gated(const GemvParams& p, bool gelu, cudaStream_t stream) {
  FG_CHECK(fits_gated(p, DType::kBF16), "gemm_mid: the gated problem is outside the kernel's limits");
  MidParams mp = mid_params(p, workspace_, counters_);
  mp.gelu = gelu;
  mp.split =
      StreamKSplit::make((mp.half + kBm / 2 - 1) / (kBm / 2), (p.k + kBk - 1) / kBk, sms_, kMinStepsPerCta, kMaxShare);
  launch_rows<__nv_bfloat16, true>(mp, stream);
}

}  // namespace fg::cuda
