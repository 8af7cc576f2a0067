// RMSNorm and the fused residual-add + RMSNorm. One warp per row for rows up to 1024 wide
// (per-head q/k norms, small models), one block per row beyond. f32 math; the fused form rounds
// the updated residual to the act dtype before normalizing it, as the model's residual stream is
// stored in that dtype.
//
// In-place use (out aliasing x or delta) is safe: each thread reads and writes the same columns,
// and every read of a column happens before that thread's write to it (a chunk's loads all come
// before its stores).
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
  const T* w = static_cast<const T*>(p.weight);
  T* out = row_ptr<T>(p.out, r);
  const int64_t cols = p.out.cols;
  for (int64_t c0 = lane0; c0 < cols; c0 += int64_t(step) * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + int64_t(u) * step;
      v[u] = c < cols ? to_f32(src[c]) * inv_rms * to_f32(w[c]) : 0.0f;
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
  int64_t r = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (r >= p.out.rows) return;  // whole warps exit together
  int lane = threadIdx.x & 31;
  float ss = warp_sum(row_sum_squares<T, kFused>(p, r, lane, 32));
  float inv_rms = rsqrtf(ss / float(p.out.cols) + p.eps);
  row_scale<T, kFused>(p, r, inv_rms, lane, 32);
}

template <class T, bool kFused>
__global__ void rms_norm_block_kernel(RmsNormParams p) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < p.out.rows; r += gridDim.x) {
    float ss = block_sum(row_sum_squares<T, kFused>(p, r, threadIdx.x, blockDim.x), scratch);
    float inv_rms = rsqrtf(ss / float(p.out.cols) + p.eps);
    row_scale<T, kFused>(p, r, inv_rms, threadIdx.x, blockDim.x);
  }
}

}  // namespace

void launch_rms_norm(const RmsNormParams& p, DType act, cudaStream_t stream) {
  if (p.out.rows == 0) return;
  dispatch_act(act, [&]<class T>() {
    auto launch = [&]<bool kFused>() {
      if (p.out.cols <= kWarpRowMaxCols) {
        unsigned blocks = unsigned((p.out.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
        rms_norm_warp_kernel<T, kFused><<<blocks, 32 * kWarpRowsPerBlock, 0, stream>>>(p);
      } else {
        unsigned blocks = unsigned(p.out.rows < 65535 * 16 ? p.out.rows : 65535 * 16);
        rms_norm_block_kernel<T, kFused><<<blocks, kBlockThreads, 0, stream>>>(p);
      }
      CUDA_CHECK_LAUNCH();
    };
    if (p.fused_add) {
      launch.template operator()<true>();
    } else {
      launch.template operator()<false>();
    }
  });
}

}  // namespace fg::cuda
