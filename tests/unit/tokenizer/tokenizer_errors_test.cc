// Load errors: missing files, corrupt JSON and unsupported components give a Status whose
// code and message say what is wrong and where.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace fg {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() / ("fg_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// A minimal valid byte-level tokenizer.json with `override` merged at the top level.
std::string tiny_tokenizer(const nlohmann::json& override = nlohmann::json::object()) {
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
                      {"added_tokens", nlohmann::json::array()},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", nullptr},
                      {"post_processor", nullptr},
                      {"decoder", nullptr}};
  j.merge_patch(override);
  return j.dump();
}

TEST(TokenizerErrors, MissingFolderOrFile) {
  auto r = Tokenizer::load("/nonexistent/model/dir");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/model/dir"), std::string::npos);

  TempDir dir;
  r = Tokenizer::load(dir.str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos) << r.status().message();
}

TEST(TokenizerErrors, CorruptJsonNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  auto r = Tokenizer::load(dir.str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(dir.str() + "/tokenizer.json"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("invalid JSON"), std::string::npos);

  dir.write("tokenizer.json", tiny_tokenizer());
  dir.write("tokenizer_config.json", "{not json");
  r = Tokenizer::load(dir.str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos) << r.status().message();
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  struct Case {
    nlohmann::json patch;
    std::string name;
  };
  const Case cases[] = {
      {{{"model", {{"type", "WordPiece"}}}}, "WordPiece"},
      {{{"model", {{"type", "Unigram"}}}}, "Unigram"},
      {{{"normalizer", {{"type", "Precompiled"}}}}, "Precompiled"},
      {{{"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "BertNormalizer"}}}}}}}, "BertNormalizer"},
      {{{"pre_tokenizer", {{"type", "UnicodeScripts"}}}}, "UnicodeScripts"},
      {{{"decoder", {{"type", "WordPiece"}}}}, "WordPiece"},
      {{{"post_processor", {{"type", "SomethingNew"}}}}, "SomethingNew"},
  };
  for (const auto& c : cases) {
    auto r = Tokenizer::from_json(tiny_tokenizer(c.patch), "", "", "t.json");
    ASSERT_FALSE(r.is_ok()) << c.name;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported) << r.status().to_string();
    EXPECT_NE(r.status().message().find("'" + c.name + "'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("t.json"), std::string::npos) << r.status().message();
  }
}

TEST(TokenizerErrors, InconsistentContents) {
  auto r = Tokenizer::from_json(tiny_tokenizer({{"model", {{"merges", {"a c"}}}}}), "", "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'c'"), std::string::npos) << r.status().message();

  r = Tokenizer::from_json(tiny_tokenizer({{"model", {{"merges", {"a b c"}}}}}), "", "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("merge 1"), std::string::npos) << r.status().message();

  r = Tokenizer::from_json(
      tiny_tokenizer(
          {{"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}}}),
      "", "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("(unclosed"), std::string::npos) << r.status().message();

  r = Tokenizer::from_json(tiny_tokenizer({{"model", {{"dropout", 0.1}}}}), "", "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
}

// A vocabulary whose ids are far sparser than its entries is refused before its id table is
// sized (one id of 10^9 once asked for gigabytes; found by the tokenizer_json fuzz target, input in
// fuzz/regressions/tokenizer_json/). Dense ids with a few holes still load.
TEST(TokenizerErrors, SparseVocabularyIdsAreRefused) {
  auto r = Tokenizer::from_json(tiny_tokenizer({{"model", {{"vocab", {{"a", 0}, {"b", 1}, {"ab", 1000000000}}}}}}), "",
                                "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("1000000000"), std::string::npos) << r.status().message();
  EXPECT_TRUE(
      Tokenizer::from_json(tiny_tokenizer({{"model", {{"vocab", {{"a", 0}, {"b", 1}, {"ab", 7}}}}}}), "", "", "t.json")
          .is_ok());
}

// A post-processor that adds a token id the vocabulary does not have is refused at load, naming
// the id (it once loaded, and encode() then returned ids past vocab_size(); found by the
// tokenizer_json fuzz target, input in fuzz/regressions/tokenizer_json/).
TEST(TokenizerErrors, PostProcessorIdsMustBeInTheVocabulary) {
  const nlohmann::json pp = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", nlohmann::json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {3}}, {"tokens", {"<s>"}}}}}}};
  auto r = Tokenizer::from_json(tiny_tokenizer({{"post_processor", pp}}), "", "", "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 3"), std::string::npos) << r.status().message();
  // With the token added, the same template loads and its id is in range.
  nlohmann::json with_added = {{"post_processor", pp},
                               {"added_tokens",
                                {{{"id", 3},
                                  {"content", "<s>"},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", false},
                                  {"special", true}}}}};
  auto ok = Tokenizer::from_json(tiny_tokenizer(with_added), "", "", "t.json");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  const std::vector<int32_t> ids = (*ok)->encode("ab", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 3);
  for (int32_t id : ids) EXPECT_LT(id, (*ok)->vocab_size());
}

TEST(TokenizerErrors, ConfigFilesAreOptionalAndRead) {
  TempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer({{"added_tokens",
                                               {{{"id", 3}, {"content", "<s>"}, {"special", true}},
                                                {{"id", 4}, {"content", "</s>"}, {"special", true}},
                                                {{"id", 5}, {"content", "<eot>"}, {"special", true}}}}}));
  auto r = Tokenizer::load(dir.str());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->bos_id(), -1);
  EXPECT_TRUE((*r)->eos_ids().empty());
  EXPECT_EQ((*r)->encode("ab", true), std::vector<int32_t>{2});

  dir.write("tokenizer_config.json",
            R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": true, "add_eos_token": true})");
  dir.write("generation_config.json", R"({"eos_token_id": [5, 4]})");
  r = Tokenizer::load(dir.str());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->bos_id(), 3);
  EXPECT_EQ((*r)->eos_ids(), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ((*r)->encode("ab", true), (std::vector<int32_t>{3, 2, 4}));
  EXPECT_EQ((*r)->encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_EQ((*r)->vocab_size(), 6);

  // The tokenizer.json file itself is accepted in place of the folder.
  r = Tokenizer::load(dir.str() + "/tokenizer.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->bos_id(), 3);
}

}  // namespace
}  // namespace fg
