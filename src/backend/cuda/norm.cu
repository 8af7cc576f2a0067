// RMSNorm and the fused residual-add + RMSNorm. One warp per row for rows up to 1024 wide
// (per-head q/k norms, small models), one block per row beyond: rows whose layout allows 16-byte
// vectors (hidden sizes: a multiple of 8 columns, aligned rows) keep their values in registers
// between the two passes (one read of each input, one write of each output), others take the
// general two-pass kernel. f32 math; the fused form rounds
// the updated residual to the act dtype before normalizing it, as the model's residual stream is
// stored in that dtype.
//
// The weight is in the act dtype, or in f32 (p.weight_f32: Gemma's 1 + w, which the act dtype
// would round).
//
// In-place use (out aliasing x or delta) is safe: each thread reads and writes the same columns,
// and every read of a column happens before that thread's write to it (a chunk's loads all come
// before its stores).
#include <cuda_fp8.h>

#include <algorithm>
#include <utility>

#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kWarpRowsPerBlock = 4;
constexpr int kBlockThreads = 512;
constexpr int64_t kWarpRowMaxCols = 1024;

// Columns are visited in chunks of kUnroll per thread: every load of a chunk is issued before any
// store of it, so the loads overlap instead of waiting on each other behind the residual's stores
// (a row of 4096 at batch 1 is pure latency otherwise).
constexpr int kUnroll = 8;

template <class T>
__device__ __forceinline__ float weight_at(const RmsNormParams& p, int64_t c) {
  return p.weight_f32 ? static_cast<const float*>(p.weight)[c] : to_f32(static_cast<const T*>(p.weight)[c]);
}

// Pass 1 of one row: the sum of squares over the columns c = lane0, lane0 + step, ...
template <class T, bool kFused>
__device__ __forceinline__ float row_sum_squares(const RmsNormParams& p, int64_t r, int lane0, int step) {
  float acc = 0.0f;
  const int64_t cols = p.out.cols;
  if constexpr (kFused) {
    T* res = row_ptr<T>(p.residual, r);
    const T* delta = row_ptr<const T>(p.delta, r);
    for (int64_t c0 = lane0; c0 < cols; c0 += int64_t(step) * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + int64_t(u) * step;
        v[u] = c < cols ? to_f32(res[c]) + to_f32(delta[c]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + int64_t(u) * step;
        if (c < cols) {
          T updated = from_f32<T>(v[u]);
          res[c] = updated;
          float f = to_f32(updated);
          acc += f * f;
        }
      }
    }
  } else {
    const T* x = row_ptr<const T>(p.x, r);
    for (int64_t c0 = lane0; c0 < cols; c0 += int64_t(step) * kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + int64_t(u) * step;
        float f = c < cols ? to_f32(x[c]) : 0.0f;
        acc += f * f;
      }
    }
  }
  return acc;
}

template <class T, bool kFused>
__device__ __forceinline__ void row_scale(const RmsNormParams& p, int64_t r, float inv_rms, int lane0, int step) {
  const T* src = kFused ? row_ptr<const T>(p.residual, r) : row_ptr<const T>(p.x, r);
  T* out = row_ptr<T>(p.out, r);
  const int64_t cols = p.out.cols;
  for (int64_t c0 = lane0; c0 < cols; c0 += int64_t(step) * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + int64_t(u) * step;
      v[u] = c < cols ? to_f32(src[c]) * inv_rms * weight_at<T>(p, c) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + int64_t(u) * step;
      if (c < cols) out[c] = from_f32<T>(v[u]);
    }
  }
}

template <class T, bool kFused>
__global__ void rms_norm_warp_kernel(RmsNormParams p) {
  pdl_enter();
  int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (r >= p.out.rows) return;  // whole warps exit together
  int lane = threadIdx.x & 31;
  float ss = warp_sum(row_sum_squares<T, kFused>(p, r, lane, 32));
  float inv_rms = rsqrtf(ss / float(p.out.cols) + p.eps);
  row_scale<T, kFused>(p, r, inv_rms, lane, 32);
}

template <class T, bool kFused>
__global__ void rms_norm_block_kernel(RmsNormParams p) {
  pdl_enter();
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < p.out.rows; r += gridDim.x) {
    float ss = block_sum(row_sum_squares<T, kFused>(p, r, threadIdx.x, blockDim.x), scratch);
    float inv_rms = rsqrtf(ss / float(p.out.cols) + p.eps);
    row_scale<T, kFused>(p, r, inv_rms, threadIdx.x, blockDim.x);
  }
}

