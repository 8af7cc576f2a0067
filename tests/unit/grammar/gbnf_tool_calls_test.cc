// GBNF front end (syntax, errors) and tool calls: format detection on real chat templates,
// grammars whose outputs parse back into calls with arguments that follow the schemas, the
// parser on hand-written outputs, and Mistral's special [TOOL_CALLS] token used as grammar text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "grammar/tool_calls.h"
#include "grammar_test_util.h"
#include "tokenizer/tokenizer.h"

namespace fg::grammar {
namespace {

using test::byte_vocab;

bool matches(const Result<Grammar>& g, const std::string& text) {
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  GrammarMatcher m(TokenGrammar::build(std::make_shared<const Grammar>(g.value()), byte_vocab()));
  return (text.empty() || m.accept_bytes(text)) && m.accepted();
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Gbnf, SyntaxAndSemantics) {
  const auto g = compile_gbnf(R"(# comment
root ::= greeting ( ", " name )? "!"   # trailing comment
greeting ::= "hi" | "hello"
name ::=
  [A-Z] [a-z]{1,3}
  | "\u00c9" [^\n!,]+
)");
  for (const char* s : {"hi!", "hello, Bob!", "hi, \xC3\x89z\xC3\xA9!"}) EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s : {"hi", "hey!", "hi, Bobby!", "hi, \xC3\x89!"}) EXPECT_FALSE(matches(g, s)) << s;
  EXPECT_TRUE(matches(compile_gbnf("root ::= \"\\x41\\t\" [\\]\\-] .{2}"), "A\t-\xE2\x82\xAC!"));
}

TEST(Gbnf, Errors) {
  auto code = [](const char* text) { return compile_gbnf(text).status(); };
  EXPECT_NE(code("root ::= a").message().find("undefined rule 'a'"), std::string::npos);
  EXPECT_NE(code("start ::= \"x\"").message().find("no 'root'"), std::string::npos);
  EXPECT_NE(code("root ::= \"a\"\nroot ::= \"b\"").message().find("defined twice"), std::string::npos);
  EXPECT_NE(code("root ::= root \"a\" | \"b\"").message().find("left recursion"), std::string::npos);
  EXPECT_NE(code("root ::= \"a").message().find("line 1"), std::string::npos);
  EXPECT_NE(code("root ::= \"a\"\nx ::= [b").message().find("line 2"), std::string::npos);
  EXPECT_EQ(code("root ::= <[1000]>").code(), ErrorCode::kUnsupported);
  EXPECT_EQ(code("root ::= \"a\"{3,1}").code(), ErrorCode::kInvalidArgument);
}

TEST(ToolCalls, DetectsFormatsFromChatTemplates) {
  const std::string dir = std::string(FG_TEST_FIXTURES_DIR) + "/chat_templates/";
  const std::vector<std::pair<std::string, std::optional<ToolCallFormat>>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"GLM-4.6.jinja", std::nullopt},      // <tool_call>name<arg_key>...: another format
      {"Qwen3-Coder.jinja", std::nullopt},  // <tool_call><function=...>: another format
  };
  for (const auto& [file, want] : cases) {
    const std::string t = read(dir + file);
    ASSERT_FALSE(t.empty()) << file;
    EXPECT_EQ(detect_tool_call_format(t), want) << file;
  }
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
    "additionalProperties": false}}},
  {"name": "now"}
])";

