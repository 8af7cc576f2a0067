// Elementwise kernels of the CUDA backend: dtype conversion, seeded uniform fill, SiLU- and
// GELU(tanh)-and-mul, scale and soft-cap in place, bias add. Memory-bound and simple; one thread per element with a
// grid-stride loop.
#include "backend/cuda/kernel_util.cuh"
#include "backend/sampling_rule.h"

namespace fg::cuda {

namespace {

constexpr int kThreads = 256;

template <class S, class D>
__global__ void convert_kernel(ConvertParams p) {
  int64_t total = p.src.rows * p.src.cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.src.cols;
    int64_t c = e - r * p.src.cols;
    row_ptr<D>(p.dst, r)[c] = from_f32<D>(to_f32(row_ptr<const S>(p.src, r)[c]));
  }
}

template <class T>
__global__ void fill_uniform_kernel(FillUniformParams p) {
  int64_t total = p.t.rows * p.t.cols;
  // The CPU backend's arithmetic: range = f32(hi - lo), then f32(range * u + lo) computed in
  // double (the product of two f32 values is exact in double), so both give identical bits.
  double range = double(__fsub_rn(p.hi, p.lo));
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.t.cols;
    int64_t c = e - r * p.t.cols;
    float v = __double2float_rn(__dadd_rn(__dmul_rn(range, double(sample_uniform(p.seed, uint64_t(e)))), double(p.lo)));
    row_ptr<T>(p.t, r)[c] = from_f32<T>(v);
  }
}

template <class T>
__global__ void silu_mul_kernel(SiluMulParams p) {
  int64_t total = p.n * p.inter;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.inter;
    int64_t c = e - r * p.inter;
    const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
    float g = to_f32(x[c]);
    float u = to_f32(x[p.inter + c]);
    float a;
    if (p.gelu_tanh) {
      constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
      constexpr float kKappa = 0.044715f;
      a = 0.5f * g * (1.0f + tanhf(kBeta * (g + kKappa * g * g * g)));
    } else {
      a = g / (1.0f + expf(-g));
    }
    static_cast<T*>(p.out)[r * p.out_stride + c] = from_f32<T>(a * u);
  }
}

template <class T>
__global__ void scale_kernel(ScaleParams p) {
  int64_t total = p.x.rows * p.x.cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.x.cols;
    int64_t c = e - r * p.x.cols;
    T* x = row_ptr<T>(p.x, r) + c;
    const float v = to_f32(*x);
    *x = from_f32<T>(p.cap > 0.0f ? tanhf(v / p.cap) * p.cap : v * p.scale);
  }
}

template <class O, class B>
__global__ void add_bias_kernel(AddBiasParams p) {
  int64_t total = p.m * p.n;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.n;
    int64_t c = e - r * p.n;
    O* o = static_cast<O*>(p.out) + r * p.out_stride + c;
    *o = from_f32<O>(to_f32(*o) + to_f32(static_cast<const B*>(p.bias)[c]));
  }
}

}  // namespace

void launch_convert(const ConvertParams& p, DType src, DType dst, cudaStream_t stream) {
  int64_t total = p.src.rows * p.src.cols;
  if (total == 0) return;
  dispatch_float(src, [&]<class S>() {
    dispatch_float(dst, [&]<class D>() {
      convert_kernel<S, D><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_fill_uniform(const FillUniformParams& p, DType dtype, cudaStream_t stream) {
  int64_t total = p.t.rows * p.t.cols;
  if (total == 0) return;
  dispatch_float(dtype, [&]<class T>() {
    fill_uniform_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_silu_mul(const SiluMulParams& p, DType act, cudaStream_t stream) {
  int64_t total = p.n * p.inter;
  if (total == 0) return;
  dispatch_act(act, [&]<class T>() {
    silu_mul_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_scale(const ScaleParams& p, DType dtype, cudaStream_t stream) {
  int64_t total = p.x.rows * p.x.cols;
  if (total == 0) return;
  dispatch_float(dtype, [&]<class T>() {
    scale_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_add_bias(const AddBiasParams& p, DType out, DType bias, cudaStream_t stream) {
  int64_t total = p.m * p.n;
  if (total == 0) return;
  dispatch_float(out, [&]<class O>() {
    dispatch_act(bias, [&]<class B>() {
      add_bias_kernel<O, B><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace fg::cuda
