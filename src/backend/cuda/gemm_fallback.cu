// A plain shared-memory tiled GEMM (out = x @ w^T + bias, f32 accumulation) for the rare shapes
// whose strides or alignment cuBLASLt declines. Correct for any m, n, k and stride; not fast, and
// never chosen when cuBLASLt offers an algorithm.
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kTile = 16;

template <class I, class O>
__global__ void gemm_fallback_kernel(GemmFallbackParams p) {
  pdl_enter();
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  int row = blockIdx.y * kTile + threadIdx.y;  // of out (m)
  int col = blockIdx.x * kTile + threadIdx.x;  // of out (n)
  int w_row = blockIdx.x * kTile + threadIdx.y;
  const I* x = static_cast<const I*>(p.x);
  const I* w = static_cast<const I*>(p.w);
  float acc = 0.0f;
  for (int k0 = 0; k0 < p.k; k0 += kTile) {
    int kk = k0 + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] = (row < p.m && kk < p.k) ? to_f32(x[int64_t(row) * p.ldx + kk]) : 0.0f;
    ws[threadIdx.y][threadIdx.x] = (w_row < p.n && kk < p.k) ? to_f32(w[int64_t(w_row) * p.ldw + kk]) : 0.0f;
    __syncthreads();
    for (int t = 0; t < kTile; ++t) acc += xs[threadIdx.y][t] * ws[threadIdx.x][t];
    __syncthreads();
  }
  if (row < p.m && col < p.n) {
    if (p.bias != nullptr) acc += to_f32(static_cast<const I*>(p.bias)[col]);
    static_cast<O*>(p.out)[int64_t(row) * p.ldo + col] = from_f32<O>(acc);
  }
}

}  // namespace

void launch_gemm_fallback(const GemmFallbackParams& p, DType in, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  dim3 grid(unsigned((p.n + kTile - 1) / kTile), unsigned((p.m + kTile - 1) / kTile));
  FG_CHECK(grid.y <= 65535u, "gemm fallback: m too large");
  dispatch_act(in, [&]<class I>() {
    dispatch_float(
        out, [&]<class O>() { launch_kernel(gemm_fallback_kernel<I, O>, grid, dim3(kTile, kTile), 0, stream, p); });
  });
}

}  // namespace fg::cuda
