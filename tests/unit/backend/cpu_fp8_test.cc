// The CPU reference of the FP8 ops (backend.h): e4m3 quantization per token and per 128-column
// group, and the FP8 GEMM with per-channel and 128-block scales, on values whose codes and products
// are known by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"

namespace fg {
namespace {

TEST(CpuFp8, QuantizeRowsScalesByAmaxOver448) {
  auto cpu = make_cpu_backend();
  ASSERT_TRUE(cpu->supports_fp8_gemm());
  std::vector<float> x = {1.0f, -2.0f, 0.5f, 896.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<uint8_t> codes(8, 0xaa);
  std::vector<float> scales(2, -1.0f);
  Tensor xt = Tensor::contiguous(x.data(), DType::kF32, Device::kCpu, {2, 4});
  Tensor ct = Tensor::contiguous(codes.data(), DType::kF8E4M3, Device::kCpu, {2, 4});
  Tensor st = Tensor::contiguous(scales.data(), DType::kF32, Device::kCpu, {2});
  cpu->quantize_rows_fp8(xt, ct, st);
  // Row 0: scale 896 / 448 = 2; 0.5, -1, 0.25 and 448 in e4m3. Row 1 is all zero: scale 1.
  EXPECT_EQ(scales, (std::vector<float>{2.0f, 1.0f}));
  EXPECT_EQ(codes, (std::vector<uint8_t>{0x30, 0xb8, 0x28, 0x7e, 0, 0, 0, 0}));
}

TEST(CpuFp8, GemmAppliesTokenAndChannelScales) {
  auto cpu = make_cpu_backend();
  std::vector<uint8_t> x = {0x38, 0x40};              // [1, 2]: 1, 2
  std::vector<uint8_t> w = {0x30, 0x30, 0x38, 0xb8};  // [2, 2]: (0.5, 0.5), (1, -1)
  std::vector<float> xs = {2.0f}, ws = {1.0f, 3.0f}, out(2, 0.0f);
  Tensor xt = Tensor::contiguous(x.data(), DType::kF8E4M3, Device::kCpu, {1, 2});
  Tensor wt = Tensor::contiguous(w.data(), DType::kF8E4M3, Device::kCpu, {2, 2});
  Tensor xst = Tensor::contiguous(xs.data(), DType::kF32, Device::kCpu, {1});
  Tensor wst = Tensor::contiguous(ws.data(), DType::kF32, Device::kCpu, {2});
  Tensor ot = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {1, 2});
  cpu->gemm_fp8(xt, xst, wt, wst, ot);
  // (0.5 + 1) * 2 * 1 = 3; (1 - 2) * 2 * 3 = -6.
  EXPECT_EQ(out, (std::vector<float>{3.0f, -6.0f}));
}

// Groups of 128 columns get a scale each, stored group-major ([groups, m]); the last group of a
// row may be partial.
TEST(CpuFp8, QuantizeGroupsScalesEach128Columns) {
  auto cpu = make_cpu_backend();
  const int64_t m = 2, k = 144;  // groups of 128 and 16 columns
  std::vector<float> x(size_t(m * k), 0.0f);
  x[5] = 896.0f;        // row 0, group 0: scale 2
  x[130] = -44.8f;      // row 0, group 1: scale 0.1
  x[k + 7] = 4.48f;     // row 1, group 0: scale 0.01
  x[k + 129] = 0.5f;    // row 1, group 1: scale 0.5 / 448
  x[k + 128] = -0.25f;  // ... which maps this to -224
  std::vector<uint8_t> codes(size_t(m * k), 0xaa);
  std::vector<float> scales(4, -1.0f);
  Tensor xt = Tensor::contiguous(x.data(), DType::kF32, Device::kCpu, {m, k});
  Tensor ct = Tensor::contiguous(codes.data(), DType::kF8E4M3, Device::kCpu, {m, k});
  Tensor st = Tensor::contiguous(scales.data(), DType::kF32, Device::kCpu, {2, m});
  cpu->quantize_rows_fp8(xt, ct, st);
  EXPECT_EQ(scales, (std::vector<float>{896.0f / 448.0f, 4.48f / 448.0f, 44.8f / 448.0f, 0.5f / 448.0f}));
  EXPECT_EQ(codes[5], 0x7e);    // 448
  EXPECT_EQ(codes[130], 0xfe);  // -448
  EXPECT_EQ(codes[size_t(k + 7)], 0x7e);
  EXPECT_EQ(f8e4m3_to_f32(codes[size_t(k + 128)]), -224.0f);
  EXPECT_EQ(codes[0], 0);
}

// 128-blocks: each (token, group) sum is scaled by its token's group scale and its weight block's
// scale; w_scales' row stride is ceil(k / 128) rounded up to 4 (the padding is never read).
TEST(CpuFp8, GemmAppliesGroupAndBlockScales) {
  auto cpu = make_cpu_backend();
  const int64_t m = 1, n = 130, k = 144;  // two weight block rows (the second partial), two groups
  std::vector<uint8_t> x(size_t(m * k), 0x38), w(size_t(n * k), 0);  // x all 1
  for (int64_t j = 0; j < n; ++j) {
    w[size_t(j * k)] = 0x38;        // 1 in group 0
    w[size_t(j * k + 140)] = 0x40;  // 2 in group 1
  }
  ASSERT_EQ(fp8_block_scale_stride(k), 4);
  std::vector<float> xs = {2.0f, 3.0f};  // [groups, m]
  std::vector<float> ws = {0.5f, 4.0f, NAN, NAN, 8.0f, 16.0f, NAN, NAN};
  std::vector<float> out(size_t(m * n), 0.0f);
  Tensor xt = Tensor::contiguous(x.data(), DType::kF8E4M3, Device::kCpu, {m, k});
  Tensor wt = Tensor::contiguous(w.data(), DType::kF8E4M3, Device::kCpu, {n, k});
  Tensor xst = Tensor::contiguous(xs.data(), DType::kF32, Device::kCpu, {2, m});
  Tensor wst = Tensor::contiguous(ws.data(), DType::kF32, Device::kCpu, {2, 2});
  wst.stride[0] = 4;
  Tensor ot = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {m, n});
  cpu->gemm_fp8(xt, xst, wt, wst, ot);
  // Block row 0: 1 * 2 * 0.5 + 2 * 3 * 4 = 25; block row 1 (outputs 128, 129): 1 * 2 * 8 + 2 * 3 * 16 = 112.
  EXPECT_EQ(out[0], 25.0f);
  EXPECT_EQ(out[127], 25.0f);
  EXPECT_EQ(out[128], 112.0f);
  EXPECT_EQ(out[129], 112.0f);
}

}  // namespace
}  // namespace fg
