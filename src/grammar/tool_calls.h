// Tool calling without the engine: which syntax a model family writes calls in (detected from its
// chat template), a grammar for that syntax whose arguments follow each tool's parameter schema
// (for tool_choice "required" or a named tool), and a parser that takes the calls back out of the
// generated text.
//
//   kHermes      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (Qwen2.5, Qwen3,
//                Hermes); parallel calls are blocks separated by "\n"
//   kLlama3Json  {"name": "f", "parameters": {...}}  (Llama 3.1 / 3.2 JSON tool calling, possibly
//                after <|python_tag|>); one call per turn
//   kMistral     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]  ([TOOL_CALLS] is a special
//                token: bind the vocabulary with tool_call_text_tokens() so the grammar may use it)
//
// With tool_choice "auto" no grammar applies: the server parses whatever the model wrote.
// Must never depend on the engine or on HTTP types; tools arrive as OpenAI's JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace fg::grammar {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

const char* tool_call_format_name(ToolCallFormat format);

// The format a chat template renders tool calls in, from the markers it contains ("[TOOL_CALLS]";
// "<tool_call>" with a JSON "name"; "<|python_tag|>" or Llama 3.1's "Environment: ipython" /
// "parameters" wording), or nullopt when none is recognized (including templates that put XML
// or bare names inside <tool_call>, which are other formats).
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

// Special tokens a format's grammar spells as text (GrammarVocabOptions::special_tokens_as_text).
std::vector<std::string> tool_call_text_tokens(ToolCallFormat format);

struct ToolCallOptions {
  ToolCallFormat format = ToolCallFormat::kHermes;
  std::string named_tool;  // tool_choice naming a function: only that tool; empty: any tool ("required")
  bool parallel = true;    // parallel_tool_calls: more than one call (not for kLlama3Json)
  JsonSchemaOptions json;  // whitespace and schema options for the call objects and arguments
};

// A grammar for one or more calls of `tools` (OpenAI's "tools" list: {"type": "function",
// "function": {"name", "parameters"}}; bare function objects are accepted too). A tool without
// parameters takes {}. Errors: kInvalidArgument (malformed tools, unknown named tool), and the
// parameter schemas' own errors (kUnsupported naming the keyword), prefixed with the tool name.
Result<Grammar> tool_call_grammar(const nlohmann::ordered_json& tools, const ToolCallOptions& options);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ParsedToolCalls {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// The calls in generated text (decoded with special tokens kept). Blocks that do not parse stay
// in the content, so nothing the model wrote is lost.
ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format);

}  // namespace fg::grammar
