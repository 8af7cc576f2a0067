#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace fg {
namespace {

TEST(Tensor, ContiguousStridesAndSlices) {
  std::vector<float> data(24);
  Tensor t = Tensor::contiguous(data.data(), DType::kF32, Device::kCpu, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_TRUE(t.is_contiguous());
  Tensor cols = t.reshape({6, 4}).narrow_last(1, 3);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.at({2, 0}), &data[2 * 4 + 1]);
  Tensor rows = t.slice(1, 2);
  EXPECT_EQ(rows.data, &data[12]);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] cpu");
}

// Shapes and strides of a block-quantized tensor count values; bytes follow the block layout, and
// views may only start on a block boundary.
TEST(Tensor, BlockQuantizedViewsAddressWholeBlocks) {
  std::vector<uint8_t> data(3 * 2 * 144);  // [3, 512] q4_k: 2 blocks of 144 bytes per row
  Tensor t = Tensor::contiguous(data.data(), DType::kQ4_K, Device::kCpu, {3, 512});
  EXPECT_EQ(t.stride[0], 512);
  EXPECT_EQ(t.nbytes(), data.size());
  EXPECT_EQ(t.describe(), "q4_k[3, 512] cpu");
  EXPECT_EQ(t.slice(1, 3).data, &data[288]);
  EXPECT_EQ(t.at({2, 256}), &data[2 * 288 + 144]);
  EXPECT_EQ(t.narrow_last(256, 512).data, &data[144]);
  EXPECT_DEATH(t.narrow_last(32, 512), "starts inside a block of 256 values");
}

TEST(Tensor, BufferReleasesThroughItsDeleter) {
  int released = 0;
  {
    Buffer b(new char[16], 16, Device::kCpu, [&](void* p) {
      delete[] static_cast<char*>(p);
      ++released;
    });
    Buffer moved = std::move(b);
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(moved.view(DType::kF32, {4}).nbytes(), 16u);
  }
  EXPECT_EQ(released, 1);
}

TEST(Status, ResultCarriesValueOrError) {
  Result<int> ok = 3;
  Result<int> bad = invalid_argument("nope");
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, 3);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().to_string(), "InvalidArgument: nope");
}

}  // namespace
}  // namespace fg
