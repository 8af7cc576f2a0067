// The `flashgen` binary on broken GGUF files (bad magic, wrong version, truncated, tensor data past
// the end, an unknown tensor type, an architecture flashgen does not run): generate, logits,
// tokenize and template must each exit with status 1 and print exactly one line on stderr that
// names the file and the problem; never crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/gguf_writer.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::GgufWriter;

const std::string kBinary = std::string(FG_BINARY_DIR) + "/flashgen";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GgufCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << "flashgen binary not built at " << kBinary;
    tmp_ = fs::temp_directory_path() / ("fg_gguf_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    std::ofstream(tmp_ / "messages.json") << R"([{"role": "user", "content": "hi"}])";
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  // A small model file: metadata, a tokenizer, and one f32 tensor.
  static GgufWriter base() {
    GgufWriter w;
    w.str("general.architecture", "llama");
    w.u32("llama.block_count", 1);
    w.str("tokenizer.ggml.model", "gpt2");
    w.strings("tokenizer.ggml.tokens", {"a", "b"});
    std::vector<float> embed(2 * 64, 0.5f);
    w.tensor_f32("token_embd.weight", {2, 64}, embed.data());
    return w;
  }

  // Every command must fail cleanly with one line naming the file and containing `what`.
  void expect_clean_failure(const std::string& bytes, const std::string& what,
                            std::vector<std::string> commands = {"generate", "logits", "tokenize", "template"}) {
    const fs::path file = tmp_ / "broken.gguf";
    std::ofstream(file, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    for (const std::string& cmd : commands) {
      std::string args = cmd + " --model " + file.string();
      if (cmd == "generate" || cmd == "logits") args += " --prompt-ids 1,2,3 --backend cpu";
      if (cmd == "logits") args += " --output " + (tmp_ / "out.npy").string();
      if (cmd == "tokenize") args += " --text hello";
      if (cmd == "template") args += " --messages " + (tmp_ / "messages.json").string();
      const fs::path out = tmp_ / "stdout.txt", err = tmp_ / "stderr.txt";
      const int status = std::system((kBinary + " " + args + " >" + out.string() + " 2>" + err.string()).c_str());
      const std::string e = slurp(err);
      SCOPED_TRACE(cmd + ": " + e);
      ASSERT_TRUE(WIFEXITED(status)) << "crashed";
      EXPECT_EQ(WEXITSTATUS(status), 1);
      ASSERT_FALSE(e.empty());
      EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << "expected exactly one line";
      EXPECT_NE(e.find(file.string()), std::string::npos) << "message does not name the file";
      EXPECT_NE(e.find(what), std::string::npos);
      EXPECT_TRUE(slurp(out).empty());
    }
  }

  fs::path tmp_;
};

TEST_F(GgufCli, BadMagic) {
  std::string b = base().bytes();
  b[1] = 'X';
  expect_clean_failure(b, "bad magic");
}

TEST_F(GgufCli, WrongVersion) {
  GgufWriter w = base();
  w.version = 1;
  expect_clean_failure(w.bytes(), "GGUF version 1 is not supported");
}

TEST_F(GgufCli, Truncated) {
  const std::string b = base().bytes();
  expect_clean_failure(b.substr(0, 60), "truncated");
  expect_clean_failure(b.substr(0, b.size() - 1), "lies past the end of the file");
}

TEST_F(GgufCli, UnknownTensorType) {
  GgufWriter w = base();
  w.tensor("blk.0.attn_norm.weight", GgmlType(77), {64}, std::string(256, '\0'));
  expect_clean_failure(w.bytes(), "tensor 'blk.0.attn_norm.weight' has unknown ggml type id 77");
}

TEST_F(GgufCli, UnsupportedArchitecture) {
  GgufWriter w;
  w.str("general.architecture", "gpt2");
  expect_clean_failure(w.bytes(), "GGUF architecture 'gpt2' is not supported", {"generate", "logits"});
}

}  // namespace
}  // namespace fg
