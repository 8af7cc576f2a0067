// The CPU reference of the FP8 ops (backend.h): e4m3 quantization per token or per token and
// 128-column group, and the FP8 GEMM with per-channel or 128-block scales, in plain f32
// arithmetic that every GPU implementation is tested against. Each product of two e4m3 values is
// exact in f32 (4 significant bits each); a group's sum runs in k order, and the groups' scaled
// sums are added in k order.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

void CpuBackend::quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales) {
  cpu::check_view("quantize_rows_fp8", "x", x, DType::kF32, 2);
  cpu::check_view("quantize_rows_fp8", "codes", codes, DType::kF8E4M3, 2);
  const bool grouped = fp8_quantize_scaling(x, codes, scales) == Fp8Scaling::kBlock128;
  cpu::check_view("quantize_rows_fp8", "scales", scales, DType::kF32, grouped ? 2 : 1);
  const int64_t m = x.shape[0], k = x.shape[1];
  const int64_t group = grouped ? kFp8Block : k, groups = grouped ? (k + kFp8Block - 1) / kFp8Block : 1;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = cpu::row<const float>(x, i);
    uint8_t* out = cpu::row<uint8_t>(codes, i);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t j0 = g * group, j1 = std::min(k, j0 + group);
      float amax = 0.0f;
      for (int64_t j = j0; j < j1; ++j) amax = std::fmax(amax, std::fabs(row[j]));
      float s = amax / 448.0f;
      if (!(s > 0.0f)) s = 1.0f;
      for (int64_t j = j0; j < j1; ++j) out[j] = f32_to_f8e4m3(row[j] / s);
      if (grouped)
        cpu::row<float>(scales, g)[i] = s;
      else
        *cpu::row<float>(scales, i) = s;
    }
  }
}

void CpuBackend::gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                          Tensor& out) {
  cpu::check_view("gemm_fp8", "x", x, DType::kF8E4M3, 2);
  cpu::check_view("gemm_fp8", "w", w, DType::kF8E4M3, 2);
  const bool blocks = fp8_scaling(x, x_scales, w, w_scales) == Fp8Scaling::kBlock128;
  cpu::check_view("gemm_fp8", "x_scales", x_scales, DType::kF32, blocks ? 2 : 1);
  cpu::check_view("gemm_fp8", "w_scales", w_scales, DType::kF32, blocks ? 2 : 1);
  cpu::check_view("gemm_fp8", "out", out, DType::kF32, 2);
  const int64_t m = x.shape[0], n = w.shape[0], k = x.shape[1];
  cpu::check_dim("gemm_fp8", "out", out, 0, m);
  cpu::check_dim("gemm_fp8", "out", out, 1, n);
  const auto* xs = static_cast<const float*>(x_scales.data);
  const auto* ws = static_cast<const float*>(w_scales.data);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* xr = cpu::row<const uint8_t>(x, i);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wr = cpu::row<const uint8_t>(w, j);
      float result = 0.0f;
      if (!blocks) {
        float acc = 0.0f;
        for (int64_t l = 0; l < k; ++l) acc += f8e4m3_to_f32(xr[l]) * f8e4m3_to_f32(wr[l]);
        result = acc * xs[i * x_scales.stride[0]] * ws[j * w_scales.stride[0]];
      } else {
        for (int64_t g = 0; g * kFp8Block < k; ++g) {
          float acc = 0.0f;
          for (int64_t l = g * kFp8Block; l < std::min(k, (g + 1) * kFp8Block); ++l)
            acc += f8e4m3_to_f32(xr[l]) * f8e4m3_to_f32(wr[l]);
          result += acc * xs[g * m + i] * ws[(j / kFp8Block) * w_scales.stride[0] + g * w_scales.stride[1]];
        }
      }
      cpu::row<float>(out, i)[j] = result;
    }
  }
}

}  // namespace fg
