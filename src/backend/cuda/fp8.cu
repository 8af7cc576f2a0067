// FP8 (e4m3) kernels of the CUDA backend: the per-token quantization of activations that feeds the
// FP8 GEMM, and a plain FP8 GEMM for the shapes cuBLASLt declines. e4m3 goes through cuda_fp8.h:
// __nv_cvt_float_to_fp8 rounds to nearest even and, with __NV_SATFINITE, saturates at +-448, as
// the host's f32_to_f8e4m3 does; the divisions are IEEE (__fdiv_rn) whatever the compile flags, so
// codes and scales are bit for bit the CPU reference's for the same inputs.
#include <cuda_fp8.h>

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kQuantThreads = 256;
constexpr float kE4m3Max = 448.0f;

__device__ __forceinline__ float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return float(v);
}

template <class T>
__global__ void quantize_rows_fp8_kernel(QuantizeRowsFp8Params p) {
  pdl_enter();
  __shared__ float warp_max[kQuantThreads / 32];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) amax = fmaxf(amax, fabsf(to_f32(x[j])));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kQuantThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) warp_max[0] = v;
  }
  __syncthreads();
  float s = __fdiv_rn(warp_max[0], kE4m3Max);
  if (!(s > 0.0f)) s = 1.0f;
  uint8_t* codes = p.codes + r * p.k;
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x)
    codes[j] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(to_f32(x[j]), s), __NV_SATFINITE, __NV_E4M3));
  if (threadIdx.x == 0) p.scales[r] = s;
}

template <class T>
__global__ void gemm_fp8_fallback_kernel(GemmFp8Params p) {
  pdl_enter();
  const int64_t total = p.m * p.n;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / p.n, j = e - (e / p.n) * p.n;
    const uint8_t* x = p.x + i * p.k;
    const uint8_t* w = p.w + j * p.k;
    float acc = 0.0f;
    for (int64_t l = 0; l < p.k; ++l) acc = __fadd_rn(acc, __fmul_rn(e4m3_value(x[l]), e4m3_value(w[l])));
    static_cast<T*>(p.out)[e] = from_f32<T>(__fmul_rn(__fmul_rn(acc, p.x_scales[i]), p.w_scales[j]));
  }
}

// gemv_fp8: a CTA computes 16 outputs (weight rows n0 .. n0 + 15) for every token; its warps
// split k in 64-byte chunks (chunk c to warp c % kGemvWarps). In a chunk, lane (g = lane / 4,
// t = lane % 4) loads 16 bytes at offset 16 t of weight rows n0 + g and n0 + g + 8 and of token g
// of each 8-token tile. A dot product may visit k in any order, so those 16 bytes feed the mma's
// k slots {4t..4t+3, 16+4t..16+4t+3} of two m16n8k32 products (bytes 0-7 the first, 8-15 the
// second) in A (weights, row-major) and B (tokens, column-major) alike.
constexpr int kGemvWarps = 8;
// Chunks of one group (a lane loads two groups ahead): 4 with one token tile, 2 with two, which
// keeps registers at 128 and so two CTAs on each SM.
template <int kTiles>
constexpr int kGemvUnroll = 4 / kTiles;

__device__ __forceinline__ void mma_e4m3_16x8x32(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&d)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f), "f"(0.0f), "f"(0.0f), "f"(0.0f));
#else
  d[0] = d[1] = d[2] = d[3] = 0.0f;  // never launched: gemv_fp8_supported() is false
#endif
}

