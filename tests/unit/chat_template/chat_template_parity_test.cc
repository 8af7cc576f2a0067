// Every template of tests/fixtures/chat_templates.tar.xz renders the conversations of
// tests/fixtures/chat_templates/conversations.json byte for byte as Jinja2/transformers did
// (expectations made by tools/make_template_fixtures.py); where the reference raised, flashgen
// must fail too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kExpectDir = fs::path(FG_SOURCE_DIR) / "tests/fixtures/chat_templates";
// The templates themselves: the archive, extracted into the build tree at configure time.
const fs::path kTemplateDir = fs::path(FG_TEST_FIXTURES_DIR) / "chat_templates";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> expectation_files() {
  std::vector<std::string> names;
  if (!fs::is_directory(kExpectDir)) return names;
  for (const auto& e : fs::directory_iterator(kExpectDir)) {
    std::string n = e.path().filename().string();
    if (e.path().extension() == ".json" && n != "conversations.json" && n != "tokenizer_configs.json")
      names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string n;
  for (char c : info.param.substr(0, info.param.size() - 5))
    n.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return n;
}

class ChatTemplateParity : public testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateParity, RendersLikeTransformers) {
  const ojson conv = ojson::parse(slurp(kExpectDir / "conversations.json"));
  const ojson expect = ojson::parse(slurp(kExpectDir / GetParam()));
  const fs::path tpl_path = kTemplateDir / expect["template"].get<std::string>();
  ASSERT_TRUE(fs::exists(tpl_path)) << tpl_path;

  auto ct = ChatTemplate::from_string(slurp(tpl_path), conv["special_tokens"]);
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  std::tm now{};
  ASSERT_TRUE(strptime(conv["fixed_now"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &now));
  ct->set_fixed_now(now);

  int checked = 0;
  for (const ojson& c : expect["cases"]) {
    const std::string label = c["conversation"].get<std::string>() +
                              (c["add_generation_prompt"].get<bool>() ? " +gen" : "") +
                              (c["extra"].empty() ? "" : " " + c["extra"].dump());
    const ojson tools = c["tools"].get<bool>() ? conv["tools"] : ojson(nullptr);
    auto out = ct->render(conv["conversations"][c["conversation"].get<std::string>()], tools,
                          c["add_generation_prompt"].get<bool>(), c["extra"]);
    if (c.contains("error")) {
      ASSERT_FALSE(out.is_ok()) << label << ": the reference raised " << c["error"] << " but flashgen rendered:\n"
                                << out.value();
      // The failure must be of the same kind, and raise_exception's message must match.
      const std::string ref = c["error"].get<std::string>();
      const std::string& got = out.status().message();
      const std::string kinds[][2] = {{"TemplateError: ", "template error"},
                                      {"UndefinedError: ", "undefined value"},
                                      {"TypeError: ", "type error"},
                                      {"SecurityError: ", "sandbox violation"}};
      for (const auto& [py, ours] : kinds) {
        if (ref.rfind(py, 0) != 0) continue;
        EXPECT_NE(got.find(ours), std::string::npos) << label << ": reference " << ref << ", flashgen " << got;
        if (py == kinds[0][0]) {
          EXPECT_NE(got.find(ref.substr(py.size())), std::string::npos) << label << ": " << got;
        }
      }
    } else {
      ASSERT_TRUE(out.is_ok()) << label << ": " << out.status().to_string();
      EXPECT_EQ(out.value(), c["output"].get<std::string>()) << label;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateParity, testing::ValuesIn(expectation_files()), test_name);

TEST(ChatTemplateParityCoverage, EveryFixtureTemplateHasExpectations) {
  ASSERT_TRUE(fs::is_directory(kTemplateDir)) << kTemplateDir << " missing: CMake extracts it at configure time";
  int templates = 0;
  for (const auto& e : fs::directory_iterator(kTemplateDir)) {
    if (e.path().extension() != ".jinja") continue;
    ++templates;
    fs::path want = kExpectDir / (e.path().stem().string() + ".json");
    EXPECT_TRUE(fs::exists(want)) << "no expectations for " << e.path().filename()
                                  << "; run tools/make_template_fixtures.py";
  }
  EXPECT_EQ(templates, int(expectation_files().size()));
}

}  // namespace
}  // namespace fg
