// Normalizers, pre-tokenizers, post-processors, decoders, added-token flags and BPE options,
// each checked against Hugging Face `tokenizers` through small synthetic tokenizers
// (tests/fixtures/tokenizer/synthetic.json, written by tools/make_tokenizer_fixtures.py), plus
// the UTF-8 helpers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

using nlohmann::json;

const json& synthetic() {
  static const json doc = test::read_json(test::fixture_dir() + "/synthetic.json");
  return doc;
}

// The tokenizer.json of one synthetic variant, assembled as the generator did.
std::string variant_tokenizer_json(const json& v) {
  const json& doc = synthetic();
  const std::string model_name = v["model"].get<std::string>();
  json model = doc["models"][model_name];
  const json& patch = v["model_patch"];
  if (patch.contains("byte_fallback")) {
    model["byte_fallback"] = patch["byte_fallback"];
    model["fuse_unk"] = patch["fuse_unk"];
    json vocab = json::object();
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
      if (it.key().rfind("<0x", 0) != 0) vocab[it.key()] = it.value();
    model["vocab"] = vocab;
  }
  json full = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", doc["added_tokens"][model_name]},
               {"model", model}};
  for (const char* k : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) full[k] = v["components"][k];
  return full.dump();
}

class SyntheticParity : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticParity, MatchesHuggingFace) {
  const json* variant = nullptr;
  for (const auto& v : synthetic()["variants"])
    if (v["name"] == GetParam()) variant = &v;
  ASSERT_NE(variant, nullptr);
  auto r = Tokenizer::from_json(variant_tokenizer_json(*variant), "", "", GetParam());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tokenizer& tok = **r;
  for (const auto& c : (*variant)["cases"]) {
    const std::string input = test::case_input(c);
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_special = c.contains("ids_special") ? c["ids_special"].get<std::vector<int32_t>>() : ids;
    const std::string decoded = c.contains("decoded") ? c["decoded"].get<std::string>() : tok::utf8_sanitize(input);
    const std::string decoded_skip = c.contains("decoded_skip") ? c["decoded_skip"].get<std::string>() : decoded;
    const std::string what = GetParam() + " '" + test::printable(input) + "'";
    EXPECT_EQ(tok.encode(input, false), ids) << what;
    EXPECT_EQ(tok.encode(input, true), ids_special) << what;
    EXPECT_EQ(tok.decode(ids_special, false), decoded) << what;
    EXPECT_EQ(tok.decode(ids_special, true), decoded_skip) << what;
  }
  for (const auto& c : (*variant)["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids, false), c["text"].get<std::string>()) << GetParam() << " " << c["ids"].dump();
    EXPECT_EQ(tok.decode(ids, true), c["text_skip"].get<std::string>()) << GetParam() << " " << c["ids"].dump();
  }
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& v : synthetic()["variants"]) names.push_back(v["name"].get<std::string>());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Synthetic, SyntheticParity, ::testing::ValuesIn(variant_names()),
                         [](const auto& info) { return info.param; });

TEST(SyntheticCoverage, EveryComponentKindIsExercised) {
  const std::string all = synthetic()["variants"].dump();
  for (const char* type : {"NFKC",
                           "NFD",
                           "NFKD",
                           "NFC",
                           "Lowercase",
                           "StripAccents",
                           "\"Strip\"",
                           "Prepend",
                           "Replace",
                           "ByteLevel",
                           "\"Split\"",
                           "Metaspace",
                           "Digits",
                           "Punctuation",
                           "\"Whitespace\"",
                           "WhitespaceSplit",
                           "BertPreTokenizer",
                           "TemplateProcessing",
                           "RobertaProcessing",
                           "ByteFallback",
                           "Fuse",
                           "Removed",
                           "Isolated",
                           "MergedWithPrevious",
                           "MergedWithNext",
                           "Contiguous",
                           "\"first\"",
                           "\"never\"",
                           "\"always\""})
    EXPECT_NE(all.find(type), std::string::npos) << type;
}

// ---- UTF-8 helpers -------------------------------------------------------------------------

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  using tok::utf8_sanitize;
  EXPECT_EQ(utf8_sanitize("abc"), "abc");
  EXPECT_EQ(utf8_sanitize("\xff"), "\uFFFD");
  EXPECT_EQ(utf8_sanitize("\xe2\x82"), "\uFFFD");  // truncated sequence: one U+FFFD
  EXPECT_EQ(utf8_sanitize("\xe2\x82x"), "\uFFFDx");
  EXPECT_EQ(utf8_sanitize("\xc0\xaf"), "\uFFFD\uFFFD");            // overlong: each byte
  EXPECT_EQ(utf8_sanitize("\xed\xa0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(utf8_sanitize("\xf4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(utf8_sanitize("\xf0\x9f\x9a\x80"), "\U0001F680");
  EXPECT_TRUE(tok::utf8_is_valid("h\u00e9llo \U0001F680"));
  EXPECT_FALSE(tok::utf8_is_valid("abcdefghij\x80"));
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xe2\x82"), 2u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xe2\x82\xac"), 5u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xf0"), 2u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xff"), 3u);
}

}  // namespace
}  // namespace fg
