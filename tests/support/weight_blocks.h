// Random weight data in every stored dtype flashgen computes on (f32, f16, bf16 and the
// block-quantized dtypes of core/dtype.h), for kernel and loader tests: quantized values and
// packed scales are random bytes, f16 scale fields are set to finite values that keep the weights
// around +-0.1, and float types hold random finite bit patterns (subnormals included), so every
// code path of a decoder is exercised.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace fg::test {

// The dtypes weights may be kept in on the CPU.
inline const std::vector<DType>& weight_dtypes() {
  static const std::vector<DType> kAll = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                          DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  return kAll;
}

// `n` values (a whole number of blocks) of `dtype` as stored bytes, from `seed`.
inline std::vector<uint8_t> random_weight_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(dtype_bytes(dtype, n));
  for (uint8_t& b : out) b = uint8_t(rng());
  auto put_f16 = [&](size_t at, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(&out[at], &h, 2);
  };
  std::uniform_real_distribution<float> unit(0.5f, 1.0f);
  const size_t bb = size_t(dtype_block_bytes(dtype));
  const size_t blocks = out.size() / bb;
  for (size_t i = 0; i < blocks; ++i) {
    const size_t b = i * bb;
    switch (dtype) {
      case DType::kF32: {  // any exponent below 1.0's, subnormals included
        uint32_t bits;
        std::memcpy(&bits, &out[b], 4);
        bits = (bits & 0x807fffffu) | (uint32_t(rng() % 127) << 23);
        std::memcpy(&out[b], &bits, 4);
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, &out[b], 2);
        h = uint16_t((h & 0x83ffu) | ((rng() % 15) << 10));
        std::memcpy(&out[b], &h, 2);
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, &out[b], 2);
        h = uint16_t((h & 0x807fu) | ((rng() % 127) << 7));
        std::memcpy(&out[b], &h, 2);
        break;
      }
      case DType::kQ8_0: put_f16(b, 0.1f / 127 * unit(rng)); break;
      case DType::kQ4_0: put_f16(b, 0.1f / 8 * unit(rng)); break;
      case DType::kQ4_1:
        put_f16(b, 0.2f / 15 * unit(rng));
        put_f16(b + 2, -0.1f * unit(rng));
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        put_f16(b, 0.2f / (63 * (dtype == DType::kQ4_K ? 15 : 31)) * unit(rng));
        put_f16(b + 2, 0.1f / 63 * unit(rng));
        break;
      case DType::kQ6_K: put_f16(b + 208, 0.1f / (128 * 32) * unit(rng)); break;
      default: break;
    }
  }
  return out;
}

}  // namespace fg::test
