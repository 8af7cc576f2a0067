// The decode-sized dense GEMM (gemv.h). A CTA computes 16 outputs (weight rows n0 .. n0 + 15)
// for each of the at most 8 tokens; its warps split k in chunks of 32 elements (64 bytes; chunk c
// to warp c % kWarps). In a chunk, lane (g = lane / 4, t = lane % 4) loads the 8 elements at offset
// 8 t of weight rows n0 + g and n0 + g + 8 and of token g. A dot product may visit k in any order,
// so those 8 elements feed the mma's k slots {2t, 2t + 1, 2t + 8, 2t + 9} of two m16n8k16 products
// (elements 0-3 the first, 4-7 the second) in A (weights, row-major) and B (tokens, column-major)
// alike.
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;  // chunks of one group (a lane loads one group ahead)

template <class T>
__device__ __forceinline__ void mma_16x8x16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&d)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

template <class T, class O>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvParams p) {
  __shared__ float partial[kWarps][32][4];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  const int64_t row_lo = n0 + g, row_hi = n0 + g + 8;
  const bool lo_ok = row_lo < p.n, hi_ok = row_hi < p.n;
  const T* w_lo = static_cast<const T*>(p.w) + (lo_ok ? row_lo : 0) * p.ldw;
  const T* w_hi = static_cast<const T*>(p.w) + (hi_ok ? row_hi : 0) * p.ldw;
  const T* x = static_cast<const T*>(p.x);
  float acc[4] = {};
  const int64_t chunks = (p.k + 31) / 32, step = int64_t(kWarps) * kUnroll;
  struct Group {
    uint4 wl[kUnroll], wh[kUnroll], xv[kUnroll];
  };
  auto load_w = [&](Group& grp, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t off = (c0 + int64_t(u) * kWarps) * 32 + t * 8;
      const bool in_k = off < p.k;  // k % 8 == 0: a lane's 8 elements are all in or all out
      grp.wl[u] = in_k && lo_ok ? __ldcs(reinterpret_cast<const uint4*>(w_lo + off)) : make_uint4(0, 0, 0, 0);
      grp.wh[u] = in_k && hi_ok ? __ldcs(reinterpret_cast<const uint4*>(w_hi + off)) : make_uint4(0, 0, 0, 0);
    }
  };
  auto load_x = [&](Group& grp, int64_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t off = (c0 + int64_t(u) * kWarps) * 32 + t * 8;
      grp.xv[u] =
          off < p.k && g < p.m ? __ldg(reinterpret_cast<const uint4*>(x + g * p.ldx + off)) : make_uint4(0, 0, 0, 0);
    }
  };
  auto multiply = [&](const Group& grp) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t a0[4] = {grp.wl[u].x, grp.wh[u].x, grp.wl[u].y, grp.wh[u].y};
      const uint32_t a1[4] = {grp.wl[u].z, grp.wh[u].z, grp.wl[u].w, grp.wh[u].w};
      mma_16x8x16<T>(a0, grp.xv[u].x, grp.xv[u].y, acc);
      mma_16x8x16<T>(a1, grp.xv[u].z, grp.xv[u].w, acc);
    }
  };
  Group even, odd;
  int64_t c0 = warp;
  // The first group's weights (complete before any step) load while the previous kernel, which
  // writes x, finishes; x and the output wait for it.
  if (c0 < chunks) load_w(even, c0);
  pdl_enter();
  if (c0 < chunks) load_x(even, c0);
  while (c0 < chunks) {
    if (c0 + step < chunks) {
      load_w(odd, c0 + step);
      load_x(odd, c0 + step);
    }
    multiply(even);
    c0 += step;
    if (c0 >= chunks) break;
    if (c0 + step < chunks) {
      load_w(even, c0 + step);
      load_x(even, c0 + step);
    }
    multiply(odd);
    c0 += step;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) partial[warp][lane][r] = acc[r];
  __syncthreads();
  // Accumulator r of lane (g, t): weight row n0 + g (+ 8 for r >= 2), token 2 t + (r & 1).
  for (int e = threadIdx.x; e < 32 * 4; e += blockDim.x) {
    const int l = e / 4, r = e % 4;
    const int64_t j = n0 + (l >> 2) + (r >= 2 ? 8 : 0);
    const int64_t token = (l & 3) * 2 + (r & 1);
    if (j >= p.n || token >= p.m) continue;
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += partial[w][l][r];
    if (p.bias != nullptr) sum += to_f32(static_cast<const T*>(p.bias)[j]);
    static_cast<O*>(p.out)[token * p.ldo + j] = from_f32<O>(sum);
  }
}

__global__ void gemv_probe_kernel(int* built) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  *built = 1;
#else
  *built = 0;
#endif
}

}  // namespace

bool gemv_supported() {
  // The variant the driver runs on this device (SASS built for it, or PTX of an older target)
  // says whether the mma path was compiled in: ask it.
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return false;
  int built = 0;
  gemv_probe_kernel<<<1, 1>>>(flag);  // plain: a device without its code fails the launch
  const bool ok =
      cudaGetLastError() == cudaSuccess && cudaMemcpy(&built, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  (void)cudaFree(flag);
  return ok && built == 1;
}

bool gemv_fits(const GemvParams& p) {
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return p.m >= 1 && p.m <= kGemvMaxRows && p.n * p.k * 2 <= kGemvMaxWeightBytes && p.k % 8 == 0 && aligned(p.x) &&
         aligned(p.w) && (p.m == 1 || p.ldx % 8 == 0) && (p.n == 1 || p.ldw % 8 == 0);
}

void launch_gemv(const GemvParams& p, DType in, DType out, cudaStream_t stream) {
  if (p.n == 0) return;
  FG_CHECK(gemv_fits(p),
           "gemv: needs 1 <= m <= 8, n * k * 2 <= 64 MiB, k % 8 == 0 and 16-byte aligned rows of x and w");
  const unsigned grid = unsigned((p.n + 15) / 16);
  dispatch_act(in, [&]<class T>() {
    if (out == DType::kF32)
      launch_kernel(gemv_kernel<T, float>, grid, kWarps * 32, 0, stream, p);
    else
      launch_kernel(gemv_kernel<T, T>, grid, kWarps * 32, 0, stream, p);
  });
}

}  // namespace fg::cuda
