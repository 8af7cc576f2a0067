// Fuzz target: the grammar front ends (JSON Schema, regex, GBNF) and the token-level matcher.
// Input: one byte choosing the front end, one byte seeding the walk, then the grammar's text.
// Compilation either succeeds or fails with a message (never crashes, never runs past the
// limits); a compiled grammar is then walked token by token over a small vocabulary, checking
// what constrained decoding relies on:
//   - every token the mask allows is accepted, and a token the mask refuses is refused;
//   - accepting then rolling back restores the same mask;
//   - the forced continuation is text the grammar accepts;
//   - EOS is allowed exactly when the text so far is complete.
// Seeds: fuzz/corpus/grammar (schemas of tests/fixtures/schemas, regexes, GBNF grammars).
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/vocab.h"

namespace {

using namespace fg::grammar;

// Every printable ASCII byte, whitespace, a few multi-byte UTF-8 characters and JSON's common
// pieces as tokens; the last id is EOS.
std::shared_ptr<const GrammarVocab> fuzz_vocab() {
  static const std::shared_ptr<const GrammarVocab> vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0x20; b < 0x7f; ++b) tokens.push_back(std::string(1, char(b)));
    for (const char* t : {"\n", "\t", "  ", "\": ", "{\"", "\"}", "\", \"", "true", "false", "null", "0.", "é", "中",
                          "\xf0\x9f\x99\x82", "ab", "abc", "\\n", "\\\"", "\\u00"})
      tokens.push_back(t);
    tokens.push_back("</s>");
    const int32_t eos = int32_t(tokens.size()) - 1;
    return GrammarVocab::from_tokens(std::move(tokens), {eos}, {eos});
  }();
  return vocab;
}

GrammarLimits fuzz_limits() {
  // Smaller than the server's so one input stays within libFuzzer's time limit.
  GrammarLimits l;
  l.max_weight = 200'000;
  l.max_dfa_states = 20'000;
  l.minimize_budget = 200'000;
  return l;
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[size_t(id) >> 5] >> (id & 31)) & 1u;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fg::fuzz::FuzzInput in(data, size);
  const uint8_t kind = in.byte() % 3;
  uint32_t rng = 0x9e3779b9u ^ in.byte();
  const std::string_view text = in.rest();

  fg::Result<Grammar> g = fg::invalid_argument("unset");
  if (kind == 0) {
    JsonSchemaOptions o;
    o.limits = fuzz_limits();
    g = compile_json_schema(text, o);
  } else if (kind == 1) {
    g = compile_regex(text, fuzz_limits());
  } else {
    g = compile_gbnf(text, fuzz_limits());
  }
  if (!g.is_ok()) {
    FG_FUZZ_CHECK(!g.status().message().empty());
    return 0;
  }

  const auto vocab = fuzz_vocab();
  const int32_t eos = vocab->num_tokens() - 1;
  auto tg = TokenGrammar::build(std::make_shared<const Grammar>(std::move(*g)), vocab);
  GrammarMatcher m(tg);
  std::vector<uint32_t> mask(size_t(vocab->mask_words())), again(mask.size());
  for (int step = 0; step < 48 && !m.is_terminated(); ++step) {
    m.fill_mask(mask);
    FG_FUZZ_CHECK(allowed(mask, eos) == m.accepted());

    const std::string forced = m.forced_continuation(64);
    if (!forced.empty()) FG_FUZZ_CHECK(m.can_accept_bytes(forced));

    std::vector<int32_t> ok;
    for (int32_t id = 0; id < eos; ++id)
      if (allowed(mask, id)) ok.push_back(id);
    // A refused token must be refused by accept_token too (state unchanged).
    rng = rng * 1664525u + 1013904223u;
    const int32_t probe = int32_t(rng % uint32_t(eos));
    if (!allowed(mask, probe)) FG_FUZZ_CHECK(!m.accept_token(probe));
    if (ok.empty()) break;  // nothing in this vocabulary continues the text (or only EOS)

    rng = rng * 1664525u + 1013904223u;
    const int32_t pick = ok[rng % ok.size()];
    const int before = m.num_tokens();
    FG_FUZZ_CHECK(m.accept_token(pick));
    FG_FUZZ_CHECK(m.num_tokens() == before + 1);
    if (rng & 0x100) {  // sometimes undo it and check the state came back
      m.rollback(1);
      m.fill_mask(again);
      FG_FUZZ_CHECK(again == mask);
      FG_FUZZ_CHECK(m.accept_token(pick));
    }
  }
  return 0;
}