TEST(ToolCalls, GrammarOutputsParseIntoValidCalls) {
  auto tok = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
  ASSERT_TRUE(tok.is_ok());
  auto vocab = GrammarVocab::build(**tok);
  ASSERT_TRUE(vocab.is_ok());
  const auto tools = nlohmann::ordered_json::parse(kTools);
  std::mt19937 rng(3);
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (const std::string named : {"", "add"}) {
      ToolCallOptions o;
      o.format = f;
      o.named_tool = named;
      auto g = tool_call_grammar(tools, o);
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      auto tg = TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), *vocab);
      for (int w = 0; w < 6; ++w) {
        GrammarMatcher m(tg);
        test::WalkOptions wo;
        wo.check_probability = 0.02;
        const auto r = test::random_walk(m, rng, wo);
        ASSERT_EQ(r.error, "");
        ASSERT_TRUE(r.ended) << r.text;
        const ParsedToolCalls p = parse_tool_calls(r.text, f);
        ASSERT_FALSE(p.calls.empty()) << tool_call_format_name(f) << ": " << r.text;
        EXPECT_EQ(p.content, "") << r.text;
        if (f == ToolCallFormat::kLlama3Json) {
          EXPECT_EQ(p.calls.size(), 1u);
        }
        for (const ToolCall& c : p.calls) {
          if (!named.empty()) {
            EXPECT_EQ(c.name, named);
          }
          const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
          ASSERT_TRUE(args.is_object()) << c.arguments;
          if (c.name == "add") {
            EXPECT_TRUE(args.contains("a") && args["a"].is_number_integer()) << c.arguments;
            EXPECT_TRUE(args.contains("b") && args["b"].is_number_integer()) << c.arguments;
            EXPECT_EQ(args.size(), 2u);
          } else if (c.name == "get_weather") {
            EXPECT_TRUE(args.contains("city") && args["city"].is_string()) << c.arguments;
            if (args.contains("unit")) {
              EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
            }
          } else {
            EXPECT_EQ(c.name, "now");
            EXPECT_TRUE(args.empty());
          }
        }
      }
    }
  }
  ToolCallOptions bad;
  bad.named_tool = "missing";
  EXPECT_EQ(tool_call_grammar(tools, bad).status().code(), ErrorCode::kInvalidArgument);
  const auto unsupported_tool = nlohmann::ordered_json::parse(
      R"([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"not": {}}}}}])");
  const Status st = tool_call_grammar(unsupported_tool, {}).status();
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("tool 'f'"), std::string::npos);
  EXPECT_NE(st.message().find("'not'"), std::string::npos);
}

TEST(ToolCalls, ParsesModelOutputs) {
  auto h = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": {\"a\": 1, \"b\": 2}, \"name\": \"add\"}\n</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.content, "Let me check.");
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(h.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(h.calls[1].name, "add");
  auto broken =
      parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call> tail", ToolCallFormat::kHermes);
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call> tail");
  auto l = parse_tool_calls("<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
                            ToolCallFormat::kLlama3Json);
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"a":1,"b":2})");
  EXPECT_EQ(parse_tool_calls("The answer is {not a call}.", ToolCallFormat::kLlama3Json).content,
            "The answer is {not a call}.");
  auto mi = parse_tool_calls(
      "Sure. [TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"now\", "
      "\"arguments\": {}}]",
      ToolCallFormat::kMistral);
  ASSERT_EQ(mi.calls.size(), 2u);
  EXPECT_EQ(mi.content, "Sure.");
  EXPECT_EQ(mi.calls[1].name, "now");
  EXPECT_EQ(mi.calls[1].arguments, "{}");
}

TEST(ToolCalls, MistralMarkerIsASpecialTokenUsedAsText) {
  // A tokenizer with [TOOL_CALLS] as a special token: excluded from text unless the vocabulary is
  // bound with tool_call_text_tokens(kMistral).
  std::string tokenizer_json = read(std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/chat_llama/tokenizer.json");
  auto doc = nlohmann::json::parse(tokenizer_json);
  doc["added_tokens"].push_back({{"id", 512},
                                 {"content", "[TOOL_CALLS]"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  auto tok = Tokenizer::from_documents(doc, nullptr, nullptr, "mistral-like");
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const int32_t marker = (*tok)->id_of("[TOOL_CALLS]");
  ASSERT_EQ(marker, 512);
  ToolCallOptions o;
  o.format = ToolCallFormat::kMistral;
  auto g = tool_call_grammar(nlohmann::ordered_json::parse(kTools), o);
  ASSERT_TRUE(g.is_ok());
  auto grammar = std::make_shared<const Grammar>(std::move(g).value());
  GrammarVocabOptions vo;
  vo.eos_ids = {0};
  auto plain = GrammarVocab::build(**tok, vo);
  vo.special_tokens_as_text = tool_call_text_tokens(ToolCallFormat::kMistral);
  auto with_marker = GrammarVocab::build(**tok, vo);
  ASSERT_TRUE(plain.is_ok() && with_marker.is_ok());
  GrammarMatcher a(TokenGrammar::build(grammar, *plain)), b(TokenGrammar::build(grammar, *with_marker));
  EXPECT_FALSE(a.accept_token(marker));
  EXPECT_TRUE(b.accept_token(marker));
  EXPECT_TRUE(test::mask_matches_brute_force(b));
  EXPECT_EQ(b.forced_continuation(), "[{\"name\": \"");
}

}  // namespace
}  // namespace fg::grammar
