// FP8 (e4m3) kernels of the CUDA backend: the quantization of activations (per token, or per token
// and 128-column group) that feeds the FP8 GEMM, of a row or of the gated activation computed on
// the way (the down projection's input), and a plain FP8 GEMM for the shapes cuBLASLt declines.
// e4m3 goes through cuda_fp8.h:
// __nv_cvt_float_to_fp8 rounds to nearest even and, with __NV_SATFINITE, saturates at +-448, as
// the host's f32_to_f8e4m3 does; the divisions are IEEE (__fdiv_rn) whatever the compile flags, so
// codes and scales are bit for bit the CPU reference's for the same inputs.
#include <cuda_fp8.h>

#include <algorithm>

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

// The 8 input values at columns [col, col + 8) of row r, as 16 bytes of T: x's own, or the gated
// activation of x's gate and up halves (act_mul_vec, silu_mul's rounding).
template <class T, Fp8Input kIn>
__device__ __forceinline__ uint4 load_input8(const QuantizeRowsFp8Params& p, int64_t r, int64_t col) {
  const T* row = static_cast<const T*>(p.x) + r * p.x_stride;
  const uint4 a = *reinterpret_cast<const uint4*>(row + col);
  if constexpr (kIn == Fp8Input::kRows) {
    return a;
  } else {
    return act_mul_vec<T, kIn == Fp8Input::kGeluTanhMul>(a, *reinterpret_cast<const uint4*>(row + p.k + col));
  }
}

// Rows that allow 16-byte vectors (k and the row stride multiples of 8 elements, aligned bases):
// a block as wide as the row (up to 1024 threads, kVecs vectors each) keeps the row in registers
// between the two passes, so a decode step's single row is one read and two block-wide steps
// instead of 256 threads walking it twice. The maximum does not depend on the order it is taken
// in, so the codes and scale are those of the kernel above.
template <class T, int kVecs, Fp8Input kIn>
__global__ void quantize_rows_fp8_vec_kernel(QuantizeRowsFp8Params p) {
  constexpr int kVec = 16 / int(sizeof(T));
  __shared__ float scratch[32];
  pdl_enter();
  const int64_t r = blockIdx.x;
  const int64_t nvec = p.k / kVec;
  uint4 v[kVecs];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * blockDim.x;
    v[i] = c < nvec ? load_input8<T, kIn>(p, r, c * kVec) : make_uint4(0, 0, 0, 0);
    const T* e = reinterpret_cast<const T*>(&v[i]);
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(to_f32(e[j])));
  }
  amax = block_max(amax, scratch);
  float s = __fdiv_rn(amax, kE4m3Max);
  if (!(s > 0.0f)) s = 1.0f;
  uint2* codes = reinterpret_cast<uint2*>(p.codes + r * p.k);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * blockDim.x;
    if (c >= nvec) continue;
    const T* e = reinterpret_cast<const T*>(&v[i]);
    uint8_t b[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      b[j] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(to_f32(e[j]), s), __NV_SATFINITE, __NV_E4M3));
    codes[c] = make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24,
                          uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24);
  }
  if (threadIdx.x == 0) p.scales[r] = s;
}

// Per token and group of 128 columns (grouped scales): one warp per (row, group), four columns per
// lane. As above, the maximum does not depend on its order: codes and scales are the reference's.
template <class T>
__global__ void quantize_groups_fp8_kernel(QuantizeRowsFp8Params p) {
  pdl_enter();
  const int64_t groups = (p.k + 127) / 128;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; item < p.m * groups; item += warps) {
    const int64_t r = item / groups, grp = item - r * groups;
    const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
    const int64_t j0 = grp * 128 + lane * 4;
    float v[4];
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = j0 + e < p.k ? to_f32(x[j0 + e]) : 0.0f;
      amax = fmaxf(amax, fabsf(v[e]));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float s = __fdiv_rn(amax, kE4m3Max);
    if (!(s > 0.0f)) s = 1.0f;
    uint8_t* codes = p.codes + r * p.k;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (j0 + e < p.k) codes[j0 + e] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(v[e], s), __NV_SATFINITE, __NV_E4M3));
    if (lane == 0) p.scales[grp * p.m + r] = s;
  }
}

// Grouped scales on rows that allow 16-byte vectors (as for quantize_rows_fp8_vec_kernel): a
// half-warp per (row, group), 8 columns per lane, a warp on two consecutive items.
template <class T, Fp8Input kIn>
__global__ void quantize_groups_fp8_vec_kernel(QuantizeRowsFp8Params p) {
  pdl_enter();
  const int64_t groups = (p.k + 127) / 128, total = p.m * groups;
  const int half = threadIdx.x & 15;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; 2 * w < total; w += warps) {
    const int64_t item = 2 * w + ((threadIdx.x >> 4) & 1);
    const bool valid = item < total;
    const int64_t r = valid ? item / groups : 0, grp = valid ? item - r * groups : 0;
    const int64_t j0 = grp * 128 + half * 8;
    const bool in = valid && j0 < p.k;  // k % 8 == 0: a lane's 8 columns are all in or all out
    const uint4 v = in ? load_input8<T, kIn>(p, r, j0) : make_uint4(0, 0, 0, 0);
    const T* e = reinterpret_cast<const T*>(&v);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(to_f32(e[j])));
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float s = __fdiv_rn(amax, kE4m3Max);
    if (!(s > 0.0f)) s = 1.0f;
    if (in) {
      uint8_t b[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        b[j] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(to_f32(e[j]), s), __NV_SATFINITE, __NV_E4M3));
      *reinterpret_cast<uint2*>(p.codes + r * p.k + j0) =
          make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24,
                     uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24);
    }
    if (valid && half == 0) p.scales[grp * p.m + r] = s;
  }
}