// Quantizes row r's values (v[k][e]: vector threadIdx.x + k * blockDim.x, those past nvec zero)
// into p.codes / p.scales as quantize_rows_fp8 does: per row (kFp8 1, a block-wide maximum) or per
// 128 columns (kFp8 2: 16 vectors of 8, held by 16 consecutive lanes). Same maximum, same f32
// divisions and e4m3 rounding: the same codes and scales.
template <int kChunks, int kVec, int kFp8>
__device__ __forceinline__ void fp8_row_out(const RmsNormParams& p, int64_t r, int64_t nvec, float (&v)[kChunks][kVec],
                                            float* scratch) {
  static_assert(kVec == 8, "16-byte vectors of a 2-byte act dtype");
  constexpr float kE4m3Max = 448.0f;
  float row_scale = 1.0f;
  if constexpr (kFp8 == 1) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const bool in = threadIdx.x + int64_t(k) * blockDim.x < nvec;
#pragma unroll
      for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, in ? fabsf(v[k][e]) : 0.0f);
    }
    amax = block_max(amax, scratch);
    row_scale = __fdiv_rn(amax, kE4m3Max);
    if (!(row_scale > 0.0f)) row_scale = 1.0f;
    if (threadIdx.x == 0) p.scales[r] = row_scale;
  }
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int64_t vi = threadIdx.x + int64_t(k) * blockDim.x;
    float s = row_scale;
    if constexpr (kFp8 == 2) {  // every lane takes part in its half-warp's maximum
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, vi < nvec ? fabsf(v[k][e]) : 0.0f);
      for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      s = __fdiv_rn(amax, kE4m3Max);
      if (!(s > 0.0f)) s = 1.0f;
      if (vi < nvec && vi % 16 == 0) p.scales[(vi / 16) * p.out.rows + r] = s;
    }
    if (vi >= nvec) continue;
    uint8_t b[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      b[e] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(v[k][e], s), __NV_SATFINITE, __NV_E4M3));
    *reinterpret_cast<uint2*>(p.codes + r * p.out.cols + vi * kVec) =
        make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24,
                   uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24);
  }
}

// One block per row (grid-stride), kVec-element vectors, kChunks vectors per thread held in
// registers from the sum of squares to the scaling. kFp8: the output as e4m3 codes and scales
// instead (1: a scale per row; 2: per row and 128 columns, the 16 consecutive vectors of a
// half-warp), from the act-dtype values the plain kernel would store.
template <class T, bool kFused, int kChunks, int kFp8 = 0>
__global__ void rms_norm_vec_kernel(RmsNormParams p) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float scratch[32];
  const int64_t nvec = p.out.cols / kVec;
  // This thread's act-dtype weights, the same for every row: loaded before waiting for the kernel
  // that writes the rows (weights are never written by a step's kernels; launch.cuh), so their
  // latency hides behind that kernel's end instead of following the row's sum of squares.
  uint4 wpre[kChunks] = {};
  if (!p.weight_f32) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t vi = threadIdx.x + int64_t(k) * blockDim.x;
      if (vi < nvec) wpre[k] = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.weight) + vi * kVec);
    }
  }
  pdl_enter();
  for (int64_t r = blockIdx.x; r < p.out.rows; r += gridDim.x) {
    float v[kChunks][kVec];
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t vi = threadIdx.x + int64_t(k) * blockDim.x;
      if (vi >= nvec) continue;
      if constexpr (kFused) {
        T* res = row_ptr<T>(p.residual, r) + vi * kVec;
        const uint4 rv = *reinterpret_cast<const uint4*>(res);
        const uint4 dv = *reinterpret_cast<const uint4*>(row_ptr<const T>(p.delta, r) + vi * kVec);
        const T* rs = reinterpret_cast<const T*>(&rv);
        const T* ds = reinterpret_cast<const T*>(&dv);
        uint4 uv;
        T* us = reinterpret_cast<T*>(&uv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          us[e] = from_f32<T>(to_f32(rs[e]) + to_f32(ds[e]));  // the residual stream's own rounding
          v[k][e] = to_f32(us[e]);
          acc += v[k][e] * v[k][e];
        }
        *reinterpret_cast<uint4*>(res) = uv;
      } else {
        const uint4 xv = *reinterpret_cast<const uint4*>(row_ptr<const T>(p.x, r) + vi * kVec);
        const T* xs = reinterpret_cast<const T*>(&xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          v[k][e] = to_f32(xs[e]);
          acc += v[k][e] * v[k][e];
        }
      }
    }
    const float inv_rms = rsqrtf(block_sum(acc, scratch) / float(p.out.cols) + p.eps);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t vi = threadIdx.x + int64_t(k) * blockDim.x;
      if (vi >= nvec) continue;
      float w[kVec];
      if (p.weight_f32) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) w[e] = static_cast<const float*>(p.weight)[vi * kVec + e];
      } else {
        const T* ws = reinterpret_cast<const T*>(&wpre[k]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) w[e] = to_f32(ws[e]);
      }
      uint4 ov;
      T* os = reinterpret_cast<T*>(&ov);
