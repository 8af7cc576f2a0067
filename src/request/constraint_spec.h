// What a request asks its output to follow (structured output, tool calls): a JSON schema, any
// JSON object, a regex, a GBNF grammar, or calls of the request's tools in the model's own
// tool-call syntax. Plain data, filled by each API from its own fields; the engine's
// ConstraintFactory compiles it (engine/constraint_factory.h).
#pragma once

#include <string>

namespace fg {

struct ConstraintSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kGbnf, kToolCalls };
  Kind kind = Kind::kJsonObject;
  std::string text;                 // the schema (JSON text), regex or GBNF; for kToolCalls the tools JSON
  std::string named_tool;           // kToolCalls: tool_choice naming one function ("": any, "required")
  bool parallel_tool_calls = true;  // kToolCalls
};

}  // namespace fg
