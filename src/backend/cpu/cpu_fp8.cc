// The CPU reference of the FP8 ops (backend.h): per-token e4m3 quantization and the FP8 GEMM, in
// plain f32 arithmetic that every GPU implementation is tested against. Each product of two e4m3
// values is exact in f32 (4 significant bits each); the sum runs in k order.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

void CpuBackend::quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales) {
  cpu::check_view("quantize_rows_fp8", "x", x, DType::kF32, 2);
  cpu::check_view("quantize_rows_fp8", "codes", codes, DType::kF8E4M3, 2);
  cpu::check_view("quantize_rows_fp8", "scales", scales, DType::kF32, 1);
  const int64_t m = x.shape[0], k = x.shape[1];
  cpu::check_dim("quantize_rows_fp8", "codes", codes, 0, m);
  cpu::check_dim("quantize_rows_fp8", "codes", codes, 1, k);
  cpu::check_dim("quantize_rows_fp8", "scales", scales, 0, m);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = cpu::row<const float>(x, i);
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::fmax(amax, std::fabs(row[j]));
    float s = amax / 448.0f;
    if (!(s > 0.0f)) s = 1.0f;
    uint8_t* out = cpu::row<uint8_t>(codes, i);
    for (int64_t j = 0; j < k; ++j) out[j] = f32_to_f8e4m3(row[j] / s);
    *cpu::row<float>(scales, i) = s;
  }
}

void CpuBackend::gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                          Tensor& out) {
  cpu::check_view("gemm_fp8", "x", x, DType::kF8E4M3, 2);
  cpu::check_view("gemm_fp8", "w", w, DType::kF8E4M3, 2);
  cpu::check_view("gemm_fp8", "x_scales", x_scales, DType::kF32, 1);
  cpu::check_view("gemm_fp8", "w_scales", w_scales, DType::kF32, 1);
  cpu::check_view("gemm_fp8", "out", out, DType::kF32, 2);
  const int64_t m = x.shape[0], n = w.shape[0], k = x.shape[1];
  cpu::check_dim("gemm_fp8", "w", w, 1, k);
  cpu::check_dim("gemm_fp8", "x_scales", x_scales, 0, m);
  cpu::check_dim("gemm_fp8", "w_scales", w_scales, 0, n);
  cpu::check_dim("gemm_fp8", "out", out, 0, m);
  cpu::check_dim("gemm_fp8", "out", out, 1, n);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* xr = cpu::row<const uint8_t>(x, i);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wr = cpu::row<const uint8_t>(w, j);
      float acc = 0.0f;
      for (int64_t l = 0; l < k; ++l) acc += f8e4m3_to_f32(xr[l]) * f8e4m3_to_f32(wr[l]);
      cpu::row<float>(out, i)[j] = acc * *cpu::row<const float>(x_scales, i) * *cpu::row<const float>(w_scales, j);
    }
  }
}

}  // namespace fg
