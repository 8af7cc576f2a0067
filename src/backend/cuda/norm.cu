// RMSNorm and the fused residual-add + RMSNorm. One warp per row for rows up to 1024 wide
// (per-head q/k norms, small models), one block per row beyond. f32 math; the fused form rounds
// the updated residual to the act dtype before normalizing it, as the model's residual stream is
// stored in that dtype.
//
// In-place use (out aliasing x or delta) is safe: each thread reads and writes the same columns,
// and every read of a column happens before that thread's write to it.
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kWarpRowsPerBlock = 4;
constexpr int kBlockThreads = 512;
constexpr int64_t kWarpRowMaxCols = 1024;

// Pass 1 of one row: the sum of squares over the columns c = lane0, lane0 + step, ...
template <class T, bool kFused>
__device__ __forceinline__ float row_sum_squares(const RmsNormParams& p, int64_t r, int lane0, int step) {
  float acc = 0.0f;
  if constexpr (kFused) {
    T* res = row_ptr<T>(p.residual, r);
    const T* delta = row_ptr<const T>(p.delta, r);
    for (int64_t c = lane0; c < p.out.cols; c += step) {
      T updated = from_f32<T>(to_f32(res[c]) + to_f32(delta[c]));
      res[c] = updated;
      float v = to_f32(updated);
      acc += v * v;
    }
  } else {
    const T* x = row_ptr<const T>(p.x, r);
    for (int64_t c = lane0; c < p.out.cols; c += step) {
      float v = to_f32(x[c]);
      acc += v * v;
    }
  }
  return acc;
}

template <class T, bool kFused>
__device__ __forceinline__ void row_scale(const RmsNormParams& p, int64_t r, float inv_rms, int lane0, int step) {
  const T* src = kFused ? row_ptr<const T>(p.residual, r) : row_ptr<const T>(p.x, r);
  const T* w = static_cast<const T*>(p.weight);
  T* out = row_ptr<T>(p.out, r);
  for (int64_t c = lane0; c < p.out.cols; c += step) out[c] = from_f32<T>(to_f32(src[c]) * inv_rms * to_f32(w[c]));
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
