// The CPU reference of the FP8 ops (backend.h): per-token e4m3 quantization and the scaled FP8
// GEMM, on values whose codes and products are known by hand.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fg
