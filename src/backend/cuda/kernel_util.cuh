// Device-side helpers shared by the backend's kernels: shared-memory addresses and 16-byte async
// copies, dtype load/store through f32, row addressing of RowView, block reductions. Included by
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "core/status.h"

namespace fg::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
// 16-byte async copy global -> shared (sm_80 and newer); zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// cp_async16 with an L2 eviction policy (l2_evict_first_policy: lines streamed once, such as
// weights, go first, so they do not push out what the step reads again).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid, uint64_t policy) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n),
               "l"(policy));
}
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N of this thread's committed cp.async groups are still in flight; what the
// completed ones copied is then visible to this thread (read it with asm, as ld_shared16 does:
// volatile asm keeps its order).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint4 ld_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    return __bfloat162float(v);
  }
}

// Round to nearest even, as core/dtype.h does on the host.
template <class T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    return __float2bfloat16_rn(v);
  }
}

// An fp8 KV cache's code of x: e4m3(x * (1 / scale)), rounded to nearest even and saturating at
// +-448 (NaN stays NaN), exactly core/dtype.h's f32_to_f8e4m3(x / scale) for the power-of-two
// scales the caches use (1 / scale and the product are exact).
__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  return uint8_t(__nv_cvt_float_to_fp8(x * (1.0f / scale), __NV_SATFINITE, __NV_E4M3));
}

// A gated activation's element: act(gate) * up, act = SiLU or (kGelu) GELU(tanh), rounded to T
// (silu_mul's and the fused FP8 quantization's, so both give the same bits).
template <class T, bool kGelu>
__device__ __forceinline__ T act_mul_one(T gate, T up) {
  const float g = to_f32(gate);
  float a;
  if constexpr (kGelu) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    a = 0.5f * g * (1.0f + tanhf(kBeta * (g + kKappa * g * g * g)));
  } else {
    a = g / (1.0f + expf(-g));
  }
  return from_f32<T>(a * to_f32(up));
}

// act_mul_one on each of the 16 / sizeof(T) elements of a 16-byte vector of gates and of ups.
template <class T, bool kGelu>
__device__ __forceinline__ uint4 act_mul_vec(const uint4& gate, const uint4& up) {
  uint4 out;
  const T* g = reinterpret_cast<const T*>(&gate);
  const T* u = reinterpret_cast<const T*>(&up);
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int i = 0; i < int(16 / sizeof(T)); ++i) o[i] = act_mul_one<T, kGelu>(g[i], u[i]);
  return out;
}

// RoPE's cos and sin of token `token`'s pair i (< rotary_dim / 2): the angle in f32, its cos/sin
// computed in double and rounded once to f32 (positions reach tens of thousands of radians), as
// the CPU backend does, times attention_scaling. Shared by rope.cu and the decode GEMM's fused
// RoPE epilogue (gemv_kernel.cuh), so both give the same bits.
__device__ __forceinline__ void rope_cos_sin(const RopeParams& p, int64_t token, int i, float& c, float& s) {
  float inv_freq;
  if (p.per_token_base != nullptr) {
    inv_freq = 1.0f / powf(p.per_token_base[token], float(2 * i) / float(p.rotary_dim));
  } else {
    const int table = p.per_token_table != nullptr ? p.per_token_table[token] : 0;
    inv_freq = p.inv_freq[table * (p.rotary_dim / 2) + i];
  }
  const float angle = float(p.positions[token]) * inv_freq;
  double sd, cd;
  sincos(double(angle), &sd, &cd);
  c = float(cd) * p.attention_scaling;
  s = float(sd) * p.attention_scaling;
}

// One rotated pair: (x0 c - x1 s, x1 c + x0 s) in f32, each with one fused multiply-add spelled
// out (not left to the compiler's contraction, which could differ between two kernels).
__device__ __forceinline__ void rope_rotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  y1 = __fmaf_rn(x1, c, __fmul_rn(x0, s));
}

// Element offset of kv head `head`'s row at cache slot `slot` (page * page_size + offset) in a
// paged cache of KvWriteParams' layout (k_cache and v_cache alike).
__device__ __forceinline__ int64_t kv_cache_row(const KvWriteParams& p, int64_t slot, int64_t head) {
  const int64_t page = slot / p.page_size;
  return page * p.cache_stride_page + (slot - page * p.page_size) * p.cache_stride_slot + head * p.cache_stride_head;
}

// Channels c0 and c1 of a cache row (`row`: kv_cache_row's offset into `cache`) from act-dtype
// values: copied, or with `scales` ([num_kv_heads] f32: an fp8 cache) quantized as kv_write does.
template <class T>
__device__ __forceinline__ void kv_cache_store_pair(void* cache, int64_t row, const float* scales, int head, int c0,
                                                    int c1, T y0, T y1) {
  if (scales != nullptr) {
    uint8_t* c = static_cast<uint8_t*>(cache) + row;
    c[c0] = to_e4m3(to_f32(y0), scales[head]);
    c[c1] = to_e4m3(to_f32(y1), scales[head]);
  } else {
    T* c = static_cast<T*>(cache) + row;
    c[c0] = y0;
    c[c1] = y1;
  }
}

// Element offset of row r of a RowView.
__device__ __forceinline__ int64_t row_offset(const RowView& v, int64_t r) {
  return (r / v.inner) * v.stride_outer + (r % v.inner) * v.stride_inner;
}

template <class T>
__device__ __forceinline__ T* row_ptr(const RowView& v, int64_t r) {
  return static_cast<T*>(v.data) + row_offset(v, r);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats in shared memory; the call ends with a barrier so it can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int nwarps = blockDim.x >> 5;
  float t = lane < nwarps ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int nwarps = blockDim.x >> 5;
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

// Calls f.template operator()<T>() with T the device type of `dtype` (f32, f16 or bf16).
template <class F>
void dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); return;
    case DType::kF16: f.template operator()<__half>(); return;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); return;
    default: FG_CHECK(false, "CUDA backend: expected f32, f16 or bf16");
  }
}

// Act dtypes only (bf16, f16): instantiates half as many kernels as dispatch_float.
template <class F>
void dispatch_act(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF16: f.template operator()<__half>(); return;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); return;
    default: FG_CHECK(false, "CUDA backend: expected a bf16 or f16 activation");
  }
}

inline unsigned grid_for(int64_t work, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (work + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return unsigned(b);
}

}  // namespace fg::cuda
