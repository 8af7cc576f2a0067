// The reasoning splitter (server/reasoning.h): whole outputs and outputs fed in every cut, blocks
// opened by the prompt, outputs without a block, cut-off blocks, held-back marker beginnings and
// UTF-8; and the real chat templates of tests/fixtures/chat_templates: which speak of reasoning,
// and whose generation prompts open a block.
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "server/utf8.h"

namespace fg::server {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
  bool saw = false;
};

// Feeds `text` in pieces of `step` bytes (0: whole), checking that each piece gives out whole
// characters.
Split split(std::string_view text, bool starts_inside, size_t step = 0) {
  ReasoningSplitter s(ReasoningMarkers{}, starts_inside);
  Split out;
  if (step == 0) step = std::max<size_t>(text.size(), 1);
  for (size_t at = 0; at < text.size(); at += step) {
    const ReasoningSplitter::Piece p = s.feed(text.substr(at, step));
    // What goes out early is whole characters and never the beginning of a marker.
    EXPECT_TRUE(is_valid_utf8(p.reasoning)) << "piece of " << text;
    EXPECT_TRUE(is_valid_utf8(p.content)) << "piece of " << text;
    out.reasoning += p.reasoning;
    out.content += p.content;
  }
  const ReasoningSplitter::Piece last = s.finish();
  out.reasoning += last.reasoning;
  out.content += last.content;
  out.saw = s.saw_reasoning();
  return out;
}

TEST(ReasoningSplitter, BlockThenContentWhateverTheCuts) {
  const std::string out = "<think>\nFirst 2, then 3.\n\nSo 5.\n</think>\n\nThe answer is 5.";
  for (size_t step : {0, 1, 2, 3, 5, 7}) {
    const Split s = split(out, false, step);
    EXPECT_EQ(s.reasoning, "First 2, then 3.\n\nSo 5.") << "step " << step;
    EXPECT_EQ(s.content, "The answer is 5.") << "step " << step;
    EXPECT_TRUE(s.saw);
  }
  // Leading space before the block is allowed.
  EXPECT_EQ(split("\n <think>a</think>b", false).reasoning, "a");
  EXPECT_EQ(split("\n <think>a</think>b", false).content, "b");
}

TEST(ReasoningSplitter, PromptOpenedBlock) {
  for (size_t step : {0, 1, 4}) {
    const Split s = split("Let me see: 2 < 3.\n</think>\n\nYes.", true, step);
    EXPECT_EQ(s.reasoning, "Let me see: 2 < 3.") << "step " << step;
    EXPECT_EQ(s.content, "Yes.");
    EXPECT_TRUE(s.saw);
  }
  // A start marker inside an opened block is reasoning text, not a new block.
  EXPECT_EQ(split("a <think> b</think>c", true).reasoning, "a <think> b");
}

TEST(ReasoningSplitter, OutputWithoutABlockIsContentUntouched) {
  for (const std::string out : {"  Hello.\n", "Hello <think>x</think>", "<thinking>x</thinking>", "<th", "", " \n"}) {
    for (size_t step : {0, 1}) {
      const Split s = split(out, false, step);
      EXPECT_EQ(s.content, out) << "step " << step;
      EXPECT_EQ(s.reasoning, "");
      EXPECT_FALSE(s.saw) << out;
    }
  }
}

TEST(ReasoningSplitter, CutOffBlockIsAllReasoning) {
  for (size_t step : {0, 1}) {
    const Split s = split("<think>\nStill thinking </thi", false, step);
    EXPECT_EQ(s.reasoning, "Still thinking </thi");
    EXPECT_EQ(s.content, "");
    EXPECT_TRUE(s.saw);
  }
  const Split empty = split("<think>\n\n</think>\n\nHi", false);  // an empty block (thinking off)
  EXPECT_TRUE(empty.saw);
  EXPECT_EQ(empty.reasoning, "");
  EXPECT_EQ(empty.content, "Hi");
}

