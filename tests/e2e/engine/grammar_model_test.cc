// Constrained generation over real models on the CPU (engine/constraint_factory.h): JSON schemas,
// "any JSON object", a regex and a GBNF grammar on the chat fixture model (512-id tokenizer) and,
// when scripts/setup.sh fetched it, the default model (SmolLM2-135M-Instruct): every output is
// accepted by its grammar (JSON parses, required keys are there, the regex matches), greedy
// outputs with jump-forward on and off are the same tokens, and jump-forward runs forced tokens
// as one query (fewer steps, flashgen_jump_forward_tokens counted).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/constraint_factory.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "support/model_test_util.h"
#include "tokenizer/tokenizer.h"

namespace fg {
namespace {

struct Loaded {
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ConstraintFactory> factory;
};

Loaded load(const std::string& model) {
  Loaded l;
  ModelRunnerOptions o;
  o.model_dir = model;
  o.backend = "cpu";
  o.kv_cache_bytes = int64_t(64) << 20;
  auto r = ModelRunner::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return l;
  l.runner = std::move(r).value();
  auto t = Tokenizer::load(model);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return l;
  l.tokenizer = std::move(t).value();
  auto f = ConstraintFactory::create(*l.tokenizer, l.runner->eos_token_ids(), l.runner->vocab_size(), std::nullopt);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (f.is_ok()) l.factory = std::move(f).value();
  return l;
}

struct Case {
  ConstraintSpec spec;
  std::string prompt;
};

// open_ended: include "any JSON object", which a random-weight model need not ever close.
std::vector<Case> cases(bool open_ended) {
  std::vector<Case> out;
  auto add = [&](ConstraintSpec::Kind kind, std::string text, std::string prompt) {
    Case c;
    c.spec.kind = kind;
    c.spec.text = std::move(text);
    c.prompt = std::move(prompt);
    out.push_back(c);
  };
  add(ConstraintSpec::Kind::kJsonSchema,
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer",
          "minimum": 0, "maximum": 130}, "city": {"enum": ["Paris", "Rome", "Oslo"]}}, "required": ["name", "age",
          "city"]})",
      "Give me a person as JSON: ");
  add(ConstraintSpec::Kind::kJsonSchema,
      R"({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties":
          {"id": {"type": "integer"}, "done": {"type": "boolean"}}, "required": ["id", "done"]}, "minItems": 1,
          "maxItems": 3}}, "required": ["items"]})",
      "A todo list in JSON: ");
  if (open_ended) add(ConstraintSpec::Kind::kJsonObject, "", "Any JSON object: ");
  add(ConstraintSpec::Kind::kRegex, R"((yes|no), because [a-z ]{3,20}\.)", "Answer: ");
  add(ConstraintSpec::Kind::kGbnf, "root ::= \"The answer is \" [0-9] [0-9]? \".\"", "Count: ");
  return out;
}

struct Run {
  std::vector<std::vector<int32_t>> ids;
  EngineStats stats;
};

Run run(Loaded& l, const std::vector<Case>& cs, bool jump_forward) {
  EngineCore core(EngineConfig{}, *l.runner);
  std::vector<RequestHandle> handles;
  for (const Case& c : cs) {
    Request r;
    r.prompt_ids = l.tokenizer->encode(c.prompt, true);
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 120;
    auto made = l.factory->make(c.spec);
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    r.constraint = *made;
    r.jump_forward = jump_forward;
    handles.push_back(*core.submit(r));
  }
  while (core.has_work()) EXPECT_TRUE(core.step().is_ok());
  Run out;
  for (auto& h : handles) out.ids.push_back(h.wait().output_ids);
  out.stats = core.stats();
  EXPECT_EQ(out.stats.pages.held, 0);
  return out;
}

void check_model(const std::string& model, bool open_ended) {
  Loaded l = load(model);
  ASSERT_TRUE(l.factory);
  const auto cs = cases(open_ended);
  const Run plain = run(l, cs, false);
  const Run jump = run(l, cs, true);
  ASSERT_EQ(plain.ids.size(), cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_EQ(jump.ids[i], plain.ids[i]) << "jump-forward changed the tokens";
    std::vector<int32_t> text_ids = plain.ids[i];
    const auto eos = l.runner->eos_token_ids();
    ASSERT_FALSE(text_ids.empty());
    ASSERT_NE(std::find(eos.begin(), eos.end(), text_ids.back()), eos.end())
        << "the grammar should end the output with eos within 120 tokens";
    text_ids.pop_back();
    const std::string decoded = l.tokenizer->decode(text_ids, true);
    const std::string* text = &decoded;
    switch (cs[i].spec.kind) {
      case ConstraintSpec::Kind::kJsonSchema:
      case ConstraintSpec::Kind::kJsonObject: {
        nlohmann::json j;
        ASSERT_NO_THROW(j = nlohmann::json::parse(*text)) << *text;
        ASSERT_TRUE(j.is_object()) << *text;
        if (i == 0) {
          EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 12) << *text;
          EXPECT_TRUE(j["age"].is_number_integer() && j["age"] >= 0 && j["age"] <= 130) << *text;
          const std::string city = j["city"];
          EXPECT_TRUE(city == "Paris" || city == "Rome" || city == "Oslo") << *text;
        }
        if (i == 1) {
          ASSERT_TRUE(j["items"].is_array()) << *text;
          EXPECT_GE(j["items"].size(), 1u);
          EXPECT_LE(j["items"].size(), 3u);
          for (const auto& it : j["items"]) EXPECT_TRUE(it["id"].is_number_integer() && it["done"].is_boolean());
        }
        break;
      }
      case ConstraintSpec::Kind::kRegex:
        EXPECT_TRUE(std::regex_match(*text, std::regex(cs[i].spec.text))) << *text;
        break;
      case ConstraintSpec::Kind::kGbnf:
        EXPECT_TRUE(std::regex_match(*text, std::regex("The answer is [0-9][0-9]?\\."))) << *text;
        break;
      default: break;
    }
  }
  EXPECT_GT(jump.stats.jump_forward_tokens, 0);
  EXPECT_EQ(jump.stats.generated_tokens, plain.stats.generated_tokens);
  EXPECT_LT(jump.stats.steps, plain.stats.steps);
}

TEST(GrammarModel, FixtureModelOutputsFollowTheirGrammars) {
  check_model(test::model_fixture("chat_llama"), false);
}

TEST(GrammarModel, DefaultModelOutputsFollowTheirGrammars) {
  const std::string model = std::string(FG_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not found: run ./scripts/setup.sh to fetch it";
  check_model(model, true);
}

TEST(GrammarModel, BadSpecsAreRefusedForTheClient) {
  Loaded l = load(test::model_fixture("chat_llama"));
  ASSERT_TRUE(l.factory);
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kJsonSchema;
  s.text = R"({"type": "object", "not": {"type": "null"}})";
  auto r = l.factory->make(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'not'"), std::string::npos) << r.status().message();
  s.text = "{not json";
  EXPECT_FALSE(l.factory->make(s).is_ok());
  s.kind = ConstraintSpec::Kind::kRegex;
  s.text = "(a";
  EXPECT_FALSE(l.factory->make(s).is_ok());
  s.kind = ConstraintSpec::Kind::kToolCalls;
  s.text = "[]";
  r = l.factory->make(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tool"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace fg