#pragma unroll
      for (int e = 0; e < kVec; ++e) os[e] = from_f32<T>(v[k][e] * inv_rms * w[e]);
      if constexpr (kFp8 == 0) {
        *reinterpret_cast<uint4*>(row_ptr<T>(p.out, r) + vi * kVec) = ov;
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[k][e] = to_f32(os[e]);
      }
    }
    if constexpr (kFp8 != 0) fp8_row_out<kChunks, kVec, kFp8>(p, r, nvec, v, scratch);
  }
}

// Whether every row of v starts on a 16-byte boundary (elements of `bytes` bytes).
bool rows_aligned16(const RowView& v, size_t bytes) {
  const size_t per = 16 / bytes;
  return (reinterpret_cast<uintptr_t>(v.data) & 15) == 0 && v.stride_outer % int64_t(per) == 0 &&
         (v.inner <= 1 || v.stride_inner % int64_t(per) == 0);
}

// The vector kernel's vectors per thread (1, 2 or 4: the vectors of a row in one pass when they
// fit one block) and threads, for rows of nvec vectors (nvec <= 4 * kBlockThreads).
std::pair<int, int> vec_shape(int64_t nvec) {
  const int chunks = nvec <= kBlockThreads ? 1 : nvec <= 2 * kBlockThreads ? 2 : 4;
  return {chunks, int(std::min<int64_t>(kBlockThreads, ((nvec + chunks - 1) / chunks + 31) / 32 * 32))};
}

}  // namespace

void launch_rms_norm(const RmsNormParams& p, DType act, cudaStream_t stream) {
  if (p.out.rows == 0) return;
  dispatch_act(act, [&]<class T>() {
    auto launch = [&]<bool kFused>() {
      constexpr int kVec = 16 / sizeof(T);
      const int64_t nvec = p.out.cols / kVec;
      const bool vec = p.out.cols % kVec == 0 && rows_aligned16(p.out, sizeof(T)) &&
                       (reinterpret_cast<uintptr_t>(p.weight) & 15) == 0 &&
                       (kFused ? rows_aligned16(p.residual, sizeof(T)) && rows_aligned16(p.delta, sizeof(T))
                               : rows_aligned16(p.x, sizeof(T)));
      const unsigned blocks = unsigned(p.out.rows < 65535 * 16 ? p.out.rows : 65535 * 16);
      if (p.out.cols <= kWarpRowMaxCols) {
        unsigned warp_blocks = unsigned((p.out.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
        launch_kernel(rms_norm_warp_kernel<T, kFused>, warp_blocks, 32 * kWarpRowsPerBlock, 0, stream, p);
      } else if (vec && nvec <= 4 * kBlockThreads) {
        const auto [chunks, threads] = vec_shape(nvec);
        if (chunks == 1)
          launch_kernel(rms_norm_vec_kernel<T, kFused, 1>, blocks, threads, 0, stream, p);
        else if (chunks == 2)
          launch_kernel(rms_norm_vec_kernel<T, kFused, 2>, blocks, threads, 0, stream, p);
        else
          launch_kernel(rms_norm_vec_kernel<T, kFused, 4>, blocks, threads, 0, stream, p);
      } else {
        launch_kernel(rms_norm_block_kernel<T, kFused>, blocks, kBlockThreads, 0, stream, p);
      }
    };
    if (p.fused_add) {
      launch.template operator()<true>();
    } else {
      launch.template operator()<false>();
    }
  });
}

bool launch_add_rms_norm_fp8(const RmsNormParams& p, DType act, cudaStream_t stream) {
  if (p.out.rows == 0) return true;
  bool launched = false;
  dispatch_act(act, [&]<class T>() {
    if constexpr (sizeof(T) == 2) {
      constexpr int kVec = 8;
      const int64_t nvec = p.out.cols / kVec;
      const bool vec = p.fused_add && p.out.cols % kVec == 0 && p.out.cols > kWarpRowMaxCols &&
                       nvec <= 4 * kBlockThreads && (reinterpret_cast<uintptr_t>(p.weight) & 15) == 0 &&
                       rows_aligned16(p.residual, sizeof(T)) && rows_aligned16(p.delta, sizeof(T)) &&
                       (reinterpret_cast<uintptr_t>(p.codes) & 7) == 0;
      if (!vec) return;
      const unsigned blocks = unsigned(p.out.rows < 65535 * 16 ? p.out.rows : 65535 * 16);
      const auto [chunks, threads] = vec_shape(nvec);
      auto go = [&]<int kFp8>() {
        if (chunks == 1)
          launch_kernel(rms_norm_vec_kernel<T, true, 1, kFp8>, blocks, threads, 0, stream, p);
        else if (chunks == 2)
          launch_kernel(rms_norm_vec_kernel<T, true, 2, kFp8>, blocks, threads, 0, stream, p);
        else
          launch_kernel(rms_norm_vec_kernel<T, true, 4, kFp8>, blocks, threads, 0, stream, p);
      };
      if (p.grouped)
        go.template operator()<2>();
      else
        go.template operator()<1>();
      launched = true;
    }
  });
  return launched;
}

}  // namespace fg::cuda
