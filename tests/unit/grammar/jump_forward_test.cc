// Jump-forward: the ids fed for forced text are exactly what the tokenizer gives for the whole
// text, at every point of real outputs, with Llama 3's tokenizer (and SmolLM2's when the default
// model is present); forced bytes that would merge into an emitted token are left to the model.
#include "grammar/jump_forward.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace fg::grammar {
namespace {

const char* kOrderSchema = R"({"type": "object", "properties": {
  "id": {"type": "string", "format": "uuid"}, "kind": {"const": "order"},
  "customer": {"type": "object", "properties": {"name": {"type": "string"}, "tier": {"enum": ["free", "premium"]}},
               "required": ["name", "tier"]},
  "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
            "qty": {"type": "integer"}}, "required": ["sku", "qty"]}, "minItems": 1},
  "created": {"type": "string", "format": "date-time"}},
  "required": ["id", "kind", "customer", "lines", "created"]})";

const std::vector<std::string> kDocs = {
    R"({"id": "3f2b8c1e-9a4d-4e6b-8f0a-1c2d3e4f5a6b", "kind": "order", "customer": {"name": "Maria", "tier": "premium"}, "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-22", "qty": 10}], "created": "2024-03-15T14:22:05Z"})",
    R"({"id": "00000000-1111-4222-8333-444455556666", "kind": "order", "customer": {"name": "Jürgen Müller", "tier": "free"}, "lines": [{"sku": "TEA", "qty": 1}], "created": "2023-12-01T08:00:00+01:00"})",
};

struct Counts {
  int points = 0, forced = 0, fed = 0, skipped = 0;
};

// At every token boundary of each document: emit the tokenizer's ids for the prefix, ask for
// jump-forward ids, and compare emitted + ids with the tokenizer's ids for the whole text.
Counts check_documents(const Tokenizer& tok, const std::shared_ptr<const TokenGrammar>& tg,
                       const std::vector<std::string>& docs) {
  Counts c;
  for (const std::string& doc : docs) {
    const std::vector<int32_t> doc_ids = tok.encode(doc, false);
    std::string prefix;
    for (size_t i = 0; i <= doc_ids.size(); ++i) {
      if (i > 0) prefix += tok.token_bytes(doc_ids[i - 1]);
      const std::vector<int32_t> emitted = tok.encode(prefix, false);
      GrammarMatcher m(tg);
      bool ok = true;
      for (int32_t id : emitted) ok = ok && m.accept_token(id);
      if (!ok) continue;  // the prefix re-encodes into ids the grammar cannot follow one by one
      ++c.points;
      const std::string forced = m.forced_continuation();
      if (forced.empty()) continue;
      ++c.forced;
      const ForcedTokens f = jump_forward_tokens(m, tok, emitted);
      EXPECT_EQ(m.num_tokens(), int(emitted.size()));  // unchanged
      if (f.skipped_bytes > 0) {
        ++c.skipped;
        EXPECT_TRUE(f.ids.empty());
        continue;
      }
      if (f.ids.empty()) continue;
      ++c.fed;
      std::vector<int32_t> whole = emitted;
      whole.insert(whole.end(), f.ids.begin(), f.ids.end());
      EXPECT_EQ(whole, tok.encode(prefix + forced.substr(0, f.bytes), false))
          << "prefix '" << prefix << "' forced '" << forced << "'";
      for (int32_t id : f.ids) EXPECT_TRUE(m.accept_token(id));
    }
  }
  return c;
}

std::shared_ptr<const TokenGrammar> bind(const Tokenizer& tok, Result<Grammar> g) {
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  auto vocab = GrammarVocab::build(tok);
  EXPECT_TRUE(vocab.is_ok());
  return TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), *vocab);
}

