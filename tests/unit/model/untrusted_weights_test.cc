// Model files are untrusted: a checkpoint whose values or declared sizes are impossible is refused
// with one line naming the file and the tensor or field, and nothing is loaded from it. Here: NaN
// and infinite weights (f32, bf16), huge declared contexts, and shapes that disagree with the config.
// (Lying offsets, overlaps and truncation of the container itself: safetensors_test.cc, and the
// GGUF tests; random files of both kinds: fuzz/safetensors_fuzz.cc, fuzz/gguf_fuzz.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

namespace fs = std::filesystem;

class UntrustedWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_untrusted_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Copies a fixture model, overwriting the bytes of element `index` of `tensor` with `value` (of
  // the tensor's own width).
  std::string poisoned_copy(const std::string& fixture, const std::string& tensor, int64_t index,
                            const std::string& value) {
    const std::string src = test::model_fixture(fixture);
    fs::copy_file(src + "/config.json", dir_ / "config.json");
    std::ifstream in(src + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
    const uint64_t begin = header.at(tensor).at("data_offsets").at(0).get<uint64_t>();
    std::memcpy(&bytes[8 + header_len + begin + uint64_t(index) * value.size()], value.data(), value.size());
    std::ofstream(dir_ / "model.safetensors", std::ios::binary) << bytes;
    return dir_.string();
  }

  // Model::load must fail naming the checkpoint file and containing every one of `what`.
  void expect_refused(const std::string& dir, std::initializer_list<std::string> what) {
    auto m = Model::load(dir, *backend_);
    ASSERT_FALSE(m.is_ok()) << "a poisoned checkpoint loaded";
    const std::string& msg = m.status().message();
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
    for (const std::string& w : what) EXPECT_NE(msg.find(w), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
};

std::string f32_bytes(float v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

TEST_F(UntrustedWeights, NanWeightIsRefusedNamingTheTensor) {
  const std::string dir = poisoned_copy("llama", "model.layers.1.mlp.up_proj.weight", 37,
                                        f32_bytes(std::numeric_limits<float>::quiet_NaN()));
  expect_refused(dir, {"model.layers.1.mlp.up_proj.weight", "NaN or infinite", "element 37"});
}

TEST_F(UntrustedWeights, InfiniteBf16WeightIsRefused) {
  // bf16 +inf: 0x7f80.
  const std::string dir = poisoned_copy("llama_bf16", "model.embed_tokens.weight", 5, std::string("\x80\x7f", 2));
  expect_refused(dir, {"model.embed_tokens.weight", "element 5"});
}

TEST_F(UntrustedWeights, TheUnpoisonedCopyLoads) {
  // The copying itself changes nothing: a "poison" that is an ordinary value loads fine.
  const std::string dir = poisoned_copy("llama", "model.layers.1.mlp.up_proj.weight", 37, f32_bytes(0.25f));
  EXPECT_TRUE(Model::load(dir, *backend_).is_ok());
}

TEST(UntrustedConfig, HugeDeclaredSizesAreRefused) {
  std::ifstream in(test::model_fixture("llama") + "/config.json");
  nlohmann::json base = nlohmann::json::parse(in);
  auto refused = [&](const char* key, int64_t value, const char* what) {
    nlohmann::json c = base;
    c[key] = value;
    auto r = parse_model_config(c.dump(), "config.json");
    ASSERT_FALSE(r.is_ok()) << key << " = " << value;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  refused("max_position_embeddings", int64_t(1) << 40, "max_position_embeddings");
  refused("hidden_size", int64_t(1) << 40, "implausibly large");
  refused("vocab_size", int64_t(1) << 40, "implausibly large");
  refused("num_hidden_layers", 100000, "implausibly large");
  nlohmann::json ok = base;
  ok["max_position_embeddings"] = kMaxPositions;
  EXPECT_TRUE(parse_model_config(ok.dump(), "config.json").is_ok());
}

}  // namespace
}  // namespace fg
