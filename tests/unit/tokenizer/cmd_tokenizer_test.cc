// The `flashgen tokenize` / `detokenize` commands, run through CLI11 in-process (the same
// registration the flashgen binary uses), on the reference GPT-2 and Mistral tokenizers.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

// Runs `flashgen <args>` and returns what it printed; throws what the command throws.
std::string run(std::vector<std::string> args) {
  CLI::App app{"flashgen"};
  app.require_subcommand(1);
  cli::register_tokenizer_commands(app);
  std::vector<const char*> argv{"flashgen"};
  for (const auto& a : args) argv.push_back(a.c_str());
  ::testing::internal::CaptureStdout();
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  return ::testing::internal::GetCapturedStdout();
}

TEST(CmdTokenizer, TokenizeAndDetokenize) {
  const std::string model = test::reference_tokenizers_dir() + "/mistral-7b-v0.1";
  EXPECT_EQ(run({"tokenize", "--model", model, "--text", "Hello world"}), "22557 1526\n");
  EXPECT_EQ(run({"tokenize", "--model", model, "--text", "Hello world", "--add-special-tokens"}), "1 22557 1526\n");
  EXPECT_EQ(run({"tokenize", "--model", model, "--text", "Hello world", "--json"}), "{\"ids\": [22557, 1526]}\n");
  EXPECT_EQ(run({"tokenize", "--model", model, "--text", "", "--json"}), "{\"ids\": []}\n");
  EXPECT_EQ(run({"detokenize", "--model", model, "--ids", "1,22557,1526"}), "<s> Hello world");
  EXPECT_EQ(run({"detokenize", "--model", model, "--ids", "1, 22557, 1526", "--skip-special-tokens"}), "Hello world");

  const std::string file = ::testing::TempDir() + "/fg_cmd_tokenizer_input.txt";
  { std::ofstream(file, std::ios::binary) << "Hello world"; }
  EXPECT_EQ(run({"tokenize", "--model", model, "--file", file}), "22557 1526\n");
}

TEST(CmdTokenizer, ErrorsAreOneLine) {
  const std::string model = test::reference_tokenizers_dir() + "/gpt2";
  auto message = [](std::vector<std::string> args) {
    try {
      run(std::move(args));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(message({"tokenize", "--model", "/no/such/dir", "--text", "x"}).find("/no/such/dir"), std::string::npos);
  EXPECT_NE(message({"tokenize", "--model", model}).find("--text or --file"), std::string::npos);
  EXPECT_NE(message({"tokenize", "--model", model, "--file", "/no/such/file"}).find("/no/such/file"),
            std::string::npos);
  EXPECT_NE(message({"detokenize", "--model", model, "--ids", "1,x"}).find("'x'"), std::string::npos);
  EXPECT_NE(message({"detokenize", "--model", model, "--ids", "99999999"}).find("outside the vocabulary"),
            std::string::npos);
  for (const auto& m : {message({"tokenize", "--model", "/no/such/dir", "--text", "x"})})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace
}  // namespace fg
