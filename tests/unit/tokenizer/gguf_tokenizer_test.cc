// Tokenizers built from GGUF metadata give Hugging Face's ids:
//  - llama.cpp's vocab-only GGUF files of the committed vocab tests (tests/fixtures/vocab_tests.tar.xz) (gpt-2:
//  byte-level BPE;
//    llama-spm, phi-3: SentencePiece-style) against their .out files, which come from the
//    models' Hugging Face tokenizers;
//  - GGUF files written here from the reference tokenizer.json files the way llama.cpp's converter
//    writes them (tokens, token types, merges, tokenizer.ggml.pre = llama-bpe / qwen2 / gpt-2),
//    against the same .out files and the corpus of tests/fixtures/tokenizer/<name>.json;
//  - pre-tokenizers flashgen does not know (deepseek-coder, deepseek-llm) are refused by name;
//  - the chat template and special tokens come from the metadata.
#include "tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/gguf_writer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::printable;

// The inputs and expected ids of a llama.cpp vocab test (.inp: inputs separated by
// "\n__ggml_vocab_test__\n"; .out: the ids of each input on one line).
std::vector<std::pair<std::string, std::vector<int32_t>>> read_vocab_test(const std::string& base) {
  const std::string inp = test::read_file(base + ".inp"), out = test::read_file(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::pair<std::string, std::vector<int32_t>>> cases;
  size_t ip = 0, op = 0;
  while (ip < inp.size()) {
    const size_t next = inp.find(sep, ip);
    const size_t nl = out.find('\n', op);
    std::vector<int32_t> ids;
    std::istringstream ss(out.substr(op, nl == std::string::npos ? std::string::npos : nl - op));
    for (int32_t id; ss >> id;) ids.push_back(id);
    cases.emplace_back(inp.substr(ip, next == std::string::npos ? std::string::npos : next - ip), ids);
    if (next == std::string::npos || nl == std::string::npos) break;
    ip = next + sep.size();
    op = nl + 1;
  }
  return cases;
}

bool have_vocab_test(const std::string& name) {
  return fs::exists(test::vocab_tests_dir() + "/ggml-vocab-" + name + ".gguf.out");
}

void expect_vocab_test(const Tokenizer& tok, const std::string& vocab) {
  const auto cases = read_vocab_test(test::vocab_tests_dir() + "/ggml-vocab-" + vocab + ".gguf");
  ASSERT_GE(cases.size(), 40u);
  for (const auto& [input, ids] : cases)
    EXPECT_EQ(tok.encode(input, false), ids) << vocab << ": '" << printable(input) << "'";
}

// ---- llama.cpp's vocab-only GGUF files

class GgufVocabFile : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabFile, EncodesLikeHuggingFace) {
  const std::string name = GetParam();
  const std::string path = test::vocab_tests_dir() + "/ggml-vocab-" + name + ".gguf";
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  expect_vocab_test(**tok, name);
}

INSTANTIATE_TEST_SUITE_P(Shared, GgufVocabFile, ::testing::Values("gpt-2", "llama-spm", "phi-3"), [](const auto& p) {
  std::string n = p.param;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

TEST(GgufVocabFile, UnknownPreTokenizersAreRefusedByName) {
  for (const char* name : {"deepseek-coder"}) {
    const std::string path = test::vocab_tests_dir() + "/ggml-vocab-" + name + ".gguf";
    auto tok = Tokenizer::load(path);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_EQ(tok.status().code(), ErrorCode::kUnsupported);
    const std::string& m = tok.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre) is not supported"),
              std::string::npos)
        << m;
  }
}

