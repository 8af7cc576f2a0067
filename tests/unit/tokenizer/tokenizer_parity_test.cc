// Parity with Hugging Face `tokenizers` on the real tokenizers of tests/fixtures/tokenizers.tar.xz:
//  - llama.cpp's vocab tests (.inp/.out pairs made with HF encode(add_special_tokens=False));
//  - tests/fixtures/tokenizer/<name>.json, written by tools/make_tokenizer_fixtures.py: a corpus
//    encoded with and without special tokens, decoded keeping and skipping special tokens, and
//    random id lists decoded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

using test::case_input;
using test::printable;

std::vector<int32_t> to_ids(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

// ---- llama.cpp vocab tests ------------------------------------------------------------------

struct VocabTest {
  const char* vocab;      // ggml-vocab-<vocab>.gguf.inp / .out
  const char* tokenizer;  // folder in tests/fixtures/tokenizers.tar.xz (see tests/fixtures/SOURCES.md)
};

class VocabTestParity : public ::testing::TestWithParam<VocabTest> {};

TEST_P(VocabTestParity, EncodesEveryInputExactly) {
  const VocabTest p = GetParam();
  const std::string base = test::vocab_tests_dir() + "/ggml-vocab-" + p.vocab + ".gguf";
  const std::string inp = test::read_file(base + ".inp"), out = test::read_file(base + ".out");
  ASSERT_FALSE(inp.empty()) << base << ".inp missing";
  const Tokenizer* tok = test::reference_tokenizer(p.tokenizer);
  ASSERT_NE(tok, nullptr);
  // Inputs are separated by "\n__ggml_vocab_test__\n"; outputs are one line each.
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    inputs.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  for (size_t pos = 0; pos <= out.size();) {
    const size_t nl = out.find('\n', pos);
    lines.push_back(out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  ASSERT_GE(lines.size(), inputs.size() - 1);
  int checked = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k == inputs.size() - 1 && inputs[k].empty()) break;  // trailing separator
    std::vector<int32_t> expected;
    std::istringstream ss(lines[k]);
    for (int32_t id; ss >> id;) expected.push_back(id);
    EXPECT_EQ(tok->encode(inputs[k], false), expected)
        << p.vocab << " input " << k << ": '" << printable(inputs[k]) << "'";
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(Reference, VocabTestParity,
                         ::testing::Values(VocabTest{"gpt-2", "gpt2"}, VocabTest{"llama-bpe", "llama-3-8b-instruct"},
                                           VocabTest{"llama-bpe", "llama-3.2-instruct"},
                                           VocabTest{"qwen2", "qwen2.5-instruct"},
                                           VocabTest{"phi-3", "phi-3-mini-4k-instruct"},
                                           VocabTest{"llama-spm", "phi-3-mini-4k-instruct"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.vocab) + "_" + info.param.tokenizer;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The vocab tests' GGUF files themselves (and the GGUF-only deepseek vocabularies, refused by
// pre-tokenizer name) are run by gguf_tokenizer_test.cc.

// ---- corpus fixtures --------------------------------------------------------------------------

class CorpusParity : public ::testing::TestWithParam<const char*> {};

TEST_P(CorpusParity, EncodeAndDecodeMatchHuggingFace) {
  const std::string name = GetParam();
  const Tokenizer* tok = test::reference_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  const auto doc = test::read_json(test::fixture_dir() + "/" + name + ".json");
  ASSERT_GT(doc["cases"].size(), 50u);
  for (const auto& c : doc["cases"]) {
    const std::string input = case_input(c);
    const auto ids = to_ids(c["ids"]);
    const auto ids_special = c.contains("ids_special") ? to_ids(c["ids_special"]) : ids;
    const std::string decoded = c.contains("decoded") ? c["decoded"].get<std::string>() : tok::utf8_sanitize(input);
    const std::string decoded_skip = c.contains("decoded_skip") ? c["decoded_skip"].get<std::string>() : decoded;
    const std::string what = name + " '" + printable(input) + "'";
    EXPECT_EQ(tok->encode(input, false), ids) << what;
    EXPECT_EQ(tok->encode(input, true), ids_special) << what;
    EXPECT_EQ(tok->decode(ids_special, false), decoded) << what;
    EXPECT_EQ(tok->decode(ids_special, true), decoded_skip) << what;
  }
  for (const auto& c : doc["decode_cases"]) {
    const auto ids = to_ids(c["ids"]);
    EXPECT_EQ(tok->decode(ids, false), c["text"].get<std::string>()) << name << " ids " << c["ids"].dump();
    EXPECT_EQ(tok->decode(ids, true), c["text_skip"].get<std::string>()) << name << " ids " << c["ids"].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, CorpusParity,
                         ::testing::Values("gpt2", "llama-3-8b-instruct", "llama-3.2-instruct", "mistral-7b-v0.1",
                                           "mistral-7b-v0.1-legacy-format", "phi-3-mini-4k-instruct",
                                           "qwen2.5-instruct"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// ---- special-token settings of the model folders ---------------------------------------------

TEST(TokenizerConfig, BosEosFromTokenizerConfig) {
  const Tokenizer* llama = test::reference_tokenizer("llama-3.2-instruct");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->bos_id(), 128000);
  EXPECT_EQ(llama->eos_ids(), std::vector<int32_t>{128009});  // <|eot_id|>
  EXPECT_EQ(llama->special_prefix(), std::vector<int32_t>{128000});
  EXPECT_EQ(llama->vocab_size(), 128256);

  const Tokenizer* qwen = test::reference_tokenizer("qwen2.5-instruct");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->bos_id(), -1);
  EXPECT_EQ(qwen->eos_ids(), std::vector<int32_t>{qwen->id_of("<|im_end|>")});
  EXPECT_TRUE(qwen->special_prefix().empty());

  const Tokenizer* mistral = test::reference_tokenizer("mistral-7b-v0.1");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(mistral->bos_id(), 1);
  EXPECT_EQ(mistral->eos_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(mistral->encode("Hello", true).front(), 1);
  EXPECT_EQ(mistral->token_text(1), "<s>");
  EXPECT_EQ(mistral->id_of("<0x0A>"), 13);
  EXPECT_EQ(mistral->token_bytes(mistral->id_of("<0xE2>")), "\xE2");
  EXPECT_EQ(mistral->token_bytes(mistral->id_of("\u2581Hello")), " Hello");
  EXPECT_TRUE(mistral->is_special(2));
  EXPECT_FALSE(mistral->is_special(100));

  const Tokenizer* gpt2 = test::reference_tokenizer("gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->token_bytes(gpt2->id_of("\u0120world")), " world");
  EXPECT_EQ(gpt2->token_bytes(gpt2->id_of("\u00e2")), "\xE2");  // a lone lead byte stays raw
}

}  // namespace
}  // namespace fg
