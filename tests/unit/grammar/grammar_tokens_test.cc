// The grammar layer with real tokenizers (Llama 3's 128k vocabulary from the fixture archive):
// characters split across byte tokens, tokens that span terminals, every mask along a real
// output against trying each token, special tokens, EOS, rollback.
#include <gtest/gtest.h>

#include <thread>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"
#include "grammar_test_util.h"
#include "tokenizer/tokenizer.h"

namespace fg::grammar {
namespace {

using test::mask_bit;

const Tokenizer& llama3() {
  static const std::unique_ptr<Tokenizer> t = [] {
    auto r = Tokenizer::load(std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers/llama-3-8b-instruct");
    FG_CHECK(r.is_ok(), r.status().to_string());
    return std::move(r).value();
  }();
  return *t;
}

std::shared_ptr<const GrammarVocab> llama3_vocab() {
  static const auto v = [] {
    auto r = GrammarVocab::build(llama3());
    FG_CHECK(r.is_ok(), r.status().to_string());
    return *r;
  }();
  return v;
}

std::shared_ptr<const TokenGrammar> bind(const std::string& schema, JsonSchemaOptions o = {}) {
  auto g = compile_json_schema(std::string_view(schema), o);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), llama3_vocab());
}

// The id whose bytes are exactly `bytes`, or -1.
int32_t id_with_bytes(std::string_view bytes) {
  const GrammarVocab& v = *llama3_vocab();
  for (int32_t id = 0; id < v.num_tokens(); ++id)
    if (v.is_text(id) && v.token(id) == bytes) return id;
  return -1;
}

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
  "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}},
  "score": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["name"]})";

TEST(GrammarTokens, VocabularyExcludesSpecialTokens) {
  const GrammarVocab& v = *llama3_vocab();
  EXPECT_EQ(v.size(), 128256);
  EXPECT_EQ(v.num_text_tokens(), 128000);
  const int32_t bot = llama3().id_of("<|begin_of_text|>");
  ASSERT_GE(bot, 0);
  EXPECT_FALSE(v.is_text(bot));
  for (int32_t eos : llama3().eos_ids()) EXPECT_TRUE(v.is_eos(eos));
  GrammarMatcher m(bind(kSchema));
  ASSERT_TRUE(m.accept_bytes(R"({"name": "a)"));
  std::vector<uint32_t> mask(size_t(v.mask_words()));
  m.fill_mask(mask);
  for (int32_t id = 128000; id < v.size(); ++id) EXPECT_FALSE(mask_bit(mask, id)) << id;  // inside a string
  EXPECT_FALSE(m.accept_token(bot));
}

TEST(GrammarTokens, MaskWiderThanTheTokenizer) {
  // A padded LM head (more logits than token ids): the extra ids are never allowed.
  auto tok = Tokenizer::load(std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/chat_llama");
  ASSERT_TRUE(tok.is_ok());
  GrammarVocabOptions o;
  o.mask_size = 640;
  auto vocab = GrammarVocab::build(**tok, o);
  ASSERT_TRUE(vocab.is_ok());
  EXPECT_EQ((*vocab)->mask_words(), 20);
  auto g = compile_json_schema(std::string_view(R"({"type": "string"})"));
  ASSERT_TRUE(g.is_ok());
  GrammarMatcher m(TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), *vocab));
  std::vector<uint32_t> mask(32, 0xFFFFFFFFu);  // longer than needed: the rest is cleared
  ASSERT_TRUE(m.accept_bytes("\"a"));
  m.fill_mask(mask);
  for (int32_t id = (*tok)->vocab_size(); id < 32 * 32; ++id) EXPECT_FALSE(mask_bit(mask, id)) << id;
  EXPECT_FALSE(m.accept_token(600));
  o.mask_size = 100;
  EXPECT_EQ(GrammarVocab::build(**tok, o).status().code(), ErrorCode::kInvalidArgument);
}

