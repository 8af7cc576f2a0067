// Tokenizers from small synthetic GGUF vocabularies: SentencePiece-style merges rebuilt from
// scores, add_space_prefix, byte-level merges rebuilt from ids, CONTROL / USER_DEFINED tokens,
// end-of-generation ids, add_bos_token; and one-line errors naming the file for a missing or
// unsupported tokenizer, inconsistent arrays and special ids outside the vocabulary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "support/gguf_writer.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::GgufWriter;

class GgufTokenizerUnit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_gguf_tok_unit_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const GgufWriter& w) {
    const std::string path = (dir_ / "t.gguf").string();
    w.write(path);
    return path;
  }
  void expect_error(const GgufWriter& w, const std::string& what) {
    const std::string path = write(w);
    auto t = Tokenizer::load(path);
    ASSERT_FALSE(t.is_ok()) << "loaded, expected: " << what;
    const std::string& m = t.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }

  // A SentencePiece-style vocabulary: <unk> <s> </s> ▁ a b ab ▁a ▁ab, longer pieces scoring higher.
  static GgufWriter spm() {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "\u2581a", "\u2581ab"});
    w.f32s("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3, -1.5f, -1.2f, -0.5f});
    w.i32s("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 1});
    w.u32("tokenizer.ggml.unknown_token_id", 0);
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
    return w;
  }

  fs::path dir_;
};

TEST_F(GgufTokenizerUnit, SentencePieceMergesFromScores) {
  auto t = Tokenizer::load(write(spm()));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab", false), std::vector<int32_t>{8});         // ▁ab
  EXPECT_EQ((*t)->encode("ab a", false), (std::vector<int32_t>{8, 7}));  // ▁ab ▁a
  EXPECT_EQ((*t)->encode("ab", true), (std::vector<int32_t>{1, 8}));     // add_bos_token defaults on
  EXPECT_EQ((*t)->decode(std::vector<int32_t>{1, 8, 7}, true), "ab a");
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE((*t)->is_special(0));

  GgufWriter no_prefix = spm();
  no_prefix.boolean("tokenizer.ggml.add_space_prefix", false);
  no_prefix.boolean("tokenizer.ggml.add_bos_token", false);
  auto u = Tokenizer::load(write(no_prefix));
  ASSERT_TRUE(u.is_ok()) << u.status().to_string();
  EXPECT_EQ((*u)->encode("ab", true), std::vector<int32_t>{6});  // ab, no ▁, no BOS
}

TEST_F(GgufTokenizerUnit, ByteLevelWithoutMergesAndAddedTokens) {
  GgufWriter w;
  w.str("tokenizer.ggml.model", "gpt2");
  // Byte-level spellings: "Ġ" is the space. Merges are rebuilt from ids: "ab" (id 4) before "Ġab".
  w.strings("tokenizer.ggml.tokens", {"a", "b", "\xC4\xA0", "<|eot|>", "ab",
                                      "\xC4\xA0"
                                      "ab",
                                      "<think>"});
  w.i32s("tokenizer.ggml.token_type", {1, 1, 1, 3, 1, 1, 4});
  w.u32("tokenizer.ggml.eos_token_id", 3);
  w.u32("tokenizer.ggml.eot_token_id", 3);
  auto t = Tokenizer::load(write(w));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab ab<think>", false), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ((*t)->encode("<|eot|>", false), std::vector<int32_t>{3});
  EXPECT_TRUE((*t)->is_special(3));
  EXPECT_FALSE((*t)->is_special(6));  // USER_DEFINED: whole, but not special
  EXPECT_EQ((*t)->decode(std::vector<int32_t>{4, 3, 5}, true), "ab ab");
  EXPECT_EQ((*t)->eos_ids(), std::vector<int32_t>{3});
  EXPECT_EQ((*t)->encode("ab", true), std::vector<int32_t>{4});  // byte-level: no BOS by default
}

TEST_F(GgufTokenizerUnit, Errors) {
  GgufWriter none;
  none.str("general.architecture", "llama");
  expect_error(none, "the file has no tokenizer");

  GgufWriter bert;
  bert.str("tokenizer.ggml.model", "bert");
  bert.strings("tokenizer.ggml.tokens", {"a"});
  expect_error(bert, "tokenizer model 'bert' (tokenizer.ggml.model) is not supported (supported: gpt2, llama)");

  GgufWriter pre;
  pre.str("tokenizer.ggml.model", "gpt2");
  pre.str("tokenizer.ggml.pre", "chatglm-bpe");
  pre.strings("tokenizer.ggml.tokens", {"a"});
  expect_error(pre, "pre-tokenizer 'chatglm-bpe' (tokenizer.ggml.pre) is not supported");

  GgufWriter scores = spm();
  scores.f32s("tokenizer.ggml.scores", {0});  // a second, shorter array under the same key
  expect_error(scores, "metadata key 'tokenizer.ggml.scores' appears twice");

  GgufWriter short_scores;
  short_scores.str("tokenizer.ggml.model", "llama");
  short_scores.strings("tokenizer.ggml.tokens", {"a", "b"});
  short_scores.f32s("tokenizer.ggml.scores", {0});
  expect_error(short_scores, "tokenizer.ggml.scores has 1 entries for 2 tokens");

  GgufWriter types;
  types.str("tokenizer.ggml.model", "gpt2");
  types.strings("tokenizer.ggml.tokens", {"a", "b"});
  types.i32s("tokenizer.ggml.token_type", {1});
  expect_error(types, "tokenizer.ggml.token_type has 1 entries for 2 tokens");

  GgufWriter bos;
  bos.str("tokenizer.ggml.model", "gpt2");
  bos.strings("tokenizer.ggml.tokens", {"a", "b"});
  bos.u32("tokenizer.ggml.bos_token_id", 7);
  expect_error(bos, "metadata 'tokenizer.ggml.bos_token_id' = 7 is outside the vocabulary of 2 tokens");
}

}  // namespace
}  // namespace fg
