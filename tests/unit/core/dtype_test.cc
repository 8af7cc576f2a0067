#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace fg {
namespace {

TEST(DType, Bf16RoundTripsExactValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65280.0f, 1.0f / 128}) EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16MatchesIeeeOnRandomValues) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 10000; ++i) {
    float f = dist(rng) * (i % 3 == 0 ? 1e-6f : 1.0f);
    float back = f16_to_f32(f32_to_f16(f));
    if (std::fabs(f) > 65504.0f + 16.0f) {
      EXPECT_TRUE(std::isinf(back)) << f;
    } else if (std::fabs(f) > 6.2e-5f) {
      EXPECT_LE(std::fabs(back - f), std::fabs(f) * (1.0f / 2048)) << f;
    } else {
      EXPECT_LE(std::fabs(back - f), 6e-8f) << f;  // subnormal spacing 2^-24
    }
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
}

}  // namespace
}  // namespace fg
