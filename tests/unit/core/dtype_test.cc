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

TEST(DType, BlockGeometryOfTheQuantizedTypes) {
  struct Geometry {
    DType t;
    int64_t block, bytes;
    const char* name;
  };
  for (Geometry g : {Geometry{DType::kQ8_0, 32, 34, "q8_0"}, Geometry{DType::kQ4_0, 32, 18, "q4_0"},
                     Geometry{DType::kQ4_1, 32, 20, "q4_1"}, Geometry{DType::kQ4_K, 256, 144, "q4_k"},
                     Geometry{DType::kQ5_K, 256, 176, "q5_k"}, Geometry{DType::kQ6_K, 256, 210, "q6_k"}}) {
    EXPECT_TRUE(dtype_is_blocked(g.t)) << g.name;
    EXPECT_EQ(dtype_block_size(g.t), g.block) << g.name;
    EXPECT_EQ(dtype_block_bytes(g.t), g.bytes) << g.name;
    EXPECT_EQ(dtype_size(g.t), 0u) << g.name << ": no whole bytes per value";
    EXPECT_EQ(dtype_bytes(g.t, 3 * g.block), size_t(3 * g.bytes)) << g.name;
    EXPECT_EQ(dtype_name(g.t), g.name);
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    EXPECT_FALSE(dtype_is_blocked(t));
    EXPECT_EQ(dtype_block_size(t), 1);
    EXPECT_EQ(dtype_block_bytes(t), int64_t(dtype_size(t)));
    EXPECT_EQ(dtype_bytes(t, 7), 7 * dtype_size(t));
  }
}

// Every e4m3fn code decodes to the value its bit fields name, and encoding that value gives the
// code back (both zeros and NaN aside).
TEST(DType, F8E4M3DecodesEveryCodeAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const int e = (c >> 3) & 15, m = c & 7;
    const float sign = (c & 0x80) ? -1.0f : 1.0f;
    const float f = f8e4m3_to_f32(code);
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(f32_to_f8e4m3(f) & 0x7f, 0x7f);
      continue;
    }
    const float want = e == 0 ? sign * std::ldexp(float(m), -9) : sign * std::ldexp(1.0f + float(m) / 8, e - 7);
    EXPECT_EQ(f, want) << c;
    EXPECT_EQ(f32_to_f8e4m3(f), code) << c;
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
}

// Encoding rounds to nearest even, in the subnormal range too, and saturates at 448.
TEST(DType, F8E4M3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.0625f)), 1.0f);   // halfway 1 .. 1.125: even (1)
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.1875f)), 1.25f);  // halfway 1.125 .. 1.25: even (1.25)
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.07f)), 1.125f);   // above halfway
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(1.5f, -9))), std::ldexp(2.0f, -9));  // 1.5 ulp -> 2
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(2.5f, -9))), std::ldexp(2.0f, -9));  // 2.5 ulp -> 2
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(0.4f, -9))), 0.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(7.5f, -9))), std::ldexp(1.0f, -6));  // into the normals
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(460.0f)), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-1e9f)), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::numeric_limits<float>::infinity())), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1e-30f)), 0.0f);
}

}  // namespace
}  // namespace fg