TEST(ReasoningSplitter, HoldsBackWhatMayStillBeAMarker) {
  ReasoningSplitter s(ReasoningMarkers{}, true);
  EXPECT_EQ(s.feed("abc </th").reasoning, "abc");  // " </th" may still close the block
  EXPECT_EQ(s.feed("ink>x").content, "x");
  ReasoningSplitter leading(ReasoningMarkers{}, false);
  const ReasoningSplitter::Piece p = leading.feed(" <thin");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(leading.feed("g>").content, " <thing>");  // not the marker after all
}

TEST(ReasoningSplitter, MultiByteCharactersSplitAcrossPieces) {
  const std::string out = "<think>é 한국어 👩‍💻</think>ü 日本";
  const Split s = split(out, false, 1);  // every character cut at every byte
  EXPECT_EQ(s.reasoning, "é 한국어 👩‍💻");
  EXPECT_EQ(s.content, "ü 日本");
}

TEST(ReasoningSplitter, OtherMarkers) {
  ReasoningSplitter s(ReasoningMarkers{"[THINK]", "[/THINK]"}, false);
  ReasoningSplitter::Piece p = s.feed("[THINK]x[/THINK]y");
  const ReasoningSplitter::Piece rest = s.finish();
  EXPECT_EQ(p.reasoning + rest.reasoning, "x");
  EXPECT_EQ(p.content + rest.content, "y");
}

// A template's expected renders (tests/fixtures/chat_templates/NAME.json: "template", the file's
// name in the extracted fixture archive, and "cases").
nlohmann::json fixture(const std::string& name) {
  std::ifstream f(std::filesystem::path(FG_SOURCE_DIR) / "tests/fixtures/chat_templates" / (name + ".json"));
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

std::string template_source(const std::string& name) {
  std::ifstream f(std::filesystem::path(FG_TEST_FIXTURES_DIR) / "chat_templates" /
                  fixture(name)["template"].get<std::string>());
  EXPECT_TRUE(f.good()) << name;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ReasoningTemplates, ThinkingModelsTemplatesSpeakOfReasoning) {
  for (const char* name : {"Qwen-Qwen3-0.6B", "Qwen-QwQ-32B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                           "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "HuggingFaceTB-SmolLM3-3B"})
    EXPECT_TRUE(template_has_reasoning(template_source(name))) << name;
  for (const char* name : {"meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen2.5-7B-Instruct", "google-gemma-2-2b-it"})
    EXPECT_FALSE(template_has_reasoning(template_source(name))) << name;
}

TEST(ReasoningTemplates, GenerationPromptsThatOpenABlock) {
  // DeepSeek-R1's generation prompt opens the block; Qwen3's does not, and with thinking off it
  // writes an empty, closed one.
  int r1_open = 0;
  const nlohmann::json r1 = fixture("deepseek-ai-DeepSeek-R1-Distill-Llama-8B");
  for (const auto& c : r1["cases"]) {
    // (conversations that end with a tool's answer have no generation prompt after it)
    if (!c.contains("output") || !c["add_generation_prompt"].get<bool>() ||
        c["conversation"].get<std::string>().starts_with("tool_call"))
      continue;
    EXPECT_TRUE(prompt_opens_reasoning(c["output"].get<std::string>())) << c["conversation"];
    ++r1_open;
  }
  EXPECT_GT(r1_open, 3);
  int qwen = 0;
  const nlohmann::json qwen3 = fixture("Qwen-Qwen3-0.6B");
  for (const auto& c : qwen3["cases"]) {
    if (!c.contains("output")) continue;
    EXPECT_FALSE(prompt_opens_reasoning(c["output"].get<std::string>())) << c["conversation"];
    ++qwen;
  }
  EXPECT_GT(qwen, 5);
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
}

}  // namespace
}  // namespace fg::server
