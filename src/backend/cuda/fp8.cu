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

}  // namespace

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
