// ConstraintFactory: turns what a request asks for (a JSON schema, "any JSON object", a regex, a
// GBNF grammar, or tool calls in the model's syntax) into a TokenConstraint for the engine.
// It owns the model's GrammarVocab (built once) and caches compiled grammars by their text, so
// requests that share a schema share its token tables. Thread-safe: the server's HTTP threads
// call make() concurrently; the constraints it returns belong to one request each.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "grammar/token_grammar.h"
#include "grammar/tool_calls.h"
#include "grammar/vocab.h"
#include "request/constraint_spec.h"
#include "tokenizer/tokenizer.h"

namespace fg {

class ConstraintFactory {
 public:
  // The tokenizer must outlive the factory. eos_ids: the model's; vocab_size: its logits width.
  // tool_format: the model's tool-call syntax (from its chat template), if any.
  static Result<std::unique_ptr<ConstraintFactory>> create(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
                                                           int32_t vocab_size,
                                                           std::optional<grammar::ToolCallFormat> tool_format);

  // Errors: kInvalidArgument (malformed schema, regex or grammar), kUnsupported (a feature named
  // in the message), both meant for the client (400).
  Result<std::shared_ptr<TokenConstraint>> make(const ConstraintSpec& spec);
  std::optional<grammar::ToolCallFormat> tool_format() const { return tool_format_; }

 private:
  ConstraintFactory(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  const Tokenizer& tokenizer_;
  std::shared_ptr<const grammar::GrammarVocab> vocab_;
  std::optional<grammar::ToolCallFormat> tool_format_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const grammar::TokenGrammar>> cache_;  // by kind + text
};

}  // namespace fg
