// Launchers of the CUDA backend's FP8 (e4m3) kernels (fp8.cu): per-token activation quantization
// and the plain FP8 GEMM behind cuBLASLt's. Host-callable; in a header of their own so that the
// other kernels do not recompile when these change.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace fg::cuda {

// Per-token FP8 quantization (Backend::quantize_rows_fp8), one block per row. x: [m, k] act (row
// stride x_stride); codes: [m, k] e4m3 contiguous; scales: [m] f32.
struct QuantizeRowsFp8Params {
  const void* x = nullptr;
  int64_t x_stride = 0;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int64_t m = 0;
  int64_t k = 0;
};
void launch_quantize_rows_fp8(const QuantizeRowsFp8Params& p, DType act, cudaStream_t stream);

// The FP8 GEMM (Backend::gemm_fp8) for shapes cuBLASLt declines, one thread per output:
// out[i, j] = (sum_l x[i, l] * w[j, l]) * x_scales[i] * w_scales[j], f32 accumulation.
// x: [m, k] e4m3, w: [n, k] e4m3, contiguous; x_scales: [m] f32; w_scales: [n] f32; out: [m, n] act.
struct GemmFp8Params {
  const uint8_t* x = nullptr;
  const float* x_scales = nullptr;
  const uint8_t* w = nullptr;
  const float* w_scales = nullptr;
  void* out = nullptr;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};
void launch_gemm_fp8_fallback(const GemmFp8Params& p, DType out, cudaStream_t stream);

}  // namespace fg::cuda
