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
#include <algorithm>

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

// One block per row (grid-stride), kVec-element vectors, kChunks vectors per thread held in
// registers from the sum of squares to the scaling.
template <class T, bool kFused, int kChunks>
__global__ void rms_norm_vec_kernel(RmsNormParams p) {
  pdl_enter();
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float scratch[32];
  const int64_t nvec = p.out.cols / kVec;
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
        const uint4 wv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.weight) + vi * kVec);
        const T* ws = reinterpret_cast<const T*>(&wv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) w[e] = to_f32(ws[e]);
      }
      uint4 ov;
      T* os = reinterpret_cast<T*>(&ov);
#pragma unroll
      for (int e = 0; e < kVec; ++e) os[e] = from_f32<T>(v[k][e] * inv_rms * w[e]);
      *reinterpret_cast<uint4*>(row_ptr<T>(p.out, r) + vi * kVec) = ov;
    }
  }
}

// Whether every row of v starts on a 16-byte boundary (elements of `bytes` bytes).
bool rows_aligned16(const RowView& v, size_t bytes) {
  const size_t per = 16 / bytes;
  return (reinterpret_cast<uintptr_t>(v.data) & 15) == 0 && v.stride_outer % int64_t(per) == 0 &&
         (v.inner <= 1 || v.stride_inner % int64_t(per) == 0);
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
        // Threads: the vectors of a row in one pass when they fit one block, else 1, 2 or 4 each.
        const int chunks = nvec <= kBlockThreads ? 1 : nvec <= 2 * kBlockThreads ? 2 : 4;
        const int threads = int(std::min<int64_t>(kBlockThreads, ((nvec + chunks - 1) / chunks + 31) / 32 * 32));
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

}  // namespace fg::cuda
