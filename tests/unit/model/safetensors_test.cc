// Safetensors parsing and validation: a well-formed file reads back, and every kind of broken file
// (truncated, header length beyond the file, invalid JSON, unknown dtype, offsets outside the data,
// byte size disagreeing with dtype and shape, overlapping tensors, bad shards) is refused with one
// line naming the file.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fg {
namespace {

// Tensor data in a safetensors file need not be aligned to its element size.
float f32_at(const void* data, size_t i) {
  float v;
  std::memcpy(&v, static_cast<const char*>(data) + 4 * i, 4);
  return v;
}

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_st_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes [u64 header length][header][data] and returns the path.
  std::string write(const std::string& name, const std::string& header, const std::string& data,
                    int64_t header_len_override = -1) {
    std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    uint64_t n = header_len_override >= 0 ? uint64_t(header_len_override) : header.size();
    for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
    out << header << data;
    return path;
  }
  std::string write_raw(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The open must fail with a one-line message naming `path` and containing `what`.
  void expect_error(const std::string& path, const std::string& what) {
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok()) << "opened a broken file: " << what;
    const std::string& m = f.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }

  fs::path dir_;
};

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST_F(SafetensorsTest, ReadsWellFormedFile) {
  std::string data = floats({1, 2, 3, 4, 5, 6}) + std::string("\x80\x3f", 2);  // + one bf16 1.0
  std::string path = write("ok.safetensors",
                           R"({"__metadata__": {"format": "pt"},
                               "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                               "b": {"dtype": "BF16", "shape": [1], "data_offsets": [24, 26]},
                               "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [26, 26]}}   )",
                           data);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const SafetensorsTensor* a = (*f)->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(f32_at(a->data, 5), 6.0f);
  const SafetensorsTensor* b = (*f)->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  uint16_t b0 = 0;
  std::memcpy(&b0, b->data, 2);
  EXPECT_EQ(bf16_to_f32(b0), 1.0f);
  EXPECT_EQ((*f)->find("missing"), nullptr);
}

TEST_F(SafetensorsTest, RefusesTruncatedFiles) {
  expect_error(write_raw("empty.safetensors", ""), "truncated");
  expect_error(write_raw("short.safetensors", "\x10\x00\x00"), "truncated");
  expect_error(write("long_header.safetensors", R"({"a": 1})", "", 4096), "exceeds the file size");
  // Header promises 24 bytes of data; only 8 are there.
  expect_error(
      write("cut.safetensors", R"({"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}})", floats({1, 2})),
      "outside the data section");
}

TEST_F(SafetensorsTest, RefusesCorruptHeaders) {
  expect_error(write("json.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offs)", floats({1})), "header");
  expect_error(write("notjson.safetensors", "\x01\x02garbage", floats({1})), "header");
  expect_error(write("array.safetensors", "[1, 2]", ""), "header");
  expect_error(
      write("dtype.safetensors", R"({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", floats({1})),
      "unknown dtype 'F33'");
  expect_error(write("fields.safetensors", R"({"a": {"dtype": "F32", "shape": [1]}})", floats({1})), "data_offsets");
  expect_error(
      write("shape.safetensors", R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", floats({1})),
      "shape");
  expect_error(
      write("order.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", floats({1, 2})),
      "outside the data section");
}

TEST_F(SafetensorsTest, RefusesLyingOffsets) {
  expect_error(
      write("size.safetensors", R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", floats({1, 2, 3})),
      "need 12 bytes but data_offsets give 8");
  expect_error(write("f16size.safetensors", R"({"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 12]}})",
                     floats({1, 2, 3})),
               "need 6 bytes");
  expect_error(write("overlap.safetensors",
                     R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                     floats({1, 2, 3})),
               "overlap");
  expect_error(write("beyond.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [1000, 1004]}})",
                     floats({1})),
               "outside the data section");
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  write("part-1.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", floats({1}));
  write("part-2.safetensors", R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", floats({2, 3}));
  std::string index = (dir_ / "model.safetensors.index.json").string();
  std::ofstream(index) << R"({"metadata": {}, "weight_map": {"a": "part-1.safetensors", "b": "part-2.safetensors"}})";
  auto ck = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  EXPECT_EQ(ck->num_tensors(), 2u);
  auto b = ck->get("b");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(f32_at((*b)->data, 1), 3.0f);
  auto missing = ck->get("c");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.safetensors.index.json"), std::string::npos);
  EXPECT_NE(missing.status().message().find("'c'"), std::string::npos);

  // The index names a tensor its shard does not hold.
  std::ofstream(index) << R"({"weight_map": {"a": "part-2.safetensors"}})";
  auto wrong = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("part-2.safetensors"), std::string::npos) << wrong.status().message();
  // Paths outside the model directory are refused.
  std::ofstream(index) << R"({"weight_map": {"a": "../part-1.safetensors"}})";
  EXPECT_FALSE(SafetensorsCheckpoint::open(dir_.string()).is_ok());
  std::ofstream(index) << R"({"weight_map": {"a": "gone.safetensors"}})";
  auto gone = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(gone.is_ok());
  EXPECT_NE(gone.status().message().find("gone.safetensors"), std::string::npos);
  std::ofstream(index) << "{not json";
  EXPECT_FALSE(SafetensorsCheckpoint::open(dir_.string()).is_ok());
}

TEST_F(SafetensorsTest, EmptyDirectory) {
  auto ck = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_EQ(ck.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(ck.status().message().find(dir_.string()), std::string::npos);
}

}  // namespace
}  // namespace fg
