// FP8 (e4m3) weight matrices with scales, on the host: the exact f32 values of a checkpoint's
// scaled e4m3 weights, and the per-output-channel quantization `--quantization fp8` applies at load.
//
// A scaled FP8 matrix [n, k] holds e4m3 codes and f32 scales, one per block of Fp8Blocks::rows x
// Fp8Blocks::cols values (the last block of a row or column may be partial), row-major over
// [ceil(n / rows), ceil(k / cols)]: the fine-grained format's 128 x 128 blocks, or {1, k} for one
// scale per output channel. Real value (i, j) = f8e4m3_to_f32(code) * scale of its block, one f32
// product (exact for scales of up to 20 significant bits; rounded to nearest even otherwise, as
// every FP8 dequantizer computes it). Never depends on a backend.
#pragma once

#include <cstdint>

namespace fg {

struct Fp8Blocks {
  int64_t rows = 1;
  int64_t cols = 1;
};

// Scales of an [n, k] matrix with these blocks: [ceil(n / rows), ceil(k / cols)].
int64_t fp8_scale_rows(int64_t n, Fp8Blocks b);
int64_t fp8_scale_cols(int64_t k, Fp8Blocks b);

// out[i * k + j] = e4m3(codes[i * k + j]) * scales[(i / rows) * scale_cols + j / cols].
// codes: [n, k] e4m3; scales: [fp8_scale_rows, fp8_scale_cols] f32; out: [n, k] f32.
void fp8_dequantize(const uint8_t* codes, const float* scales, int64_t n, int64_t k, Fp8Blocks b, float* out);

// Per-output-channel quantization of w [n, k] f32 in place to its FP8 values: scale_i = amax_i / 448
// (1 where that is 0), code = f32_to_f8e4m3(w / scale_i) (round to nearest even), and w becomes
// e4m3(code) * scale_i. codes: [n, k] e4m3 or null; scales: [n] f32 or null (written when given).
void fp8_quantize_rows(float* w, int64_t n, int64_t k, uint8_t* codes, float* scales);

}  // namespace fg
