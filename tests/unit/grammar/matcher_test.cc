// GrammarBuilder and GrammarMatcher on hand-made grammars and vocabularies: masks equal trying
// each token, tokens that span rules and callers, recursion, rollback, forced continuations,
// termination, and the builder's refusals.
#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/gbnf.h"
#include "grammar/grammar_builder.h"
#include "grammar_test_util.h"

namespace fg::grammar {
namespace {

using test::mask_bit;
using test::mask_matches_brute_force;

std::shared_ptr<const TokenGrammar> bind(Result<Grammar> g, std::vector<std::string> tokens) {
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  const int32_t eos = int32_t(tokens.size());
  tokens.push_back("</s>");
  auto vocab = GrammarVocab::from_tokens(std::move(tokens), {eos}, {eos});
  return TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), vocab);
}

const std::vector<std::string> kSmallVocab = {"a",  "b",  "c",  "ab", "bc",  "abc", "x", "y",  ",",
                                              ";",  "x,", ",y", "y;", "x,y", "(",   ")", "((", "))",
                                              ")(", "()", "[",  "]",  "x]",  "[x",  "];"};

TEST(GrammarMatcher, LiteralMaskForcedAndEnd) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root", Expr::literal("abc"));
  GrammarMatcher m(bind(b.build(root), kSmallVocab));
  EXPECT_TRUE(mask_matches_brute_force(m));
  EXPECT_EQ(m.forced_continuation(), "abc");
  EXPECT_EQ(m.forced_continuation(2), "ab");
  EXPECT_FALSE(m.accepted());
  EXPECT_FALSE(m.accept_token(1));  // "b"
  EXPECT_TRUE(m.accept_token(3));   // "ab"
  EXPECT_EQ(m.forced_continuation(), "c");
  EXPECT_TRUE(mask_matches_brute_force(m));
  EXPECT_TRUE(m.accept_token(2));  // "c"
  EXPECT_TRUE(m.accepted());
  EXPECT_TRUE(m.is_terminated());  // nothing can follow
  std::vector<uint32_t> mask(size_t(m.vocab().mask_words()));
  m.fill_mask(mask);
  for (int32_t id = 0; id < m.vocab().size(); ++id) EXPECT_EQ(mask_bit(mask, id), m.vocab().is_eos(id)) << id;
  EXPECT_TRUE(m.accept_token(int32_t(kSmallVocab.size())));  // EOS
  EXPECT_FALSE(m.accept_token(0));
  m.rollback(2);
  EXPECT_EQ(m.num_tokens(), 1);
  EXPECT_FALSE(m.accepted());
  EXPECT_EQ(m.forced_continuation(), "c");
}

TEST(GrammarMatcher, SharedRuleWithSeveralCallers) {
  // s is called from three places that continue differently, so tokens like "x," "x]" "y;" are
  // decided by the caller.
  GrammarBuilder b;
  const int32_t s = b.add_rule("s", Expr::alt({Expr::literal("x"), Expr::literal("y")}));
  const int32_t root =
      b.add_rule("root", Expr::alt({
                             Expr::seq({Expr::call(s), Expr::literal(","), Expr::call(s), Expr::literal(";")}),
                             Expr::seq({Expr::literal("["), Expr::call(s), Expr::literal("]")}),
                         }));
  auto tg = bind(b.build(root), kSmallVocab);
  EXPECT_GT(tg->stats().uncertain_tokens, 0);
  std::mt19937 rng(1);
  for (int i = 0; i < 50; ++i) {
    GrammarMatcher m(tg);
    test::WalkOptions o;
    o.check_probability = 1;
    const auto r = test::random_walk(m, rng, o);
    EXPECT_EQ(r.error, "");
    EXPECT_TRUE(r.ended) << r.text;
    EXPECT_TRUE(r.text == "[x]" || r.text == "[y]" || (r.text.size() == 4 && r.text[1] == ',' && r.text[3] == ';'))
        << r.text;
  }
}

TEST(GrammarMatcher, RecursionBalancedParentheses) {
  // p ::= ( "(" p ")" )*  — nesting through a rule that calls itself.
  GrammarBuilder b;
  const int32_t p = b.add_rule("p");
  b.set_body(p, Expr::star(Expr::seq({Expr::literal("("), Expr::call(p), Expr::literal(")")})));
  auto tg = bind(b.build(p), kSmallVocab);
  std::mt19937 rng(2);
  for (int i = 0; i < 40; ++i) {
    GrammarMatcher m(tg);
    test::WalkOptions o;
    o.check_probability = 1;
    o.steer_after = 15;
    const auto r = test::random_walk(m, rng, o);
    EXPECT_EQ(r.error, "");
    EXPECT_TRUE(r.ended) << r.text;
    int depth = 0;
    for (char c : r.text) {
      depth += c == '(' ? 1 : -1;
      EXPECT_GE(depth, 0) << r.text;
    }
    EXPECT_EQ(depth, 0) << r.text;
  }
}

TEST(GrammarMatcher, RightRecursionKeepsStacksFlat) {
  // list ::= "a" list | "" : the recursive call is a tail call, so a long list adds no frames.
  GrammarBuilder b;
  const int32_t list = b.add_rule("list");
  b.set_body(list, Expr::alt({Expr::seq({Expr::literal("a"), Expr::call(list)}), Expr::empty()}));
  GrammarMatcher m(bind(b.build(list), kSmallVocab));
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.accepted());
  EXPECT_TRUE(mask_matches_brute_force(m));
  EXPECT_EQ(m.min_bytes_to_end(), 0);
}

