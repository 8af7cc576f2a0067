// GGUF container parsing: a well-formed file reads back (every metadata type, tensors, alignment),
// and every kind of broken file (bad magic, wrong version, truncation anywhere, tensor data past
// the end, unknown types, absurd counts and lengths, misaligned or overlapping tensors, duplicate
// names) is refused with one line naming the file, without allocating from unchecked sizes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gguf/gguf.h"
#include "support/gguf_writer.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::GgufWriter;

std::string f32_bytes(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * 4);
}

GgufWriter small_file() {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 2);
  w.i32("neg", -7);
  w.u8("u8", 200);
  w.i8("i8", -3);
  w.u16("u16", 60000);
  w.i16("i16", -1234);
  w.u64("u64", 1ull << 40);
  w.i64("i64", -(1ll << 40));
  w.f32("f32", 0.5f);
  w.f64("f64", 1e-300);
  w.boolean("flag", true);
  w.strings("names", {"a", "", "ccc"});
  w.i32s("ids", {1, -2, 3});
  w.f32s("scores", {0.25f, -1.5f});
  w.tensor("a", GgmlType::kF32, {3}, f32_bytes({1, 2, 3}));
  w.tensor("b", GgmlType::kF32, {2, 2}, f32_bytes({4, 5, 6, 7}));
  return w;
}

class GgufFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_gguf_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  }

  // Opening must fail with one line naming the file and containing `what`.
  void expect_error(const std::string& bytes, const std::string& what) {
    const std::string path = write("broken.gguf", bytes);
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.is_ok()) << "opened a broken file, expected: " << what;
    const std::string& m = f.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }

  fs::path dir_;
};

TEST_F(GgufFileTest, ReadsEveryValueTypeAndTensor) {
  const std::string path = write("ok.gguf", small_file().bytes());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("llama.block_count"), 2);
  EXPECT_EQ(*f.get_int("neg"), -7);
  EXPECT_EQ(*f.get_int("u8"), 200);
  EXPECT_EQ(*f.get_int("i8"), -3);
  EXPECT_EQ(*f.get_int("u16"), 60000);
  EXPECT_EQ(*f.get_int("i16"), -1234);
  EXPECT_EQ(*f.get_int("u64"), 1ll << 40);
  EXPECT_EQ(*f.get_int("i64"), -(1ll << 40));
  EXPECT_EQ(*f.get_float("f32"), 0.5);
  EXPECT_EQ(*f.get_float("f64"), 1e-300);
  EXPECT_EQ(*f.get_float("llama.block_count"), 2.0);  // integers read as numbers too
  EXPECT_TRUE(*f.get_bool("flag"));
  auto names = f.get_string_array("names");
  ASSERT_TRUE(names.is_ok());
  ASSERT_EQ(names->size(), 3u);
  EXPECT_EQ((*names)[0], "a");
  EXPECT_EQ((*names)[1], "");
  EXPECT_EQ((*names)[2], "ccc");
  EXPECT_EQ(*f.get_int_array("ids"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.get_float_array("scores"), (std::vector<float>{0.25f, -1.5f}));

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* b = f.find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->nbytes, 16u);
  EXPECT_EQ(b->offset % 32, 0u);
  EXPECT_EQ(reinterpret_cast<const float*>(b->data)[3], 7.0f);
  EXPECT_EQ(reinterpret_cast<const float*>(f.find_tensor("a")->data)[0], 1.0f);
  EXPECT_EQ(f.find_tensor("c"), nullptr);
}

TEST_F(GgufFileTest, TypedReadsNameTheKey) {
  const std::string path = write("ok.gguf", small_file().bytes());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok());
  auto missing = (*r)->get_int("nope");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope' is missing"), std::string::npos);
  auto wrong = (*r)->get_string("llama.block_count");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("must be a string, got uint32"), std::string::npos)
      << wrong.status().message();
  EXPECT_FALSE((*r)->get_int("flag").is_ok());  // a bool is not an integer
  EXPECT_FALSE((*r)->get_string_array("ids").is_ok());
}

TEST_F(GgufFileTest, HonoursGeneralAlignment) {
  GgufWriter w;
  w.u32("general.alignment", 64);
  w.alignment = 64;
  w.tensor("x", GgmlType::kF32, {1}, f32_bytes({1}));
  w.tensor("y", GgmlType::kF32, {1}, f32_bytes({2}));
  auto r = GgufFile::open(write("a.gguf", w.bytes()));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->find_tensor("y")->offset, 64u);
  EXPECT_EQ(*reinterpret_cast<const float*>((*r)->find_tensor("y")->data), 2.0f);
}

