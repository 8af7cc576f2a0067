// grammar_bench: what structured output costs on the CPU per generated token. For each case
// (a JSON Schema of a realistic order record — also once with positions decided on first use —,
// any JSON object, a Hermes tool call) it compiles
// the grammar, binds it to the tokenizer's vocabulary (the one-time cost a server pays per new
// schema), then replays real-looking outputs — documents that satisfy the grammar, tokenized as
// the tokenizer would — through a GrammarMatcher, timing fill_mask before every token and
// accept_token after it. Prints p50/p90/p99/max per case, the share of output tokens the grammar
// forced (what jump-forward feeds without sampling) and the cost of finding them (forced
// continuation; jump_forward_tokens with its re-tokenization); --json FILE writes the same.
//
//   grammar_bench --tokenizer DIR|FILE.gguf [--repeat N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/jump_forward.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "grammar/tool_calls.h"
#include "grammar/vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using fg::grammar::Grammar;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* kOrderSchema = R"({
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "format": "uuid"},
    "customer": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "tier": {"enum": ["free", "pro", "enterprise"]}
      },
      "required": ["name", "email"]
    },
    "items": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
          "description": {"type": "string"},
          "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
          "unit_price": {"type": "number", "minimum": 0}
        },
        "required": ["sku", "quantity", "unit_price"]
      }
    },
    "created_at": {"type": "string", "format": "date-time"},
    "gift": {"type": "boolean"},
    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["order_id", "customer", "items", "created_at"]
})";

// Outputs a model could give for the order schema (the grammar's whitespace: ", " and ": ").
const std::vector<std::string> kOrderDocs = {
    R"j({"order_id": "3f2b8c1e-9a4d-4e6b-8f0a-1c2d3e4f5a6b", "customer": {"name": "Maria Gonzalez", "email": "maria.gonzalez@example.com", "tier": "pro"}, "items": [{"sku": "ABC-1234", "description": "Stainless steel water bottle, 750 ml, keeps drinks cold for 24 hours", "quantity": 2, "unit_price": 19.99}, {"sku": "XYZ-0042", "quantity": 1, "unit_price": 5.5}], "created_at": "2024-03-15T14:22:05Z", "gift": false, "notes": "Please leave the package at the front desk if nobody answers."})j",
    R"j({"order_id": "a1b2c3d4-e5f6-47a8-9b0c-d1e2f3a4b5c6", "customer": {"name": "Jürgen Müller", "email": "j.mueller@beispiel.de"}, "items": [{"sku": "KAF-7781", "description": "Café crème capsules — 50 pack (intensity 7/13)", "quantity": 4, "unit_price": 12.49}], "created_at": "2023-12-01T08:00:00+01:00", "gift": true, "notes": null})j",
    R"j({"order_id": "00000000-1111-4222-8333-444455556666", "customer": {"name": "Li Wei", "email": "liwei@example.cn", "tier": "enterprise"}, "items": [{"sku": "TEA-0001", "description": "龙井茶 (Longjing green tea), 250 g tin", "quantity": 10, "unit_price": 38}, {"sku": "TEA-0002", "description": "Porcelain tea cup set 🍵", "quantity": 1, "unit_price": 64.25}, {"sku": "SHP-9000", "quantity": 1, "unit_price": 0}], "created_at": "2024-07-04T23:59:59.125Z"})j",
    R"j({"order_id": "9e8d7c6b-5a49-4382-a716-0f1e2d3c4b5a", "customer": {"name": "Sam O'Neil", "email": "sam+orders@mail.example.org", "tier": "free"}, "items": [{"sku": "BKS-3141", "description": "\"The Pragmatic Programmer\", 20th anniversary edition\nHardcover", "quantity": 1, "unit_price": 42}], "created_at": "2022-02-28T10:30:00-05:00", "gift": true, "notes": "Gift wrap in blue paper; no prices on the receipt."})j",
    R"j({"order_id": "deadbeef-cafe-4bad-9eed-0123456789ab", "customer": {"name": "Aiko Tanaka", "email": "aiko.tanaka@example.jp"}, "items": [{"sku": "GAM-2048", "description": "Board game: Tokaido (Japanese edition)", "quantity": 1, "unit_price": 35.9}, {"sku": "GAM-2049", "description": "Expansion: Crossroads", "quantity": 2, "unit_price": 18.5}], "created_at": "2024-01-20T19:45:10Z", "gift": false})j",
    R"j({"order_id": "12345678-90ab-4cde-8f01-234567890abc", "customer": {"name": "Olusegun Adeyemi", "email": "o.adeyemi@example.ng", "tier": "pro"}, "items": [{"sku": "ELC-5500", "description": "USB-C charger 65 W with GaN technology, two ports", "quantity": 3, "unit_price": 29.95}], "created_at": "2024-05-05T05:05:05Z", "notes": "Deliver between 9:00 and 17:00 on weekdays. Call +234 800 000 0000 on arrival."})j",
};

