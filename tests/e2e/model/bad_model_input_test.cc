// The `flashgen` binary on broken model directories: each case (truncated or corrupt safetensors,
// header offsets that lie, a missing tensor, a wrong dtype or shape, invalid config JSON, an
// unknown architecture, ...) must exit with status 1 and print exactly one line on stderr that
// names the offending file and the problem; never crash. The broken directories are made here,
// in a temp dir, from a copy of a fixture. Also checks the happy path of `generate` and `logits`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kBinary = std::string(FG_BINARY_DIR) + "/flashgen";
const std::string kFixtures = std::string(FG_SOURCE_DIR) + "/tests/fixtures/models";

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult run(const std::string& args, const fs::path& tmp) {
  fs::path out = tmp / "stdout.txt", err = tmp / "stderr.txt";
  std::string cmd = kBinary + " " + args + " >" + out.string() + " 2>" + err.string();
  int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Safetensors file surgery: split into header JSON and data, and write back.
struct StFile {
  Json header;
  std::string data;
};

StFile read_st(const fs::path& p) {
  std::string bytes = slurp(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  return {Json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

void write_st(const fs::path& p, const StFile& f) {
  std::string h = f.header.dump();
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << h << f.data;
}

class BadModelInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << "flashgen binary not built at " << kBinary;
    tmp_ = fs::temp_directory_path() / ("fg_bad_model_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    model_ = tmp_ / "model";
    fs::copy(kFixtures + "/llama", model_);
    st_ = model_ / "model.safetensors";
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  // Both commands must fail cleanly with one line naming `file` and containing `what`.
  void expect_clean_failure(const fs::path& file, const std::string& what) {
    for (const char* cmd : {"logits", "generate"}) {
      std::string args = std::string(cmd) + " --model " + model_.string() + " --prompt-ids 1,2,3 --backend cpu";
      if (std::string(cmd) == "logits") args += " --output " + (tmp_ / "out.npy").string();
      RunResult r = run(args, tmp_);
      SCOPED_TRACE(std::string(cmd) + ": " + r.err);
      EXPECT_EQ(r.signal, 0) << "crashed";
      EXPECT_EQ(r.exit_code, 1);
      ASSERT_FALSE(r.err.empty());
      EXPECT_EQ(r.err.back(), '\n');
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "expected exactly one line";
      EXPECT_NE(r.err.find(file.string()), std::string::npos) << "message does not name " << file;
      EXPECT_NE(r.err.find(what), std::string::npos);
      EXPECT_TRUE(r.out.empty());
    }
  }

  fs::path tmp_, model_, st_;
};

TEST_F(BadModelInput, TruncatedSafetensors) {
  std::string bytes = slurp(st_);
  std::ofstream(st_, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  expect_clean_failure(st_, "outside the data section");
}

TEST_F(BadModelInput, TinySafetensors) {
  std::ofstream(st_, std::ios::binary | std::ios::trunc) << "abc";
  expect_clean_failure(st_, "truncated");
}

TEST_F(BadModelInput, HeaderLengthBeyondFile) {
  std::string bytes = slurp(st_);
  bytes[6] = '\x01';  // header length += 2^48
  std::ofstream(st_, std::ios::binary | std::ios::trunc) << bytes;
  expect_clean_failure(st_, "header length");
}

TEST_F(BadModelInput, CorruptHeaderJson) {
  std::string bytes = slurp(st_);
  for (size_t i = 20; i < 60; ++i) bytes[i] = '#';
  std::ofstream(st_, std::ios::binary | std::ios::trunc) << bytes;
  expect_clean_failure(st_, "header");
}

TEST_F(BadModelInput, OffsetsBeyondData) {
  StFile f = read_st(st_);
  f.header["model.norm.weight"]["data_offsets"] = {f.data.size() - 8, f.data.size() + 248};
  write_st(st_, f);
  expect_clean_failure(st_, "outside the data section");
}

TEST_F(BadModelInput, OverlappingOffsets) {
  StFile f = read_st(st_);
  // Point a tensor at the bytes of another one of the same size.
  auto src = f.header["model.layers.0.input_layernorm.weight"]["data_offsets"];
  f.header["model.layers.1.input_layernorm.weight"]["data_offsets"] = src;
  write_st(st_, f);
  expect_clean_failure(st_, "overlap");
}

TEST_F(BadModelInput, SizeDisagreesWithShape) {
  StFile f = read_st(st_);
  f.header["model.norm.weight"]["shape"] = {65};
  write_st(st_, f);
  expect_clean_failure(st_, "need 260 bytes");
}

TEST_F(BadModelInput, MissingTensor) {
  StFile f = read_st(st_);
  f.header.erase("model.layers.1.mlp.down_proj.weight");
  write_st(st_, f);
  expect_clean_failure(st_, "missing tensor 'model.layers.1.mlp.down_proj.weight'");
}

TEST_F(BadModelInput, WrongDtype) {
  StFile f = read_st(st_);
  f.header["model.norm.weight"]["dtype"] = "I32";  // same byte size, not a float
  write_st(st_, f);
  expect_clean_failure(st_, "has dtype I32");
}

TEST_F(BadModelInput, UnknownDtype) {
  StFile f = read_st(st_);
  f.header["model.norm.weight"]["dtype"] = "F12";
  write_st(st_, f);
  expect_clean_failure(st_, "unknown dtype 'F12'");
}

TEST_F(BadModelInput, WrongShapeForConfig) {
  StFile f = read_st(st_);
  f.header["model.layers.0.self_attn.o_proj.weight"]["shape"] = {128, 64};  // transposed [64, 128]
  write_st(st_, f);
  expect_clean_failure(st_, "expected [64, 128]");
}

TEST_F(BadModelInput, InvalidConfigJson) {
  std::string text = slurp(model_ / "config.json");
  std::ofstream(model_ / "config.json", std::ios::trunc) << text.substr(0, text.size() / 2);
  expect_clean_failure(model_ / "config.json", "invalid JSON");
}

TEST_F(BadModelInput, UnknownArchitecture) {
  Json c = Json::parse(slurp(model_ / "config.json"));
  c["architectures"] = {"GPTNeoXForCausalLM"};
  std::ofstream(model_ / "config.json", std::ios::trunc) << c.dump(2);
  expect_clean_failure(model_ / "config.json", "unsupported architecture 'GPTNeoXForCausalLM'");
}

TEST_F(BadModelInput, ConfigDisagreesWithWeights) {
  Json c = Json::parse(slurp(model_ / "config.json"));
  c["intermediate_size"] = 96;
  std::ofstream(model_ / "config.json", std::ios::trunc) << c.dump(2);
  expect_clean_failure(st_, "expected [96, 64]");
}

TEST_F(BadModelInput, MissingFiles) {
  fs::remove(model_ / "config.json");
  expect_clean_failure(model_ / "config.json", "cannot open");
  fs::copy(kFixtures + "/llama/config.json", model_ / "config.json");
  fs::remove(st_);
  expect_clean_failure(model_, "no model.safetensors");
}

TEST_F(BadModelInput, BrokenShardIndex) {
  fs::remove_all(model_);
  fs::copy(kFixtures + "/qwen3", model_);
  fs::path index = model_ / "model.safetensors.index.json";
  Json j = Json::parse(slurp(index));
  j["weight_map"]["model.norm.weight"] = "model-00009-of-00006.safetensors";
  std::ofstream(index, std::ios::trunc) << j.dump();
  expect_clean_failure(model_ / "model-00009-of-00006.safetensors", "not found");
}

TEST_F(BadModelInput, TokenIdOutsideVocabulary) {
  RunResult r = run("generate --model " + model_.string() + " --prompt-ids 1,256 --backend cpu", tmp_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  RunResult bad = run("generate --model " + model_.string() + " --prompt-ids 1,x --backend cpu", tmp_);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("'x' is not a token id"), std::string::npos) << bad.err;
}

// ---- the happy path of the two commands

class ModelCli : public BadModelInput {};

TEST_F(ModelCli, GenerateMatchesReference) {
  Json ref = Json::parse(slurp(fs::path(kFixtures) / "llama" / "reference.json"));
  std::string ids;
  for (const auto& id : ref["prompts"][0]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  std::string want;
  for (const auto& id : ref["greedy"][0]) want += (want.empty() ? "" : " ") + std::to_string(id.get<int>());
  // The engine (the default) and the reference loop give the fixture's greedy tokens; without a
  // tokenizer in the folder the output is the ids line alone.
  for (const char* path : {"", " --reference"}) {
    RunResult r = run("generate --model " + model_.string() + " --prompt-ids " + ids +
                          " --backend cpu --page-size 5 --kv-cache-memory 1MiB" + std::string(path),
                      tmp_);
    if (std::string(path).empty()) {
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const size_t colon = r.out.find(": ");
      ASSERT_NE(colon, std::string::npos) << r.out;
      EXPECT_EQ(r.out.substr(0, 4), "[0] ");
      EXPECT_EQ(r.out.substr(colon + 2), want + "\n");
    } else {
      // --kv-cache-memory belongs to the engine: the reference loop refuses it.
      EXPECT_EQ(r.exit_code, 1);
      EXPECT_NE(r.err.find("--kv-cache-memory"), std::string::npos) << r.err;
    }
  }
  RunResult plain =
      run("generate --model " + model_.string() + " --prompt-ids " + ids + " --backend cpu --page-size 5 --reference",
          tmp_);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.substr(plain.out.find(": ") + 2), want + "\n");

  for (const char* path : {"", " --reference"}) {
    RunResult j = run("generate --model " + model_.string() + " --prompt-ids " + ids +
                          " --backend cpu --json --max-new-tokens 4 --temperature 0.8 --top-k 20 --seed 7" + path,
                      tmp_);
    ASSERT_EQ(j.exit_code, 0) << j.err;
    Json out = Json::parse(j.out);
    EXPECT_EQ(out["prompt_ids"], ref["prompts"][0]);
    ASSERT_TRUE(out["output_ids"].is_array());
    EXPECT_LE(out["output_ids"].size(), 4u);
    // Same seed, same tokens.
    RunResult again = run("generate --model " + model_.string() + " --prompt-ids " + ids +
                              " --backend cpu --json --max-new-tokens 4 --temperature 0.8 --top-k 20 --seed 7" + path,
                          tmp_);
    EXPECT_EQ(again.out, j.out);
  }
}

TEST_F(ModelCli, LogitsWritesNpy) {
  fs::path out = tmp_ / "l.npy";
  RunResult r =
      run("logits --model " + model_.string() + " --prompt-ids 5,6,7 --backend cpu --output " + out.string(), tmp_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string bytes = slurp(out);
  ASSERT_GT(bytes.size(), 128u);
  EXPECT_EQ(bytes.substr(1, 5), "NUMPY");
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(bytes.find("'shape': (3, 256)"), std::string::npos);
  uint16_t header_len = uint16_t(uint8_t(bytes[8]) | (uint8_t(bytes[9]) << 8));
  EXPECT_EQ((10 + header_len) % 64, 0);
  EXPECT_EQ(bytes.size(), size_t(10 + header_len + 3 * 256 * 4));
}

}  // namespace