TEST(GrammarMatcher, RollbackRestoresState) {
  GrammarBuilder b;
  const int32_t p = b.add_rule("p");
  b.set_body(p, Expr::star(Expr::seq({Expr::literal("("), Expr::call(p), Expr::literal(")")})));
  auto tg = bind(b.build(p), kSmallVocab);
  GrammarMatcher m(tg);
  std::vector<uint32_t> before(size_t(m.vocab().mask_words())), after(before.size());
  ASSERT_TRUE(m.accept_token(14));  // (
  ASSERT_TRUE(m.accept_token(16));  // ((
  m.fill_mask(before);
  const std::string forced = m.forced_continuation();
  ASSERT_TRUE(m.accept_token(17));  // ))
  ASSERT_TRUE(m.accept_token(15));  // )
  EXPECT_TRUE(m.accepted());
  ASSERT_TRUE(m.accept_token(int32_t(kSmallVocab.size())));  // EOS
  EXPECT_TRUE(m.is_terminated());
  m.rollback(3);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.num_tokens(), 2);
  m.fill_mask(after);
  EXPECT_EQ(before, after);
  EXPECT_EQ(m.forced_continuation(), forced);
  EXPECT_TRUE(mask_matches_brute_force(m));
}

TEST(GrammarMatcher, RefusesTokensItCannotRead) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root", Expr::literal("x,y"));
  GrammarMatcher m(bind(b.build(root), kSmallVocab));
  EXPECT_FALSE(m.accept_token(int32_t(kSmallVocab.size())));  // EOS before the end
  EXPECT_FALSE(m.accept_token(7));                            // "y"
  EXPECT_EQ(m.num_tokens(), 0);
  EXPECT_TRUE(m.accept_token(13));  // "x,y" spans the whole grammar
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarMatcher, NondeterministicRulesWhenSubsetConstructionIsCapped) {
  // With a one-state cap every rule keeps its nondeterministic automaton (several edges may read
  // the same byte); masks, forced text and walks must not change.
  GrammarLimits tiny;
  tiny.max_dfa_states = 1;
  const char* text = "root ::= (\"ab\" | \"a\" \"c\"* | x)+ \";\"\nx ::= \"x,\" | \"x\" | \"(\" root \")\"";
  auto det = bind(compile_gbnf(text), kSmallVocab), nondet = bind(compile_gbnf(text, tiny), kSmallVocab);
  EXPECT_GT(nondet->grammar().num_nodes(), det->grammar().num_nodes());
  std::mt19937 rng(4);
  for (int i = 0; i < 40; ++i) {
    GrammarMatcher a(nondet);
    test::WalkOptions o;
    o.check_probability = 1;
    o.steer_after = 12;
    const auto r = test::random_walk(a, rng, o);
    EXPECT_EQ(r.error, "");
    EXPECT_TRUE(r.ended) << r.text;
    GrammarMatcher b(det);  // the deterministic grammar accepts the same text, with the same masks
    std::vector<uint32_t> ma(size_t(a.vocab().mask_words())), mb(ma.size());
    GrammarMatcher c(nondet);
    for (int32_t id : r.ids) {
      c.fill_mask(ma);
      b.fill_mask(mb);
      EXPECT_EQ(ma, mb) << r.text;
      EXPECT_EQ(c.forced_continuation(), b.forced_continuation());
      ASSERT_TRUE(b.accept_token(id)) << r.text;
      ASSERT_TRUE(c.accept_token(id));
    }
  }
}

TEST(GrammarBuilder, RefusesLeftRecursion) {
  GrammarBuilder b;
  const int32_t e = b.add_rule("expr");
  const int32_t opt = b.add_rule("maybe", Expr::optional(Expr::literal("-")));
  b.set_body(e, Expr::alt({Expr::seq({Expr::call(opt), Expr::call(e), Expr::literal("+")}), Expr::literal("1")}));
  auto g = b.build(e);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("left recursion"), std::string::npos) << g.status().message();
}

TEST(GrammarBuilder, RefusesEmptyLanguageAndDropsDeadRules) {
  GrammarBuilder b;
  const int32_t loop = b.add_rule("loop");
  b.set_body(loop, Expr::seq({Expr::literal("a"), Expr::call(loop)}));  // no finite string
  auto g = b.build(loop);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("matches no string"), std::string::npos);

  GrammarBuilder b2;
  const int32_t dead = b2.add_rule("dead");
  b2.set_body(dead, Expr::seq({Expr::literal("a"), Expr::call(dead)}));
  const int32_t root = b2.add_rule("root", Expr::alt({Expr::call(dead), Expr::literal("b")}));
  auto g2 = b2.build(root);
  ASSERT_TRUE(g2.is_ok()) << g2.status().to_string();
  EXPECT_EQ(g2->rules().size(), 1u);
}

TEST(GrammarBuilder, MinimizationMergesReturnNodes) {
  // Two calls of `item` that continue the same way return to one node: item has one return node.
  GrammarBuilder b;
  const int32_t item = b.add_rule("item", Expr::alt({Expr::literal("x"), Expr::literal("y")}));
  const int32_t root = b.add_rule(
      "root",
      Expr::seq(
          {Expr::literal("["),
           Expr::optional(Expr::seq({Expr::call(item), Expr::star(Expr::seq({Expr::literal(","), Expr::call(item)}))})),
           Expr::literal("]")}));
  auto g = b.build(root);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->return_nodes(1).size(), 1u) << g->to_string();
}

}  // namespace
}  // namespace fg::grammar
