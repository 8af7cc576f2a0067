// Streaming detokenization: deltas are whole UTF-8 characters and concatenate to decode(all),
// SentencePiece leading spaces and byte-fallback pieces come out right, context works.
#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

// Feeds ids one by one; checks each delta is valid UTF-8; returns the concatenation.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                   std::vector<std::string>* deltas = nullptr, std::span<const int32_t> context = {}) {
  IncrementalDecoder dec(tok, skip, context);
  std::string all;
  for (int32_t id : ids) {
    std::string d = dec.push(id);
    EXPECT_TRUE(tok::utf8_is_valid(d)) << "delta splits a character: " << test::printable(d);
    if (deltas) deltas->push_back(d);
    all += d;
  }
  std::string rest = dec.flush();
  EXPECT_TRUE(tok::utf8_is_valid(rest));
  if (deltas) deltas->push_back(rest);
  return all + rest;
}

class IncrementalParity : public ::testing::TestWithParam<const char*> {};

TEST_P(IncrementalParity, ConcatenationEqualsDecode) {
  const std::string name = GetParam();
  const Tokenizer* tok = test::reference_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  const auto doc = test::read_json(test::fixture_dir() + "/" + name + ".json");
  int n = 0;
  for (const auto& c : doc["cases"]) {
    if (++n > 60) break;
    const std::string input = test::case_input(c);
    const auto ids = tok->encode(input, true);
    for (bool skip : {false, true})
      EXPECT_EQ(stream(*tok, ids, skip), tok->decode(ids, skip)) << name << " '" << test::printable(input) << "'";
  }
  // Random id sequences, heavy on byte tokens and special tokens.
  std::mt19937 rng(1234);
  std::vector<int32_t> pool;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    if (tok->id_of(hex) >= 0) pool.push_back(tok->id_of(hex));
  }
  for (int32_t id = 0; id < tok->vocab_size(); id += 97) pool.push_back(id);
  for (int32_t id = tok->vocab_size() - 30; id < tok->vocab_size(); ++id) pool.push_back(id);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (auto& id : ids) id = pool[rng() % pool.size()];
    for (bool skip : {false, true}) {
      const std::string expected = tok->decode(ids, skip);
      EXPECT_EQ(stream(*tok, ids, skip), expected) << name << " trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, IncrementalParity,
                         ::testing::Values("gpt2", "mistral-7b-v0.1", "mistral-7b-v0.1-legacy-format",
                                           "phi-3-mini-4k-instruct", "qwen2.5-instruct"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(IncrementalDecoder, SentencePieceLeadingSpaceAndByteFallback) {
  const Tokenizer* tok = test::reference_tokenizer("mistral-7b-v0.1");
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> deltas;
  const auto ids = tok->encode("Hello world", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(stream(*tok, ids, false, &deltas), "Hello world");
  EXPECT_EQ(deltas[0], "Hello");
  EXPECT_EQ(deltas[1], " world");

  // U+1F999 is not in the vocabulary: four byte-fallback tokens, one character.
  const auto llama = tok->encode("\U0001F999", false);
  ASSERT_GE(llama.size(), 4u);
  deltas.clear();
  EXPECT_EQ(stream(*tok, llama, false, &deltas), tok->decode(llama, false));
  size_t nonempty = 0;
  for (const auto& d : deltas) nonempty += !d.empty();
  EXPECT_EQ(nonempty, 1u) << "the character must come out once, whole";
  EXPECT_NE(tok->decode(llama, false).find("\U0001F999"), std::string::npos);

  // With the prompt as context, the first generated token keeps its space.
  const auto prompt = tok->encode("Say:", true);
  const auto gen = tok->encode("Hello", false);  // "▁Hello"
  deltas.clear();
  EXPECT_EQ(stream(*tok, gen, true, &deltas, prompt), " Hello");
  EXPECT_EQ(stream(*tok, gen, true), "Hello");
}

TEST(IncrementalDecoder, ByteLevelSplitCharacterIsHeldBack) {
  const Tokenizer* tok = test::reference_tokenizer("gpt2");
  ASSERT_NE(tok, nullptr);
  // "€" is three bytes; feed its byte-level pieces one id each.
  const std::vector<int32_t> ids = {tok->id_of("\u00e2"), tok->id_of("\u0124"), tok->id_of("\u00ac"), tok->id_of("!")};
  for (int32_t id : ids) ASSERT_GE(id, 0);
  std::vector<std::string> deltas;
  EXPECT_EQ(stream(*tok, ids, false, &deltas), "\u20ac!");
  EXPECT_EQ(deltas[0], "");
  EXPECT_EQ(deltas[1], "");
  EXPECT_EQ(deltas[2], "\u20ac");
  EXPECT_EQ(deltas[3], "!");

  // An unfinished character at the end comes out as U+FFFD on flush, like decode().
  IncrementalDecoder dec(*tok, false);
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.flush(), "\uFFFD");
}

TEST(IncrementalDecoder, KeptSpecialTokensShowWhileOthersAreSkipped) {
  const Tokenizer* tok = test::reference_tokenizer("llama-3.2-instruct");
  ASSERT_NE(tok, nullptr);
  const int32_t tag = tok->id_of("<|python_tag|>");
  const int32_t eot = tok->id_of("<|eot_id|>");
  ASSERT_TRUE(tag >= 0 && tok->is_special(tag) && eot >= 0 && tok->is_special(eot));
  std::vector<int32_t> ids = tok->encode("Calling é:", false);
  ids.push_back(tag);
  for (int32_t id : tok->encode(R"({"name": "f"})", false)) ids.push_back(id);
  ids.push_back(eot);
  IncrementalDecoder dec(*tok, /*skip_special_tokens=*/true, {}, {tag});
  std::string text;
  for (int32_t id : ids) text += dec.push(id);
  text += dec.flush();
  EXPECT_EQ(text, R"(Calling é:<|python_tag|>{"name": "f"})");
  // Without the keep list the marker is skipped like the end token; with skipping off both show.
  EXPECT_EQ(stream(*tok, ids, true), R"(Calling é:{"name": "f"})");
  EXPECT_EQ(stream(*tok, ids, false), R"(Calling é:<|python_tag|>{"name": "f"}<|eot_id|>)");
}

}  // namespace
}  // namespace fg
