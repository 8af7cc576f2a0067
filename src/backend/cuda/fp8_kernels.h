// Launchers of the CUDA backend's FP8 (e4m3) kernels (fp8.cu): per-token activation quantization
// and the plain FP8 GEMM behind cuBLASLt's. Host-callable; in a header of their own so that the
// other kernels do not recompile when these change.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace fg::cuda {

// What an FP8 quantization reads: the rows of x, or a gated activation of x = [gate | up] (rows
// of 2k, the gate in columns [0, k)): SiLU(gate) * up or GELU-tanh(gate) * up, each product
// rounded to the act dtype as silu_mul / gelu_tanh_mul round it (Backend::act_mul_fp8).
enum class Fp8Input { kRows, kSiluMul, kGeluTanhMul };

// FP8 quantization (Backend::quantize_rows_fp8). x: [m, k] act (row stride x_stride), or [m, 2k]
// for a gated input; codes: [m, k] e4m3 contiguous; scales: [m] f32 per token, or (grouped)
// [ceil(k / 128), m] f32 per token and group of 128 columns, group-major.
struct QuantizeRowsFp8Params {
  const void* x = nullptr;
  int64_t x_stride = 0;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int64_t m = 0;
  int64_t k = 0;
  bool grouped = false;
  Fp8Input input = Fp8Input::kRows;
};
// False (nothing launched) only for a gated input whose rows are not 16-byte vectors or, per
// token, wider than 32,768: the caller runs the activation and then the quantization.
bool launch_quantize_rows_fp8(const QuantizeRowsFp8Params& p, DType act, cudaStream_t stream);

// The FP8 GEMM (Backend::gemm_fp8) for shapes cuBLASLt declines, one thread per output:
// out[i, j] = (sum_l x[i, l] * w[j, l]) * x_scales[i] * w_scales[j], f32 accumulation, or with
// 128-block scales (w_scale_stride > 0) the sum over 128-column groups g of the group's sum *
// x_scales[g * m + i] * w_scales[(j / 128) * w_scale_stride + g].
// x: [m, k] e4m3, w: [n, k] e4m3, contiguous; x_scales: [m] or [ceil(k / 128), m] f32; w_scales:
// [n] or [ceil(n / 128), w_scale_stride] f32; out: [m, n] act.
struct GemmFp8Params {
  const uint8_t* x = nullptr;
  const float* x_scales = nullptr;
  const uint8_t* w = nullptr;
  const float* w_scales = nullptr;
  void* out = nullptr;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t w_scale_stride = 0;  // 0: per-channel scales; else 128-block scales with this row stride
};
void launch_gemm_fp8_fallback(const GemmFp8Params& p, DType out, cudaStream_t stream);

}  // namespace fg::cuda
