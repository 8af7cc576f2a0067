// ggml dequantization is bit-exact to the reference (the `gguf` Python package, which transformers
// uses to load GGUF files) for every type flashgen loads, on random blocks committed by
// tools/make_gguf_fixtures.py; and the block geometry of every ggml type matches the reference's.
#include "gguf/gguf_quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/npy.h"

namespace fg {
namespace {

std::string fixture(const std::string& name) {
  return std::string(FG_SOURCE_DIR) + "/tests/fixtures/gguf/" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class DequantTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantTest, BitExactToReference) {
  const GgmlTypeInfo* info = ggml_type_info(GetParam());
  ASSERT_NE(info, nullptr);
  ASSERT_TRUE(info->loadable);
  const std::string blocks = read_bytes(fixture(std::string("dequant/") + info->name + ".bin"));
  auto expected = read_npy(fixture(std::string("dequant/") + info->name + ".npy"));
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  ASSERT_FALSE(blocks.empty());
  ASSERT_EQ(blocks.size() % size_t(info->block_bytes), 0u);
  const int64_t n = int64_t(blocks.size()) / info->block_bytes * info->block_size;
  ASSERT_EQ(int64_t(expected->f32.size()), n);

  std::vector<float> out(size_t(n) + 1, 12345.0f);  // one sentinel past the end
  ggml_dequantize(info->type, reinterpret_cast<const uint8_t*>(blocks.data()), out.data(), n);
  EXPECT_EQ(out[size_t(n)], 12345.0f) << "wrote past the end";
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &out[size_t(i)], 4);
    std::memcpy(&b, &expected->f32[size_t(i)], 4);
    if (a != b && ++mismatches <= 5)
      ADD_FAILURE() << info->name << " value " << i << ": got " << out[size_t(i)] << " (0x" << std::hex << a
                    << "), reference " << expected->f32[size_t(i)] << " (0x" << b << ")" << std::dec;
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(LoadableTypes, DequantTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                           GgmlType::kQ6_K),
                         [](const auto& p) { return std::string(ggml_type_info(p.param)->name); });

TEST(GgmlTypes, GeometryMatchesReference) {
  const auto j = nlohmann::json::parse(read_bytes(fixture("types.json")));
  int checked = 0;
  for (const auto& [name, v] : j["types"].items()) {
    const GgmlTypeInfo* info = ggml_type_info(v[0].get<uint32_t>());
    ASSERT_NE(info, nullptr) << name << " (id " << v[0] << ") is missing from flashgen's table";
    EXPECT_EQ(info->name, name);
    EXPECT_EQ(info->block_size, v[1].get<int64_t>()) << name;
    // The Python table still gives Q8_1 the 40-byte block of its old f32 d/s layout; ggml's
    // block_q8_1 (two f16 + 32 int8) is 36 bytes. No GGUF file stores Q8_1.
    if (name != "Q8_1") {
      EXPECT_EQ(info->block_bytes, v[2].get<int64_t>()) << name;
    }
    ++checked;
  }
  EXPECT_GE(checked, 30);
  EXPECT_EQ(ggml_type_info(4u), nullptr);  // removed types (Q4_2) are unknown
  EXPECT_EQ(ggml_loadable_types(), "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K");
}

}  // namespace
}  // namespace fg
