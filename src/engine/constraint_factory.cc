// ConstraintFactory (see constraint_factory.h).
#include "engine/constraint_factory.h"

#include "engine/grammar_constraint.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_grammar.h"

namespace fg {

namespace {
constexpr size_t kMaxCachedGrammars = 256;
}

Result<std::unique_ptr<ConstraintFactory>> ConstraintFactory::create(
    const Tokenizer& tokenizer, std::vector<int32_t> eos_ids, int32_t vocab_size,
    std::optional<grammar::ToolCallFormat> tool_format) {
  std::unique_ptr<ConstraintFactory> f(new ConstraintFactory(tokenizer));
  grammar::GrammarVocabOptions o;
  o.eos_ids = std::move(eos_ids);
  o.mask_size = vocab_size;
  if (tool_format) o.special_tokens_as_text = grammar::tool_call_text_tokens(*tool_format);
  auto vocab = grammar::GrammarVocab::build(tokenizer, o);
  if (!vocab.is_ok()) {
    // A template's tool-call marker the tokenizer lacks: constrained tool calls are then off.
    if (!tool_format) return vocab.status();
    o.special_tokens_as_text.clear();
    vocab = grammar::GrammarVocab::build(tokenizer, o);
    if (!vocab.is_ok()) return vocab.status();
    tool_format.reset();
  }
  f->vocab_ = std::move(vocab).value();
  f->tool_format_ = tool_format;
  return f;
}

Result<std::shared_ptr<TokenConstraint>> ConstraintFactory::make(const ConstraintSpec& spec) {
  const std::string key = std::to_string(int(spec.kind)) + "\n" + spec.named_tool + "\n" +
                          (spec.parallel_tool_calls ? "p" : "s") + "\n" + spec.text;
  std::shared_ptr<const grammar::TokenGrammar> tg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) tg = it->second;
  }
  if (!tg) {
    Result<grammar::Grammar> g = invalid_argument("no grammar");
    switch (spec.kind) {
      case ConstraintSpec::Kind::kJsonSchema: g = grammar::compile_json_schema(std::string_view(spec.text)); break;
      case ConstraintSpec::Kind::kJsonObject: g = grammar::json_object_grammar(); break;
      case ConstraintSpec::Kind::kRegex: g = grammar::compile_regex(spec.text); break;
      case ConstraintSpec::Kind::kGbnf: g = grammar::compile_gbnf(spec.text); break;
      case ConstraintSpec::Kind::kToolCalls: {
        if (!tool_format_)
          return unsupported(
              "this model's chat template writes tool calls in no syntax flashgen knows (Hermes "
              "<tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS]); use tool_choice \"auto\" or \"none\"");
        nlohmann::ordered_json tools;
        try {
          tools = nlohmann::ordered_json::parse(spec.text);
        } catch (const nlohmann::json::exception& e) {
          return invalid_argument(std::string("tools: not valid JSON (") + e.what() + ")");
        }
        grammar::ToolCallOptions o;
        o.format = *tool_format_;
        o.named_tool = spec.named_tool;
        o.parallel = spec.parallel_tool_calls;
        g = grammar::tool_call_grammar(tools, o);
        break;
      }
    }
    if (!g.is_ok()) return g.status();
    tg = grammar::TokenGrammar::build(std::make_shared<const grammar::Grammar>(std::move(g).value()), vocab_);
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() >= kMaxCachedGrammars) cache_.clear();
    cache_.emplace(key, tg);
  }
  return std::shared_ptr<TokenConstraint>(std::make_shared<GrammarConstraint>(tg, tokenizer_));
}

}  // namespace fg