template <class T, int kTiles>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_fp8_kernel(GemmFp8Params p) {
  __shared__ float partial[kGemvWarps][kTiles][32][4];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  const int64_t row_lo = n0 + g, row_hi = n0 + g + 8;
  const uint8_t* w_lo = p.w + row_lo * p.k;
  const uint8_t* w_hi = p.w + row_hi * p.k;
  const bool lo_ok = row_lo < p.n, hi_ok = row_hi < p.n;
  float acc[kTiles][4] = {};
  const int64_t chunks = (p.k + 63) / 64, step = int64_t(kGemvWarps) * kGemvUnroll<kTiles>;
  // A warp's next group of chunks is loaded while it multiplies the current one (two register
  // buffers), so its loads never drain between groups.
  struct Group {
    uint4 wl[kGemvUnroll<kTiles>], wh[kGemvUnroll<kTiles>], xv[kGemvUnroll<kTiles>][kTiles];
  };
  auto load_w = [&](Group& grp, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll<kTiles>; ++u) {
      const int64_t off = (c0 + int64_t(u) * kGemvWarps) * 64 + t * 16;
      const bool in_k = off < p.k;  // k % 16 == 0: a lane's 16 bytes are all in or all out
      grp.wl[u] = in_k && lo_ok ? __ldcs(reinterpret_cast<const uint4*>(w_lo + off)) : make_uint4(0, 0, 0, 0);
      grp.wh[u] = in_k && hi_ok ? __ldcs(reinterpret_cast<const uint4*>(w_hi + off)) : make_uint4(0, 0, 0, 0);
    }
  };
  auto load_x = [&](Group& grp, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll<kTiles>; ++u) {
      const int64_t off = (c0 + int64_t(u) * kGemvWarps) * 64 + t * 16;
      const bool in_k = off < p.k;
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int64_t token = int64_t(i) * 8 + g;
        grp.xv[u][i] = in_k && token < p.m ? __ldg(reinterpret_cast<const uint4*>(p.x + token * p.k + off))
                                           : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto load = [&](Group& grp, int64_t c0) {
    load_w(grp, c0);
    load_x(grp, c0);
  };
  auto multiply = [&](const Group& grp) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll<kTiles>; ++u) {
      const uint32_t a0[4] = {grp.wl[u].x, grp.wh[u].x, grp.wl[u].y, grp.wh[u].y};
      const uint32_t a1[4] = {grp.wl[u].z, grp.wh[u].z, grp.wl[u].w, grp.wh[u].w};
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        float d[4];
        mma_e4m3_16x8x32(a0, grp.xv[u][i].x, grp.xv[u][i].y, d);
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][r] += d[r];
        mma_e4m3_16x8x32(a1, grp.xv[u][i].z, grp.xv[u][i].w, d);
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][r] += d[r];
      }
    }
  };
  Group even, odd;
  int64_t c0 = warp;
  // The first group's weights (complete before any step) load while the previous kernel, which
  // writes x, finishes (launch.cuh); x and the output wait for it.
  if (c0 < chunks) load_w(even, c0);
  pdl_enter();
  if (c0 < chunks) load_x(even, c0);
  while (c0 < chunks) {
    if (c0 + step < chunks) load(odd, c0 + step);
    multiply(even);
    c0 += step;
    if (c0 >= chunks) break;
    if (c0 + step < chunks) load(even, c0 + step);
    multiply(odd);
    c0 += step;
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) partial[warp][i][lane][r] = acc[i][r];
  __syncthreads();
  // Accumulator r of lane (g, t) in tile i: weight row n0 + g (+ 8 for r >= 2), token 8 i + 2 t + (r & 1).
  for (int e = threadIdx.x; e < kTiles * 32 * 4; e += blockDim.x) {
    const int i = e / 128, l = (e / 4) % 32, r = e % 4;
    const int64_t j = n0 + (l >> 2) + (r >= 2 ? 8 : 0);
    const int64_t token = int64_t(i) * 8 + (l & 3) * 2 + (r & 1);
    if (j >= p.n || token >= p.m) continue;
    float sum = 0.0f;
    for (int w = 0; w < kGemvWarps; ++w) sum += partial[w][i][l][r];
    static_cast<T*>(p.out)[token * p.n + j] = from_f32<T>(__fmul_rn(__fmul_rn(sum, p.x_scales[token]), p.w_scales[j]));
  }
}

__global__ void gemv_fp8_probe_kernel(int* built) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  *built = 1;
#else
  *built = 0;
#endif
}

}  // namespace

bool gemv_fp8_supported() {
  // The variant the driver runs on this device (SASS built for it, or PTX of an older target)
  // says whether the mma path was compiled in: ask it.
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return false;
  int built = 0;
  gemv_fp8_probe_kernel<<<1, 1>>>(flag);  // plain: a device without its code fails the launch
  const bool ok =
      cudaGetLastError() == cudaSuccess && cudaMemcpy(&built, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  (void)cudaFree(flag);
  return ok && built == 1;
}

void launch_gemv_fp8(const GemmFp8Params& p, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  FG_CHECK(p.m <= kGemvFp8MaxRows && p.k % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
           "gemv_fp8: m <= 16, k % 16 == 0 and 16-byte aligned operands");
  const unsigned grid = unsigned((p.n + 15) / 16);
  dispatch_act(out, [&]<class T>() {
    if (p.m <= 8) {
      launch_kernel(gemv_fp8_kernel<T, 1>, grid, kGemvWarps * 32, 0, stream, p);
    } else {
      launch_kernel(gemv_fp8_kernel<T, 2>, grid, kGemvWarps * 32, 0, stream, p);
    }
  });
}

void launch_quantize_rows_fp8(const QuantizeRowsFp8Params& p, DType act, cudaStream_t stream) {
  if (p.m == 0) return;
  FG_CHECK(p.m <= 0x7fffffff, "quantize_rows_fp8: too many rows");
  dispatch_act(
      act, [&]<class T>() { launch_kernel(quantize_rows_fp8_kernel<T>, unsigned(p.m), kQuantThreads, 0, stream, p); });
}

void launch_gemm_fp8_fallback(const GemmFp8Params& p, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  dispatch_act(
      out, [&]<class T>() { launch_kernel(gemm_fp8_fallback_kernel<T>, grid_for(p.m * p.n, 256), 256, 0, stream, p); });
}

}  // namespace fg::cuda