const std::vector<std::string> kAnyJsonDocs = {
    R"j({"name": "flashgen", "version": "0.3.1", "tags": ["llm", "inference", "cuda"], "stars": 1234, "license": null, "maintainers": [{"name": "A. Developer", "active": true}]})j",
    R"j({"query": "weather in Paris", "results": [{"day": "Monday", "high": 21.5, "low": 12, "conditions": "partly cloudy"}, {"day": "Tuesday", "high": 18, "low": 11.25, "conditions": "rain"}], "units": "celsius"})j",
    R"j({"matrix": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "determinant": 1, "note": "identity — trivially invertible", "nested": {"a": {"b": {"c": [true, false, null]}}}})j",
};

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "search_flights", "description": "Search flights",
    "parameters": {"type": "object", "properties": {"from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                   "to": {"type": "string", "pattern": "^[A-Z]{3}$"}, "date": {"type": "string", "format": "date"},
                   "passengers": {"type": "integer", "minimum": 1, "maximum": 9}},
                   "required": ["from", "to", "date"]}}}
])";

const std::vector<std::string> kToolDocs = {
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San Francisco\", \"unit\": "
    "\"celsius\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"search_flights\", \"arguments\": {\"from\": \"SFO\", \"to\": \"NRT\", \"date\": "
    "\"2024-11-02\", "
    "\"passengers\": 2}}\n</tool_call>",
};

struct CaseResult {
  std::string name;
  double compile_ms = 0, bind_ms = 0;
  fg::grammar::TokenGrammarStats stats;
  std::vector<double> mask_us, accept_us, forced_us, jump_us;
  int forced_tokens = 0;  // tokens inside the grammar's forced continuation at their step
  int rejected = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

CaseResult run_case(const std::string& name, const std::function<fg::Result<Grammar>()>& compile,
                    const std::vector<std::string>& docs, const fg::Tokenizer& tok,
                    const std::shared_ptr<const fg::grammar::GrammarVocab>& vocab, int repeat,
                    const fg::grammar::TokenGrammarOptions& options = {}) {
  CaseResult r;
  r.name = name;
  double t0 = now_us();
  auto g = compile();
  r.compile_ms = (now_us() - t0) / 1000;
  if (!g.is_ok()) {
    std::fprintf(stderr, "grammar_bench: %s: %s\n", name.c_str(), g.status().to_string().c_str());
    std::exit(1);
  }
  t0 = now_us();
  auto tg = fg::grammar::TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), vocab, options);
  r.bind_ms = (now_us() - t0) / 1000;
  r.stats = tg->stats();
  std::vector<uint32_t> mask(size_t(vocab->mask_words()));
  for (int rep = 0; rep < repeat; ++rep) {
    for (const std::string& doc : docs) {
      fg::grammar::GrammarMatcher m(tg);
      std::vector<int32_t> ids = tok.encode(doc, false);
      if (!vocab->eos_ids().empty()) ids.push_back(vocab->eos_ids()[0]);
      for (size_t k = 0; k < ids.size(); ++k) {
        const int32_t id = ids[k];
        if (rep == 0) {
          // Jump-forward: how much of the output the grammar forces, and what finding it costs.
          double f0 = now_us();
          const std::string forced = m.forced_continuation();
          r.forced_us.push_back(now_us() - f0);
          if (!forced.empty()) {
            const std::string_view b = vocab->token(id);
            if (!vocab->is_eos(id) && forced.compare(0, b.size(), b) == 0) ++r.forced_tokens;
            f0 = now_us();
            (void)fg::grammar::jump_forward_tokens(m, tok, std::span<const int32_t>(ids.data(), k));
            r.jump_us.push_back(now_us() - f0);
          }
        }
        double a = now_us();
        m.fill_mask(mask);
        double b = now_us();
        const bool allowed = (mask[size_t(id) >> 5] >> (id & 31)) & 1;
        const bool ok = m.accept_token(id);
        double c = now_us();
        r.mask_us.push_back(b - a);
        r.accept_us.push_back(c - b);
        if (!allowed || !ok) {
          ++r.rejected;
          if (rep == 0)
            std::fprintf(stderr, "grammar_bench: %s: token %d '%s' %s in: %s\n", name.c_str(), id,
                         vocab->token(id).data(), allowed ? "refused by accept_token" : "not in the mask", doc.c_str());
          break;
        }
      }
    }
  }
  return r;
}