TEST(JumpForward, RetokenizedIdsEqualTheTokenizersLlama3) {
  auto tok = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
  ASSERT_TRUE(tok.is_ok());
  const Counts c = check_documents(**tok, bind(**tok, compile_json_schema(std::string_view(kOrderSchema))), kDocs);
  EXPECT_GT(c.points, 60);
  EXPECT_GT(c.fed, 10);  // forced keys and constants really are fed as ids
  std::printf("llama3: %d points, %d forced, %d fed, %d left to the model\n", c.points, c.forced, c.fed, c.skipped);
}

TEST(JumpForward, BytesThatMergeIntoTheLastTokenAreLeftToTheModel) {
  // After an emitted "{" the grammar forces "\"id\": \"", but the tokenizer writes "{\"" as one
  // token: the quote is left for the model, and the rest only fits after it.
  auto tok = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
  ASSERT_TRUE(tok.is_ok());
  auto tg = bind(**tok, compile_json_schema(std::string_view(kOrderSchema)));
  GrammarMatcher m(tg);
  const std::vector<int32_t> emitted = (*tok)->encode("{", false);
  ASSERT_EQ(emitted.size(), 1u);
  ASSERT_TRUE(m.accept_token(emitted[0]));
  const std::string forced = m.forced_continuation();
  EXPECT_EQ(forced, "\"id\": \"");
  ASSERT_EQ((*tok)->encode("{\"", false).size(), 1u);
  const ForcedTokens f = forced_token_ids(**tok, emitted, forced);
  EXPECT_EQ(f.skipped_bytes, 1u);
  EXPECT_FALSE(f.ids.empty());
  const ForcedTokens j = jump_forward_tokens(m, **tok, emitted);
  EXPECT_EQ(j.skipped_bytes, 1u);
  EXPECT_TRUE(j.ids.empty());  // nothing to feed until the model writes the quote
}

TEST(JumpForward, RetokenizedIdsEqualTheTokenizersSmolLM2) {
  const std::string model = std::string(FG_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "default model not fetched (scripts/fetch-model.sh)";
  auto tok = Tokenizer::load(model);
  ASSERT_TRUE(tok.is_ok());
  const Counts c = check_documents(**tok, bind(**tok, compile_json_schema(std::string_view(kOrderSchema))), kDocs);
  EXPECT_GT(c.fed, 10);
}

TEST(JumpForward, ToolCallNamesAreForced) {
  auto tok = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
  ASSERT_TRUE(tok.is_ok());
  ToolCallOptions o;
  o.named_tool = "get_weather";
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  auto tg = bind(**tok, tool_call_grammar(tools, o));
  GrammarMatcher m(tg);
  EXPECT_EQ(m.forced_continuation(), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"");
  const ForcedTokens f = jump_forward_tokens(m, **tok, {});
  ASSERT_FALSE(f.ids.empty());
  EXPECT_EQ(f.skipped_bytes, 0u);
  // Held back: the last token (it may merge with the city's first letters).
  std::string spelled;
  for (int32_t id : f.ids) spelled += (*tok)->token_bytes(id);
  EXPECT_EQ(spelled.size(), f.bytes);
  EXPECT_LT(f.bytes, m.forced_continuation().size());
  EXPECT_EQ(f.ids, (*tok)->encode(spelled, false));
}

TEST(JumpForward, TextThatEndsTheGrammarIsFedWhole) {
  auto tok = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
  ASSERT_TRUE(tok.is_ok());
  auto tg = bind(**tok, compile_json_schema(std::string_view(R"({"const": {"status": "ok", "code": 200}})")));
  GrammarMatcher m(tg);
  const ForcedTokens f = jump_forward_tokens(m, **tok, {});
  EXPECT_EQ(f.bytes, std::string(R"({"status": "ok", "code": 200})").size());
  EXPECT_EQ(f.ids, (*tok)->encode(R"({"status": "ok", "code": 200})", false));
  for (int32_t id : f.ids) ASSERT_TRUE(m.accept_token(id));
  EXPECT_TRUE(m.is_terminated());
}

}  // namespace
}  // namespace fg::grammar