TEST(GgufVocabFile, SpecialTokensAndChatTemplateFromMetadata) {
  const std::string path = test::vocab_tests_dir() + "/ggml-vocab-phi-3.gguf";
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_ids(), std::vector<int32_t>{32000});
  EXPECT_EQ((*tok)->encode("hello", true), (std::vector<int32_t>{1, 22172}));  // add_bos_token
  EXPECT_TRUE((*tok)->is_special(32000));
  EXPECT_EQ((*tok)->encode("<|user|>hi", false).front(), 32010);  // a control token stays whole
  EXPECT_EQ((*tok)->decode((*tok)->encode("Hello world!", false), false), "Hello world!");

  auto ct = ChatTemplate::from_model_dir(path);
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->special_tokens()["bos_token"], "<s>");
  EXPECT_EQ(ct->special_tokens()["eos_token"], "<|endoftext|>");
  auto text = ct->render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])"), nullptr, true);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(*text, "<s><|user|>\nHi<|end|>\n<|assistant|>\n");

  // A vocab file without a chat template says so.
  auto none = ChatTemplate::from_model_dir(test::vocab_tests_dir() + "/ggml-vocab-gpt-2.gguf");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no tokenizer.chat_template in its metadata"), std::string::npos)
      << none.status().message();
}

// ---- GGUF files written from tokenizer.json, as llama.cpp's converter writes them

struct Converted {
  const char* tokenizer;  // <fixtures>/tokenizers/<name>
  const char* pre;        // tokenizer.ggml.pre
  const char* vocab;      // the llama.cpp vocab test of the same vocabulary
};

class GgufConverted : public ::testing::TestWithParam<Converted> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_gguf_tok_" + std::to_string(getpid()) + "_" + GetParam().pre);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // tokens (by id; gaps become [PAD<id>]), token types (added special -> CONTROL, other added ->
  // USER_DEFINED, the rest NORMAL) and merges ("a b") of a tokenizer.json, as a GGUF vocabulary.
  std::string convert(const std::string& tokenizer_dir, const std::string& pre) {
    const nlohmann::json j = test::read_json(tokenizer_dir + "/tokenizer.json");
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    auto place = [&](int64_t id, const std::string& s, int32_t type) {
      if (int64_t(tokens.size()) <= id) {
        for (int64_t k = int64_t(tokens.size()); k <= id; ++k) tokens.push_back("[PAD" + std::to_string(k) + "]");
        types.resize(tokens.size(), 5);
      }
      tokens[size_t(id)] = s;
      types[size_t(id)] = type;
    };
    for (const auto& [s, id] : j["model"]["vocab"].items()) place(id.get<int64_t>(), s, 1);
    for (const auto& a : j["added_tokens"]) place(a["id"].get<int64_t>(), a["content"], a["special"] ? 3 : 4);
    std::vector<std::string> merges;
    for (const auto& m : j["model"]["merges"])
      merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
    test::GgufWriter w;
    w.str("general.architecture", "llama");
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", pre);
    w.strings("tokenizer.ggml.tokens", tokens);
    w.i32s("tokenizer.ggml.token_type", types);
    w.strings("tokenizer.ggml.merges", merges);
    const std::string path = (dir_ / "vocab.gguf").string();
    w.write(path);
    return path;
  }

  fs::path dir_;
};

TEST_P(GgufConverted, SameIdsAsTokenizerJson) {
  const Converted p = GetParam();
  auto tok = Tokenizer::load(convert(test::reference_tokenizers_dir() + "/" + p.tokenizer, p.pre));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  if (have_vocab_test(p.vocab)) expect_vocab_test(**tok, p.vocab);
  const auto doc = test::read_json(test::fixture_dir() + "/" + p.tokenizer + ".json");
  ASSERT_GT(doc["cases"].size(), 50u);
  for (const auto& c : doc["cases"]) {
    const std::string input = test::case_input(c);
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->encode(input, false), ids) << p.tokenizer << " '" << printable(input) << "'";
  }
  for (const auto& c : doc["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->decode(ids, false), c["text"].get<std::string>()) << p.tokenizer << " ids " << c["ids"].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, GgufConverted,
                         ::testing::Values(Converted{"gpt2", "gpt-2", "gpt-2"},
                                           Converted{"llama-3-8b-instruct", "llama-bpe", "llama-bpe"},
                                           Converted{"qwen2.5-instruct", "qwen2", "qwen2"}),
                         [](const auto& p) {
                           std::string n = p.param.pre;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace fg