TEST_F(GgufFileTest, QuantizedTensorSizes) {
  GgufWriter w;
  w.tensor("q", GgmlType::kQ4_K, {256, 2}, std::string(2 * 144, '\0'));
  w.tensor("r", GgmlType::kQ8_0, {64}, std::string(2 * 34, '\0'));
  auto r = GgufFile::open(write("q.gguf", w.bytes()));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find_tensor("q")->nbytes, 288u);
  EXPECT_EQ((*r)->find_tensor("q")->shape_string(), "[2, 256]");
  EXPECT_EQ((*r)->find_tensor("r")->nbytes, 68u);
}

TEST_F(GgufFileTest, BadMagic) {
  std::string b = small_file().bytes();
  b[0] = 'X';
  expect_error(b, "bad magic");
  expect_error("GG", "not a GGUF file");
  expect_error("", "not a GGUF file");
}

TEST_F(GgufFileTest, WrongVersion) {
  for (uint32_t v : {1u, 4u, 0x03000000u}) {
    GgufWriter w = small_file();
    w.version = v;
    expect_error(w.bytes(), "GGUF version " + std::to_string(v) + " is not supported");
  }
  GgufWriter w2 = small_file();
  w2.version = 2;
  EXPECT_TRUE(GgufFile::open(write("v2.gguf", w2.bytes())).is_ok());
}

TEST_F(GgufFileTest, EveryTruncationFailsCleanly) {
  const std::string full = small_file().bytes();
  const std::string path = dir_.string() + "/t.gguf";
  for (size_t n = 0; n < full.size(); ++n) {
    auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(full.data()), n, path);
    ASSERT_FALSE(f.is_ok()) << "a file cut to " << n << " of " << full.size() << " bytes parsed";
    const std::string& m = f.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_TRUE(GgufFile::parse(reinterpret_cast<const uint8_t*>(full.data()), full.size(), path).is_ok());
}

TEST_F(GgufFileTest, TensorDataPastTheEnd) {
  GgufWriter w;
  w.tensor("big", GgmlType::kF32, {1000}, f32_bytes({1}));  // claims 4000 bytes, holds 4
  expect_error(w.bytes(), "tensor 'big' data");
  expect_error(w.bytes(), "past the end of the file");
}

TEST_F(GgufFileTest, UnknownTypes) {
  GgufWriter w;
  w.tensor("t", GgmlType(99), {4}, std::string(16, '\0'));
  expect_error(w.bytes(), "tensor 't' has unknown ggml type id 99");
  GgufWriter v;
  v.u32("k", 1);
  std::string b = v.bytes();
  // The value type of the one metadata entry sits after magic, version, counts and the key.
  const size_t type_at = 4 + 4 + 8 + 8 + 8 + 1;
  b[type_at] = 42;
  expect_error(b, "metadata 'k' has unknown value type 42");
}

TEST_F(GgufFileTest, HugeCountsAndLengths) {
  auto header = [](uint64_t tensors, uint64_t kvs) {
    std::string b;
    GgufWriter::put(b, uint32_t(0x46554747));
    GgufWriter::put(b, uint32_t(3));
    GgufWriter::put(b, tensors);
    GgufWriter::put(b, kvs);
    return b;
  };
  expect_error(header(1ull << 60, 0) + std::string(64, '\0'), "tensor count 1152921504606846976 cannot fit");
  expect_error(header(0, ~0ull) + std::string(64, '\0'), "metadata count");
  // A key claiming 2^63 bytes.
  std::string b = header(0, 1);
  GgufWriter::put(b, uint64_t(1) << 63);
  expect_error(b + std::string(32, 'k'), "claims 9223372036854775808 bytes");
  // An array claiming 2^61 int32 elements, and 2^60 strings.
  for (uint32_t elem : {uint32_t(GgufValueType::kI32), uint32_t(GgufValueType::kString)}) {
    std::string a = header(0, 1);
    GgufWriter::put_string(a, "arr");
    GgufWriter::put(a, uint32_t(GgufValueType::kArray));
    GgufWriter::put(a, elem);
    GgufWriter::put(a, uint64_t(1) << 61);
    expect_error(a + std::string(64, '\0'), "metadata 'arr' claims 2305843009213693952");
  }
  // A tensor with absurd dimensions.
  GgufWriter w;
  w.tensor("t", GgmlType::kF32, {1ll << 41}, "");
  expect_error(w.bytes(), "has dimension 2199023255552");
  GgufWriter w2;
  w2.tensor("t", GgmlType::kF32, {1ll << 30, 1ll << 30}, "");
  expect_error(w2.bytes(), "more than 2^50 elements");
}

