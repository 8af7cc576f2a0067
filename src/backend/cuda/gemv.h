// The dense GEMM for decode-sized products (gemv.cu): out[m, n] = x[m, k] @ w[n, k]^T (+ bias[n])
// for at most kGemvMaxRows rows of x and weights of at most kGemvMaxWeightBytes, x and w bf16 or
// f16 (one dtype), f32 accumulation, out in that dtype or f32. There the product is a stream of the
// weights; the kernel reads them with 16-byte loads one group of chunks ahead of its tensor-core
// products (mma.sync m16n8k16, the weights as the 16-row operand and the tokens as the 8-column
// one), and loads its first weights before it waits for the kernel that writes x (launch.cuh), so
// a decode step's smaller projections do not pay cuBLASLt's ramp per call. The limits are where it
// beat cuBLASLt on an H200 (docs/perf.md): larger weights stream faster through cuBLASLt, and at
// 16 rows the qkv projection did. Warps add their partial sums in a fixed order: a token's row is
// the same bits whatever m (up to kGemvMaxRows) it is computed in. Host-callable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace fg::cuda {

struct GemvParams {
  const void* x = nullptr;
  int64_t ldx = 0;  // row strides in elements
  const void* w = nullptr;
  int64_t ldw = 0;
  const void* bias = nullptr;  // [n] in x's dtype, or null
  void* out = nullptr;
  int64_t ldo = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

constexpr int64_t kGemvMaxRows = 8;
constexpr int64_t kGemvMaxWeightBytes = int64_t(64) << 20;

// Whether the kernel takes the problem: 1 <= m <= kGemvMaxRows, n * k * 2 <= kGemvMaxWeightBytes,
// k a multiple of 8, x and w rows on 16-byte boundaries.
bool gemv_fits(const GemvParams& p);

// On the current device: the kernel's tensor-core path is what it runs (sm_80 or newer code).
bool gemv_supported();

// in: bf16 or f16; out: in or f32. Needs gemv_fits(p) and gemv_supported().
void launch_gemv(const GemvParams& p, DType in, DType out, cudaStream_t stream);

}  // namespace fg::cuda
