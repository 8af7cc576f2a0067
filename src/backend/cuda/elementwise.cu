// Elementwise kernels of the CUDA backend: dtype conversion, seeded uniform fill, SiLU- and
// GELU(tanh)-and-mul, scale and soft-cap in place, bias add. Memory-bound and simple: one thread
// per element with a grid-stride loop, except the gated activation (every MLP of every step),
// which moves 16-byte vectors along 2D-indexed rows when the row layout allows (no per-element
// index division).
#include <algorithm>

#include "backend/cuda/kernel_util.cuh"
#include "backend/sampling_rule.h"

namespace fg::cuda {

namespace {

constexpr int kThreads = 256;

template <class S, class D>
__global__ void convert_kernel(ConvertParams p) {
  pdl_enter();
  int64_t total = p.src.rows * p.src.cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / p.src.cols;
    int64_t c = e - r * p.src.cols;
    row_ptr<D>(p.dst, r)[c] = from_f32<D>(to_f32(row_ptr<const S>(p.src, r)[c]));
  }
}

template <class T>
__global__ void fill_uniform_kernel(FillUniformParams p) {
  pdl_enter();
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

// Rows along blockIdx.y (grid-stride), columns along x in vectors of kVec elements (kVec = 1: any
// layout; kVec = 16 / sizeof(T): inter, both strides and both bases aligned to 16 bytes).
template <class T, int kVec, bool kGelu>
__global__ void silu_mul_kernel(SiluMulParams p) {
  pdl_enter();
  for (int64_t r = blockIdx.y; r < p.n; r += gridDim.y) {
    const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
    T* out = static_cast<T*>(p.out) + r * p.out_stride;
    for (int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; c < p.inter;
         c += int64_t(gridDim.x) * blockDim.x * kVec) {
      if constexpr (kVec == 1) {
        out[c] = act_mul_one<T, kGelu>(x[c], x[p.inter + c]);
      } else {
        *reinterpret_cast<uint4*>(out + c) = act_mul_vec<T, kGelu>(*reinterpret_cast<const uint4*>(x + c),
                                                                   *reinterpret_cast<const uint4*>(x + p.inter + c));
      }
    }
  }
}

template <class T>
__global__ void scale_kernel(ScaleParams p) {
  pdl_enter();
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
  pdl_enter();
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
      launch_kernel(convert_kernel<S, D>, grid_for(total, kThreads), kThreads, 0, stream, p);
    });
  });
}

void launch_fill_uniform(const FillUniformParams& p, DType dtype, cudaStream_t stream) {
  int64_t total = p.t.rows * p.t.cols;
  if (total == 0) return;
  dispatch_float(dtype, [&]<class T>() {
    launch_kernel(fill_uniform_kernel<T>, grid_for(total, kThreads), kThreads, 0, stream, p);
  });
}

void launch_silu_mul(const SiluMulParams& p, DType act, cudaStream_t stream) {
  if (p.n * p.inter == 0) return;
  dispatch_act(act, [&]<class T>() {
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = p.inter % kVec == 0 && p.x_stride % kVec == 0 && p.out_stride % kVec == 0 &&
                     (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
    const int64_t per_block = int64_t(kThreads) * (vec ? kVec : 1);
    const dim3 grid(unsigned(std::min<int64_t>((p.inter + per_block - 1) / per_block, 1024)),
                    unsigned(std::min<int64_t>(p.n, 65535)));
    if (vec && p.gelu_tanh) {
      launch_kernel(silu_mul_kernel<T, kVec, true>, grid, kThreads, 0, stream, p);
    } else if (vec) {
      launch_kernel(silu_mul_kernel<T, kVec, false>, grid, kThreads, 0, stream, p);
    } else if (p.gelu_tanh) {
      launch_kernel(silu_mul_kernel<T, 1, true>, grid, kThreads, 0, stream, p);
    } else {
      launch_kernel(silu_mul_kernel<T, 1, false>, grid, kThreads, 0, stream, p);
    }
  });
}

void launch_scale(const ScaleParams& p, DType dtype, cudaStream_t stream) {
  int64_t total = p.x.rows * p.x.cols;
  if (total == 0) return;
  dispatch_float(dtype,
                 [&]<class T>() { launch_kernel(scale_kernel<T>, grid_for(total, kThreads), kThreads, 0, stream, p); });
}

void launch_add_bias(const AddBiasParams& p, DType out, DType bias, cudaStream_t stream) {
  int64_t total = p.m * p.n;
  if (total == 0) return;
  dispatch_float(out, [&]<class O>() {
    dispatch_act(bias, [&]<class B>() {
      launch_kernel(add_bias_kernel<O, B>, grid_for(total, kThreads), kThreads, 0, stream, p);
    });
  });
}

}  // namespace fg::cuda