TEST_F(GgufFileTest, BadTensorTables) {
  {
    GgufWriter w;
    w.tensor("t", GgmlType::kF32, {1, 1, 1, 1, 1}, f32_bytes({1}));
    expect_error(w.bytes(), "tensor 't' has 5 dimensions");
  }
  {
    GgufWriter w;
    w.tensor("t", GgmlType::kF32, {0}, "");
    expect_error(w.bytes(), "has dimension 0");
  }
  {
    GgufWriter w;
    w.tensor("t", GgmlType::kQ4_0, {48}, std::string(36, '\0'));
    expect_error(w.bytes(), "rows of 48 elements, not a multiple of its block size 32");
  }
  {
    GgufWriter w;
    w.tensor("t", GgmlType::kF32, {1}, f32_bytes({1}));
    w.tensor("t", GgmlType::kF32, {1}, f32_bytes({1}));
    expect_error(w.bytes(), "tensor 't' appears twice");
  }
  {
    GgufWriter w;
    w.u32("k", 1);
    w.u32("k", 2);
    expect_error(w.bytes(), "metadata key 'k' appears twice");
  }
  {
    GgufWriter w;
    w.u32("general.alignment", 24);
    expect_error(w.bytes(), "general.alignment must be a power of two");
  }
}

TEST_F(GgufFileTest, MisalignedAndOverlappingTensors) {
  // Patch the second tensor's offset (the last 8 bytes of the tensor table).
  auto with_second_offset = [](uint64_t off) {
    GgufWriter w;
    w.tensor("a", GgmlType::kF32, {8}, std::string(32, '\0'));
    w.tensor("b", GgmlType::kF32, {8}, std::string(32, '\0'));
    std::string b = w.bytes();
    // Table end: each entry is name (8 + 1) + n_dims 4 + ne 8 + type 4 + offset 8 = 33 bytes.
    const size_t table_end = 4 + 4 + 8 + 8 + 2 * 33;
    std::memcpy(&b[table_end - 8], &off, 8);
    return b;
  };
  expect_error(with_second_offset(16), "starts at data offset 16, not a multiple of the alignment 32");
  expect_error(with_second_offset(0), "tensors 'a' and 'b' overlap");
  EXPECT_TRUE(GgufFile::open(write("ok.gguf", with_second_offset(32))).is_ok());
}

TEST_F(GgufFileTest, NestedArraysAreSkipped) {
  std::string b;
  GgufWriter::put(b, uint32_t(0x46554747));
  GgufWriter::put(b, uint32_t(3));
  GgufWriter::put(b, uint64_t(0));
  GgufWriter::put(b, uint64_t(2));
  GgufWriter::put_string(b, "nested");
  GgufWriter::put(b, uint32_t(GgufValueType::kArray));
  GgufWriter::put(b, uint32_t(GgufValueType::kArray));
  GgufWriter::put(b, uint64_t(2));
  for (int i = 0; i < 2; ++i) {
    GgufWriter::put(b, uint32_t(GgufValueType::kString));
    GgufWriter::put(b, uint64_t(1));
    GgufWriter::put_string(b, "x");
  }
  GgufWriter::put_string(b, "after");
  GgufWriter::put(b, uint32_t(GgufValueType::kU32));
  GgufWriter::put(b, uint32_t(5));
  auto r = GgufFile::open(write("n.gguf", b));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*(*r)->get_int("after"), 5);
  EXPECT_FALSE((*r)->get_string_array("nested").is_ok());
}

TEST_F(GgufFileTest, ModelPathsResolve) {
  const std::string one = (dir_ / "one").string(), two = (dir_ / "two").string(), hf = (dir_ / "hf").string();
  fs::create_directories(one);
  fs::create_directories(two);
  fs::create_directories(hf);
  const std::string bytes = small_file().bytes();
  write("one/m.gguf", bytes);
  write("two/a.gguf", bytes);
  write("two/b.gguf", bytes);
  write("hf/config.json", "{}");
  write("hf/m.gguf", bytes);
  EXPECT_EQ(*find_gguf_model(one), one + "/m.gguf");
  EXPECT_EQ(*find_gguf_model(one + "/m.gguf"), one + "/m.gguf");
  EXPECT_EQ(*find_gguf_model(hf), "");  // a Hugging Face folder wins
  EXPECT_EQ(*find_gguf_model(hf + "/config.json"), "");
  EXPECT_EQ(*find_gguf_model((dir_ / "missing").string()), "");
  auto several = find_gguf_model(two);
  ASSERT_FALSE(several.is_ok());
  EXPECT_NE(several.status().message().find("holds 2 .gguf files (a.gguf, b.gguf)"), std::string::npos)
      << several.status().message();
}

}  // namespace
}  // namespace fg
