// ChatTemplate's model-folder loading: tokenizer_config.json forms (string, list of named
// templates), chat_template.jinja precedence, special tokens (strings or AddedToken objects),
// message normalization, and the reference tokenizer folders (tests/fixtures/tokenizers.tar.xz)
// rendered like transformers' AutoTokenizer.apply_chat_template (expectations in
// tokenizer_configs.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("fg_chat_template_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

const ojson kMessages = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");

TEST(ChatTemplateLoader, ReferenceTokenizerFoldersRenderLikeTransformers) {
  const fs::path root = fs::path(FG_TEST_FIXTURES_DIR) / "tokenizers";
  ASSERT_TRUE(fs::is_directory(root)) << root << " missing: CMake extracts it at configure time";
  const fs::path fixtures = fs::path(FG_SOURCE_DIR) / "tests/fixtures/chat_templates";
  const ojson conv = ojson::parse(slurp(fixtures / "conversations.json"));
  const ojson expect = ojson::parse(slurp(fixtures / "tokenizer_configs.json"));
  ASSERT_FALSE(expect.empty());
  for (auto it = expect.begin(); it != expect.end(); ++it) {
    SCOPED_TRACE(it.key());
    auto ct = ChatTemplate::from_model_dir((root / it.key()).string());
    ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
    EXPECT_EQ(ct->special_tokens(), it.value()["special_tokens"]);
    std::tm now{};
    ASSERT_TRUE(strptime(conv["fixed_now"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &now));
    ct->set_fixed_now(now);  // the reference run pinned strftime_now to this time
    for (const ojson& c : it.value()["cases"]) {
      const std::string label = c["conversation"].get<std::string>();
      auto out = ct->render(conv["conversations"][label], c["tools"].get<bool>() ? conv["tools"] : ojson(nullptr),
                            c["add_generation_prompt"].get<bool>());
      if (c.contains("error")) {
        EXPECT_FALSE(out.is_ok()) << label;
      } else {
        ASSERT_TRUE(out.is_ok()) << label << ": " << out.status().to_string();
        EXPECT_EQ(out.value(), c["output"].get<std::string>()) << label;
      }
    }
  }
  // A folder without a chat template is refused with a message that says what to do.
  auto none = ChatTemplate::from_model_dir((root / "gpt2").string());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("--chat-template"), std::string::npos);
}

TEST(ChatTemplateLoader, ConfigStringAndAddedTokenObjects) {
  TempDir dir;
  spit(dir.path() / "tokenizer_config.json",
       R"({"bos_token": {"content": "<B>", "__type": "AddedToken"}, "eos_token": "<E>", "pad_token": null,
           "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}{{ pad_token is none }}"})");
  auto ct = ChatTemplate::from_model_dir(dir.path().string());
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  auto out = ct->render(kMessages, nullptr, false);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), "<B>[system:S][user:U]<E>False");  // pad_token undefined, not None
}

TEST(ChatTemplateLoader, NamedTemplatesPickToolUseWithTools) {
  TempDir dir;
  spit(dir.path() / "tokenizer_config.json",
       R"({"chat_template": [{"name": "default", "template": "D{{ tools is none }}"},
                             {"name": "tool_use", "template": "T{{ tools | length }}"}]})");
  auto ct = ChatTemplate::from_model_dir(dir.path().string());
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->render(kMessages, nullptr, false).value(), "DTrue");
  EXPECT_EQ(ct->render(kMessages, ojson::parse(R"([{"type": "function"}])"), false).value(), "T1");
}

TEST(ChatTemplateLoader, JinjaFileWinsOverConfigAndOverrideWinsOverBoth) {
  TempDir dir;
  spit(dir.path() / "tokenizer_config.json", R"({"eos_token": "<E>", "chat_template": "config"})");
  spit(dir.path() / "chat_template.jinja", "file{{ eos_token }}\n");
  auto ct = ChatTemplate::from_model_dir(dir.path().string());
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->render(kMessages, nullptr, false).value(), "file<E>");  // one trailing newline dropped
  spit(dir.path() / "other.jinja", "other{{ add_generation_prompt }}");
  auto ov = ChatTemplate::from_model_dir(dir.path().string(), (dir.path() / "other.jinja").string());
  ASSERT_TRUE(ov.is_ok()) << ov.status().to_string();
  EXPECT_EQ(ov->render(kMessages, nullptr, true).value(), "otherTrue");
}

TEST(ChatTemplateLoader, ErrorsAreClear) {
  TempDir dir;
  spit(dir.path() / "tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  auto bad = ChatTemplate::from_model_dir(dir.path().string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("tokenizer_config.json"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ChatTemplate::from_model_dir((dir.path() / "missing").string()).is_ok());

  auto ct = ChatTemplate::from_string("{{ raise_exception('Only user and assistant roles are supported!') }}");
  ASSERT_TRUE(ct.is_ok());
  auto r = ct->render(kMessages, nullptr, false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Only user and assistant roles are supported!"), std::string::npos);
  EXPECT_FALSE(ct->render(ojson::array(), nullptr, false).is_ok());
  EXPECT_FALSE(ct->render(ojson::parse(R"(["not an object"])"), nullptr, false).is_ok());
}

TEST(ChatTemplateLoader, MessagesAreNormalizedLikeTransformers) {
  auto ct = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.keys()|list }}|{{ m.content is defined }}|{{ m.thinking }}{% endfor %}");
  ASSERT_TRUE(ct.is_ok());
  auto out = ct->render(ojson::parse(R"([{"role": "assistant", "content": null, "reasoning_content": "r", "x": 1}])"),
                        nullptr, false);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), "['thinking', 'role', 'reasoning_content', 'x']|False|r");
}

}  // namespace
}  // namespace fg
