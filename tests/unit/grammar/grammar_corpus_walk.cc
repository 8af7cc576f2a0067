// grammar_corpus_walk: random walks over the grammar corpus of tests/fixtures/grammar (JSON
// Schemas, TGI regexes, GBNF grammars, tool calls) with real tokenizers, written as JSON lines for
// check_grammar_corpus.py, which validates every output independently (jsonschema, Python re, a
// GBNF recognizer of its own). Masks are checked against trying each token on its own at every
// step with small vocabularies and at random steps (--check) with large ones; a mismatch, a mask that refuses the walk
// or a grammar that fails to compile is an error.
//
//   grammar_corpus_walk --corpus DIR --tokenizer NAME=PATH [...] [--walks N] [--seed S]
//                       [--check P] [--out FILE]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/tool_calls.h"
#include "random_walk.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using fg::grammar::Grammar;

struct Item {
  std::string kind, name, text;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Item> load_corpus(const fs::path& dir) {
  std::vector<Item> items;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "json_schema")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) items.push_back({"json_schema", p.stem().string(), read_file(p)});
  std::istringstream lines(read_file(dir / "regex.txt"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    items.push_back({"regex", "regex_" + std::to_string(n++), line});
  }
  for (const char* kind : {"gbnf", "tools"}) {
    files.clear();
    for (const auto& e : fs::directory_iterator(dir / kind)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) items.push_back({kind, p.stem().string(), read_file(p)});
  }
  return items;
}

fg::Result<Grammar> compile(const Item& it) {
  if (it.kind == "json_schema") return fg::grammar::compile_json_schema(std::string_view(it.text));
  if (it.kind == "regex") return fg::grammar::compile_regex(it.text);
  if (it.kind == "gbnf") return fg::grammar::compile_gbnf(it.text);
  // tools: {"format": "hermes" | "llama3_json" | "mistral", "named": ..., "parallel": ..., "tools": [...]}
  const auto spec = nlohmann::ordered_json::parse(it.text);
  fg::grammar::ToolCallOptions o;
  const std::string format = spec.at("format").get<std::string>();
  o.format = format == "mistral"       ? fg::grammar::ToolCallFormat::kMistral
             : format == "llama3_json" ? fg::grammar::ToolCallFormat::kLlama3Json
                                       : fg::grammar::ToolCallFormat::kHermes;
  o.named_tool = spec.value("named", "");
  o.parallel = spec.value("parallel", true);
  return fg::grammar::tool_call_grammar(spec.at("tools"), o);
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus, out_path = "-";
  std::vector<std::pair<std::string, std::string>> tokenizers;
  int walks = 3;
  unsigned seed = 1;
  double check = 0.05;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--corpus") {
      corpus = next();
    } else if (a == "--tokenizer") {
      const std::string spec = next();
      const size_t eq = spec.find('=');
      if (eq == std::string::npos) return 2;
      tokenizers.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    } else if (a == "--walks") {
      walks = std::atoi(next().c_str());
    } else if (a == "--seed") {
      seed = unsigned(std::atoi(next().c_str()));
    } else if (a == "--check") {
      check = std::atof(next().c_str());
    } else if (a == "--out") {
      out_path = next();
    } else {
      std::fprintf(stderr, "grammar_corpus_walk: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (corpus.empty() || tokenizers.empty()) {
    std::fprintf(stderr, "usage: grammar_corpus_walk --corpus DIR --tokenizer NAME=PATH [...]\n");
    return 2;
  }
  std::ofstream file;
  if (out_path != "-") file.open(out_path);
  std::ostream& out = out_path == "-" ? std::cout : file;
  const std::vector<Item> items = load_corpus(corpus);
  int errors = 0;
  for (const auto& [tok_name, tok_path] : tokenizers) {
    auto tok = fg::Tokenizer::load(tok_path);
    if (!tok.is_ok()) {
      std::fprintf(stderr, "grammar_corpus_walk: %s\n", tok.status().to_string().c_str());
      return 1;
    }
    auto vocab = fg::grammar::GrammarVocab::build(**tok);
    if (!vocab.is_ok()) return 1;
    std::mt19937 rng(seed);
    for (const Item& it : items) {
      auto g = compile(it);
      nlohmann::json line = {{"kind", it.kind}, {"name", it.name}, {"tokenizer", tok_name}};
      if (!g.is_ok()) {
        line["error"] = "compile: " + g.status().to_string();
        out << line.dump() << "\n";
        ++errors;
        continue;
      }
      auto tg = fg::grammar::TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), *vocab);
      for (int w = 0; w < walks; ++w) {
        fg::grammar::GrammarMatcher m(tg);
        fg::grammar::test::WalkOptions o;
        o.check_probability = (*vocab)->size() <= 4096 ? 1.0 : check;
        const auto r = fg::grammar::test::random_walk(m, rng, o);
        nlohmann::json row = line;
        row["output"] = r.text;
        row["ended"] = r.ended;
        row["tokens"] = r.ids.size();
        if (!r.error.empty()) {
          row["error"] = r.error;
          ++errors;
        }
        out << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      }
    }
  }
  return errors == 0 ? 0 : 1;
}