TEST(GrammarTokens, CharacterSplitAcrossByteTokens) {
  // "é" is C3 A9: the byte tokens for each half are allowed one after the other, and a
  // continuation byte cannot start a character.
  const int32_t lead = id_with_bytes("\xC3"), cont = id_with_bytes("\xA9");
  ASSERT_GE(lead, 0);
  ASSERT_GE(cont, 0);
  GrammarMatcher m(bind(R"({"type": "string"})"));
  std::vector<uint32_t> mask(size_t(llama3_vocab()->mask_words()));
  ASSERT_TRUE(m.accept_bytes("\"caf"));
  m.fill_mask(mask);
  EXPECT_TRUE(mask_bit(mask, lead));
  EXPECT_FALSE(mask_bit(mask, cont));
  ASSERT_TRUE(m.accept_token(lead));
  m.fill_mask(mask);
  EXPECT_TRUE(mask_bit(mask, cont));
  EXPECT_FALSE(mask_bit(mask, id_with_bytes("\"")));  // the character must be finished first
  EXPECT_FALSE(mask_bit(mask, lead));
  EXPECT_TRUE(test::mask_matches_brute_force(m));
  ASSERT_TRUE(m.accept_token(cont));
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_TRUE(m.accepted());
}

TEST(GrammarTokens, TokensSpanningTerminals) {
  // Compact whitespace makes '":"' and '"},{"' single tokens that cross several rules: the end
  // of a string, the end of an object, the array's separator, the next object and key.
  JsonSchemaOptions compact;
  compact.whitespace = JsonWhitespace::kCompact;
  auto tg = bind(kSchema, compact);
  const int32_t colon = id_with_bytes("\":\""), close_open = id_with_bytes("\"},{\"");
  ASSERT_GE(colon, 0);
  ASSERT_GE(close_open, 0);
  GrammarMatcher m(tg);
  std::vector<uint32_t> mask(size_t(llama3_vocab()->mask_words()));
  ASSERT_TRUE(m.accept_bytes(R"({"name)"));
  m.fill_mask(mask);
  EXPECT_TRUE(mask_bit(mask, colon));
  ASSERT_TRUE(m.accept_token(colon));
  ASSERT_TRUE(m.accept_bytes(R"(x","items":[{"k":"a)"));
  m.fill_mask(mask);
  EXPECT_TRUE(mask_bit(mask, close_open));
  EXPECT_TRUE(test::mask_matches_brute_force(m));
  ASSERT_TRUE(m.accept_token(close_open));
  ASSERT_TRUE(m.accept_bytes(R"(k":"b"}]})"));
  EXPECT_TRUE(m.accepted());
  // In the "tags" array (strings) the same token is refused: no object is open.
  GrammarMatcher t(tg);
  ASSERT_TRUE(t.accept_bytes(R"({"name":"x","tags":["a)"));
  t.fill_mask(mask);
  EXPECT_FALSE(mask_bit(mask, close_open));
  EXPECT_TRUE(test::mask_matches_brute_force(t));
}

TEST(GrammarTokens, EveryMaskAlongARealOutputMatchesBruteForce) {
  const std::string doc =
      R"({"name": "Zoë \"Z\" Müller — 東京", "tags": ["a", "b c"], "items": [{"k": "x"}, {"k": "🦤"}], "score": 0.75})";
  auto tg = bind(kSchema);
  GrammarMatcher m(tg);
  const std::vector<int32_t> ids = llama3().encode(doc, false);
  for (int32_t id : ids) {
    ASSERT_TRUE(test::mask_matches_brute_force(m)) << "after " << m.num_tokens() << " tokens";
    ASSERT_TRUE(m.accept_token(id)) << llama3_vocab()->token(id);
  }
  EXPECT_TRUE(m.accepted());
  EXPECT_TRUE(m.is_terminated());
  std::vector<uint32_t> mask(size_t(llama3_vocab()->mask_words()));
  m.fill_mask(mask);
  int allowed = 0;
  for (int32_t id = 0; id < llama3_vocab()->size(); ++id) allowed += mask_bit(mask, id);
  EXPECT_EQ(allowed, int(llama3_vocab()->eos_ids().size()));
  EXPECT_TRUE(m.accept_token(llama3().eos_ids()[0]));
}