int usage() {
  std::fprintf(stderr, "usage: grammar_bench --tokenizer DIR|FILE.gguf [--repeat N] [--json FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, json_path;
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--tokenizer")
      tok_path = next();
    else if (a == "--repeat")
      repeat = std::atoi(next().c_str());
    else if (a == "--json")
      json_path = next();
    else
      return usage();
  }
  if (tok_path.empty() || repeat <= 0) return usage();
  auto tok = fg::Tokenizer::load(tok_path);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  double t0 = now_us();
  auto vocab = fg::grammar::GrammarVocab::build(**tok);
  if (!vocab.is_ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", vocab.status().to_string().c_str());
    return 1;
  }
  const double vocab_ms = (now_us() - t0) / 1000;

  std::vector<CaseResult> results;
  results.push_back(run_case(
      "json_schema order", [] { return fg::grammar::compile_json_schema(std::string_view(kOrderSchema)); }, kOrderDocs,
      **tok, *vocab, repeat));
  // The same outputs once, with string contents decided on first use instead of at build: what a
  // grammar past the eager budget costs the first request that reaches each position.
  fg::grammar::TokenGrammarOptions lazy;
  lazy.eager_broad_positions = 0;
  results.push_back(run_case(
      "order, first use", [] { return fg::grammar::compile_json_schema(std::string_view(kOrderSchema)); }, kOrderDocs,
      **tok, *vocab, 1, lazy));
  results.push_back(run_case(
      "json_object", [] { return fg::grammar::json_object_grammar(); }, kAnyJsonDocs, **tok, *vocab, repeat));
  results.push_back(run_case(
      "tool_call hermes",
      [] {
        fg::grammar::ToolCallOptions o;
        o.format = fg::grammar::ToolCallFormat::kHermes;
        return fg::grammar::tool_call_grammar(nlohmann::ordered_json::parse(kTools), o);
      },
      kToolDocs, **tok, *vocab, repeat));

  std::printf("grammar_bench: vocabulary %d ids (%d text tokens, %zu trie nodes), built in %.1f ms\n", (*vocab)->size(),
              (*vocab)->num_text_tokens(), (*vocab)->trie().size(), vocab_ms);
  std::printf("%-18s %9s %8s %9s %9s %7s %9s %8s %8s %8s %10s %7s %11s %11s %7s\n", "case", "compile", "bind",
              "positions", "uncertain", "tokens", "mask p50", "p90", "p99", "max", "accept p50", "forced", "forced p50",
              "jump p50", "refused");
  nlohmann::json out = nlohmann::json::array();
  for (const CaseResult& r : results) {
    const size_t first_pass = r.forced_us.size();
    std::printf(
        "%-18s %7.1fms %6.0fms %9lld %9lld %7zu %7.1fus %6.1fus %6.1fus %6.1fus %8.2fus %6.0f%% %9.2fus %9.1fus %7d\n",
        r.name.c_str(), r.compile_ms, r.bind_ms, (long long)r.stats.positions, (long long)r.stats.still_uncertain,
        r.mask_us.size(), percentile(r.mask_us, 0.5), percentile(r.mask_us, 0.9), percentile(r.mask_us, 0.99),
        percentile(r.mask_us, 1.0), percentile(r.accept_us, 0.5),
        first_pass ? 100.0 * r.forced_tokens / double(first_pass) : 0.0, percentile(r.forced_us, 0.5),
        percentile(r.jump_us, 0.5), r.rejected);
    out.push_back(
        {{"case", r.name},
         {"vocab_size", (*vocab)->size()},
         {"compile_ms", r.compile_ms},
         {"bind_ms", r.bind_ms},
         {"positions", r.stats.positions},
         {"uncertain_tokens", r.stats.uncertain_tokens},
         {"still_uncertain", r.stats.still_uncertain},
         {"symbolic_states", r.stats.symbolic_states},
         {"cache_bytes", r.stats.memory_bytes},
         {"tokens", r.mask_us.size()},
         {"mask_p50_us", percentile(r.mask_us, 0.5)},
         {"mask_p90_us", percentile(r.mask_us, 0.9)},
         {"mask_p99_us", percentile(r.mask_us, 0.99)},
         {"mask_max_us", percentile(r.mask_us, 1.0)},
         {"accept_p50_us", percentile(r.accept_us, 0.5)},
         {"accept_p99_us", percentile(r.accept_us, 0.99)},
         {"forced_token_fraction", r.forced_us.empty() ? 0.0 : double(r.forced_tokens) / double(r.forced_us.size())},
         {"forced_continuation_p50_us", percentile(r.forced_us, 0.5)},
         {"jump_forward_tokens_p50_us", percentile(r.jump_us, 0.5)},
         {"refused", r.rejected}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  for (const CaseResult& r : results)
    if (r.rejected) return 1;
  return 0;
}
