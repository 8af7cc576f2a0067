// Scaled FP8 weights on the host (see fp8_weights.h).
#include "model/fp8_weights.h"

#include <cmath>

#include "core/dtype.h"

namespace fg {

int64_t fp8_scale_rows(int64_t n, Fp8Blocks b) {
  return (n + b.rows - 1) / b.rows;
}

int64_t fp8_scale_cols(int64_t k, Fp8Blocks b) {
  return (k + b.cols - 1) / b.cols;
}

void fp8_dequantize(const uint8_t* codes, const float* scales, int64_t n, int64_t k, Fp8Blocks b, float* out) {
  const int64_t scale_cols = fp8_scale_cols(k, b);
  for (int64_t i = 0; i < n; ++i) {
    const float* row_scales = scales + (i / b.rows) * scale_cols;
    for (int64_t j = 0; j < k; ++j) out[i * k + j] = f8e4m3_to_f32(codes[i * k + j]) * row_scales[j / b.cols];
  }
}

void fp8_quantize_rows(float* w, int64_t n, int64_t k, uint8_t* codes, float* scales) {
  constexpr float kE4m3Max = 448.0f;
  for (int64_t i = 0; i < n; ++i) {
    float* row = w + i * k;
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::fmax(amax, std::fabs(row[j]));
    float scale = amax / kE4m3Max;
    if (!(scale > 0.0f)) scale = 1.0f;  // an all-zero row (or one whose amax / 448 underflows)
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t code = f32_to_f8e4m3(row[j] / scale);
      if (codes != nullptr) codes[i * k + j] = code;
      row[j] = f8e4m3_to_f32(code) * scale;
    }
    if (scales != nullptr) scales[i] = scale;
  }
}

}  // namespace fg
