// Randomized robustness: random bytes, invalid UTF-8, random Unicode, special-token fragments
// and huge inputs never crash or hang the tokenizer; ids stay in range; decode is valid UTF-8;
// byte-level tokenizers round-trip valid text exactly. Bounded: a few seconds in total.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Random text drawn from pieces that stress the pipeline.
std::string random_text(std::mt19937& rng, size_t pieces) {
  static const std::vector<std::string> kPieces = {"a",
                                                   "Z",
                                                   " ",
                                                   "  ",
                                                   "\n",
                                                   "\r\n",
                                                   "\t",
                                                   "0",
                                                   "42",
                                                   "'s",
                                                   "'LL",
                                                   ".",
                                                   ",",
                                                   "!",
                                                   "<",
                                                   ">",
                                                   "|",
                                                   "_",
                                                   "\u00e9",
                                                   "e\u0301",
                                                   "\u00df",
                                                   "\u0130",
                                                   "\u03a3",
                                                   "\u4e2d",
                                                   "\u3042",
                                                   "\ud55c",
                                                   "\u0627",
                                                   "\u0915\u094d",
                                                   "\U0001F680",
                                                   "\U0001F469\u200D\U0001F467",
                                                   "\uFE0F",
                                                   "\u00a0",
                                                   "\u2581",
                                                   "\u200b",
                                                   "\uFFFD",
                                                   "<s>",
                                                   "</s>",
                                                   "<unk>",
                                                   "<|endoftext|>",
                                                   "<|im_start|>",
                                                   "<|im_end|>",
                                                   "<|eot_id|>",
                                                   "<|begin_of_text|>",
                                                   "<|end|>",
                                                   "<|assistant|>",
                                                   "<|endoftext",
                                                   "<0xE2>",
                                                   "\xe2\x82",
                                                   "\xff",
                                                   "\xc0\xaf",
                                                   "\xed\xa0\x80",
                                                   "\x80"};
  std::string s;
  for (size_t k = 0; k < pieces; ++k) s += kPieces[rng() % kPieces.size()];
  return s;
}

void check_ids(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::string& what) {
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << what << ": id " << id << " out of range";
}

class TokenizerFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFuzz, RandomInputsNeverCrash) {
  const std::string name = GetParam();
  const Tokenizer* tok = test::reference_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(name)));
  const bool lossless = name == "gpt2" || name == "llama-3.2-instruct";
  for (int trial = 0; trial < 300; ++trial) {
    const std::string input = trial % 3 == 0 ? random_bytes(rng, rng() % 300) : random_text(rng, rng() % 60);
    for (bool special : {false, true}) {
      const auto ids = tok->encode(input, special);
      check_ids(*tok, ids, name);
      const std::string text = tok->decode(ids, false);
      ASSERT_TRUE(tok::utf8_is_valid(text));
      if (lossless && !special) {
        EXPECT_EQ(text, tok::utf8_sanitize(input)) << name << " round trip of '" << test::printable(input) << "'";
      }
    }
    // Random ids (also out of range ones) decode to valid UTF-8 and stream the same way.
    std::vector<int32_t> ids(rng() % 20);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % (tok->vocab_size() + 50)) - 10;
    const std::string text = tok->decode(ids, trial % 2 == 0);
    ASSERT_TRUE(tok::utf8_is_valid(text));
    IncrementalDecoder dec(*tok, trial % 2 == 0);
    std::string streamed;
    for (int32_t id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    EXPECT_EQ(streamed, text);
  }
}

TEST_P(TokenizerFuzz, HugeInputsStayFast) {
  const std::string name = GetParam();
  const Tokenizer* tok = test::reference_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(99);
  const std::vector<std::string> inputs = {
      std::string(300000, ' '),         // one long run of spaces
      std::string(300000, 'a'),         // one very long word
      std::string(100000, '\n') + "x",  // newlines
      random_bytes(rng, 200000),        // garbage
      random_text(rng, 40000),          // mixed scripts and special tokens
  };
  for (const auto& input : inputs) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(input, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check_ids(*tok, ids, name);
    EXPECT_FALSE(ids.empty());
    // Generous bound: linear-time encoding takes milliseconds; a quadratic loop takes minutes.
    EXPECT_LT(s, 10.0) << name << " took " << s << " s on '" << test::printable(input, 20) << "'";
    EXPECT_TRUE(tok::utf8_is_valid(tok->decode(ids, false)));
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, TokenizerFuzz,
                         ::testing::Values("gpt2", "llama-3.2-instruct", "qwen2.5-instruct", "mistral-7b-v0.1",
                                           "mistral-7b-v0.1-legacy-format", "phi-3-mini-4k-instruct"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace fg