template <class T>
__global__ void gemm_fp8_fallback_kernel(GemmFp8Params p) {
  pdl_enter();
  const int64_t total = p.m * p.n;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / p.n, j = e - (e / p.n) * p.n;
    const uint8_t* x = p.x + i * p.k;
    const uint8_t* w = p.w + j * p.k;
    float result = 0.0f;
    if (p.w_scale_stride == 0) {
      float acc = 0.0f;
      for (int64_t l = 0; l < p.k; ++l) acc = __fadd_rn(acc, __fmul_rn(e4m3_value(x[l]), e4m3_value(w[l])));
      result = __fmul_rn(__fmul_rn(acc, p.x_scales[i]), p.w_scales[j]);
    } else {
      for (int64_t g = 0; g * 128 < p.k; ++g) {
        float acc = 0.0f;
        for (int64_t l = g * 128; l < min(p.k, (g + 1) * 128); ++l)
          acc = __fadd_rn(acc, __fmul_rn(e4m3_value(x[l]), e4m3_value(w[l])));
        result = __fadd_rn(
            result, __fmul_rn(__fmul_rn(acc, p.x_scales[g * p.m + i]), p.w_scales[(j / 128) * p.w_scale_stride + g]));
      }
    }
    static_cast<T*>(p.out)[e] = from_f32<T>(result);
  }
}

}  // namespace

bool launch_quantize_rows_fp8(const QuantizeRowsFp8Params& p, DType act, cudaStream_t stream) {
  // Act dtypes are 2 bytes: 8 elements per 16-byte vector, 8 codes per 8-byte store.
  const int64_t nvec = p.k / 8;
  const bool vectors = p.k % 8 == 0 && (p.m <= 1 || p.x_stride % 8 == 0) &&
                       (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.codes) & 7) == 0;
  const bool vec = vectors && nvec <= 4 * 1024;  // a row in one block's registers
  if (p.input != Fp8Input::kRows && !(p.grouped ? vectors : vec)) return false;
  if (p.m == 0) return true;
  FG_CHECK(p.m <= 0x7fffffff, "quantize_rows_fp8: too many rows");
  dispatch_act(act, [&]<class T>() {
    static_assert(sizeof(T) == 2);
    // The kernels of one input kind (kIn, a compile-time Fp8Input).
    auto run = [&]<Fp8Input kIn>() {
      if (p.grouped) {
        const int64_t items = p.m * ((p.k + 127) / 128);
        if (vectors)
          launch_kernel(quantize_groups_fp8_vec_kernel<T, kIn>, grid_for((items + 1) / 2 * 32, kQuantThreads),
                        kQuantThreads, 0, stream, p);
        else
          launch_kernel(quantize_groups_fp8_kernel<T>, grid_for(items * 32, kQuantThreads), kQuantThreads, 0, stream,
                        p);
        return;
      }
      if (!vec) {
        launch_kernel(quantize_rows_fp8_kernel<T>, unsigned(p.m), kQuantThreads, 0, stream, p);
        return;
      }
      const int vecs = nvec <= 1024 ? 1 : nvec <= 2048 ? 2 : 4;
      const unsigned threads = unsigned(std::max<int64_t>(32, ((nvec + vecs - 1) / vecs + 31) / 32 * 32));
      if (vecs == 1)
        launch_kernel(quantize_rows_fp8_vec_kernel<T, 1, kIn>, unsigned(p.m), threads, 0, stream, p);
      else if (vecs == 2)
        launch_kernel(quantize_rows_fp8_vec_kernel<T, 2, kIn>, unsigned(p.m), threads, 0, stream, p);
      else
        launch_kernel(quantize_rows_fp8_vec_kernel<T, 4, kIn>, unsigned(p.m), threads, 0, stream, p);
    };
    switch (p.input) {
      case Fp8Input::kRows: run.template operator()<Fp8Input::kRows>(); break;
      case Fp8Input::kSiluMul: run.template operator()<Fp8Input::kSiluMul>(); break;
      case Fp8Input::kGeluTanhMul: run.template operator()<Fp8Input::kGeluTanhMul>(); break;
    }
  });
  return true;
}

void launch_gemm_fp8_fallback(const GemmFp8Params& p, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  dispatch_act(
      out, [&]<class T>() { launch_kernel(gemm_fp8_fallback_kernel<T>, grid_for(p.m * p.n, 256), 256, 0, stream, p); });
}

}  // namespace fg::cuda