TEST(GrammarTokens, AnyJsonObjectMasksMatchBruteForce) {
  // Any-JSON-object is recursive: tokens such as '"]' or '}}' leave rules with several callers
  // and are decided per return node or against the real stack.
  auto g = json_object_grammar();
  ASSERT_TRUE(g.is_ok());
  auto tg = TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), llama3_vocab());
  EXPECT_GT(tg->stats().uncertain_tokens, 0);
  GrammarMatcher m(tg);
  const std::string doc = R"({"a": [[1, 2], {"b": ["x", {"c": null}]}], "d": {"e": {"f": []}}, "g": "h"})";
  for (int32_t id : llama3().encode(doc, false)) {
    ASSERT_TRUE(test::mask_matches_brute_force(m)) << "after " << m.num_tokens() << " tokens";
    ASSERT_TRUE(m.accept_token(id)) << llama3_vocab()->token(id);
  }
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarTokens, RollbackRestoresMasks) {
  auto tg = bind(kSchema);
  GrammarMatcher m(tg);
  const std::vector<int32_t> ids = llama3().encode(R"({"name": "abc", "tags": ["x", "y"], "score": 1})", false);
  std::vector<std::vector<uint32_t>> masks;
  for (int32_t id : ids) {
    masks.emplace_back(size_t(llama3_vocab()->mask_words()));
    m.fill_mask(masks.back());
    ASSERT_TRUE(m.accept_token(id));
  }
  masks.emplace_back(size_t(llama3_vocab()->mask_words()));
  m.fill_mask(masks.back());  // masks[k]: after k tokens
  ASSERT_TRUE(m.accept_token(llama3().eos_ids()[0]));
  std::vector<uint32_t> mask(size_t(llama3_vocab()->mask_words()));
  for (int back = 1; back <= int(ids.size()); back += 3) {
    m.rollback(back);
    m.fill_mask(mask);
    EXPECT_EQ(mask, masks[ids.size() + 1 - size_t(back)]) << back;
    for (size_t k = ids.size() + 1 - size_t(back); k < ids.size(); ++k) ASSERT_TRUE(m.accept_token(ids[k]));
    ASSERT_TRUE(m.accept_token(llama3().eos_ids()[0]));
  }
}

TEST(GrammarTokens, PositionsDecidedOnFirstUseFromManyThreadsEqualEagerOnes) {
  // Long counted strings leave positions to be decided on first use; matchers on four threads
  // decide them concurrently and must see exactly the masks of a grammar decided at build.
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 40},
      "b": {"type": "string", "minLength": 2, "maxLength": 30}}, "required": ["a", "b"]})";
  auto g = compile_json_schema(std::string_view(schema));
  ASSERT_TRUE(g.is_ok());
  auto grammar = std::make_shared<const Grammar>(std::move(g).value());
  TokenGrammarOptions lazy_options;
  lazy_options.eager_broad_positions = 0;
  auto eager = TokenGrammar::build(grammar, llama3_vocab());
  auto lazy = TokenGrammar::build(grammar, llama3_vocab(), lazy_options);
  EXPECT_LT(lazy->stats().decided, eager->stats().decided);
  const std::vector<std::string> docs = {
      R"({"a": "short", "b": "xy"})", R"({"a": "0123456789012345678901234567890123456789", "b": "ünïcödé and more"})",
      R"({"a": "", "b": "the quick brown fox jumps over"})", R"({"a": "Jürgen", "b": "東京タワー"})"};
  std::vector<std::thread> threads;
  std::vector<std::string> failures(docs.size());
  for (size_t t = 0; t < docs.size(); ++t) {
    threads.emplace_back([&, t] {
      GrammarMatcher a(eager), b(lazy);
      std::vector<uint32_t> ma(size_t(llama3_vocab()->mask_words())), mb(ma.size());
      for (int32_t id : llama3().encode(docs[t], false)) {
        a.fill_mask(ma);
        b.fill_mask(mb);
        if (ma != mb) failures[t] = "masks differ after " + std::to_string(a.num_tokens()) + " tokens";
        if (!a.accept_token(id) || !b.accept_token(id)) failures[t] = "token refused";
        if (!failures[t].empty()) return;
      }
      if (!a.accepted() || !b.accepted()) failures[t] = "not accepted at the end";
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < docs.size(); ++t) EXPECT_EQ(failures[t], "") << docs[t];
}

TEST(GrammarTokens, RandomWalksValidateWithTheRealVocabulary) {
  // Steered random walks end, and their text parses (the corpus test validates against the schema).
  auto tg = bind(kSchema);
  std::mt19937 rng(5);
  for (int i = 0; i < 10; ++i) {
    GrammarMatcher m(tg);
    test::WalkOptions o;
    o.check_probability = 0.05;
    const auto r = test::random_walk(m, rng, o);
    ASSERT_EQ(r.error, "");
    EXPECT_TRUE(r.ended);
    auto j = nlohmann::json::parse(r.text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.text;
    EXPECT_TRUE(j.contains("name")) << r.text;
  }
}

}  // namespace
}  // namespace fg::grammar
