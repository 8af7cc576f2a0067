// Tool-call formats: detection, grammars, parsing (see tool_calls.h).
#include "grammar/tool_calls.h"

#include "grammar/grammar_builder.h"
#include "grammar/json_pieces.h"

namespace fg::grammar {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]", kPythonTag = "<|python_tag|>";

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\n' || s[a] == '\t' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\n' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return std::string(s.substr(a, b - a));
}

// Length of the JSON object or array at the start of s (brackets matched, strings skipped), or 0.
size_t json_extent(std::string_view s) {
  if (s.empty() || (s[0] != '{' && s[0] != '[')) return 0;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return 0;
}

std::optional<Json> parse_json(std::string_view s) {
  try {
    return Json::parse(s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// {"name": ..., "<args_key>": {...}} -> a call (arguments given as a JSON string are kept as is).
std::optional<ToolCall> call_from(const Json& j, std::initializer_list<const char*> args_keys) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall c;
  c.name = j["name"].get<std::string>();
  c.arguments = "{}";
  for (const char* k : args_keys) {
    if (!j.contains(k)) continue;
    const Json& a = j[k];
    if (a.is_string()) {
      c.arguments = a.get<std::string>();
    } else if (a.is_object()) {
      c.arguments = a.dump();
    } else {
      return std::nullopt;
    }
    break;
  }
  return c;
}

struct ToolSpec {
  std::string name;
  Json parameters;
};

Result<std::vector<ToolSpec>> tool_specs(const Json& tools) {
  if (!tools.is_array() || tools.empty()) return invalid_argument("tools must be a non-empty list");
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const Json* f = &t;
    if (t.is_object() && t.contains("function")) f = &t["function"];
    if (!f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
      return invalid_argument("tools[" + std::to_string(i) + "] has no function name");
    ToolSpec s;
    s.name = (*f)["name"].get<std::string>();
    s.parameters =
        f->contains("parameters") ? (*f)["parameters"] : Json{{"type", "object"}, {"properties", Json::object()}};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "unknown";
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view t) {
  if (t.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  // Hermes JSON calls: <tool_call> with a JSON "name" in the template's instructions (templates
  // that put XML or plain names inside <tool_call> are other formats).
  if (t.find(kHermesOpen) != std::string_view::npos &&
      (t.find("\"name\"") != std::string_view::npos || t.find("\\\"name\\\"") != std::string_view::npos))
    return ToolCallFormat::kHermes;
  if (t.find(kPythonTag) != std::string_view::npos || t.find("Environment: ipython") != std::string_view::npos ||
      t.find("\"parameters\": dictionary of argument name") != std::string_view::npos)
    return ToolCallFormat::kLlama3Json;
  return std::nullopt;
}

std::vector<std::string> tool_call_text_tokens(ToolCallFormat format) {
  if (format == ToolCallFormat::kMistral) return {std::string(kMistralMarker)};
  return {};
}

Result<Grammar> tool_call_grammar(const Json& tools, const ToolCallOptions& o) {
  FG_ASSIGN_OR_RETURN(std::vector<ToolSpec> specs, tool_specs(tools));
  GrammarBuilder b(o.json.limits);
  JsonPieces j(b, o.json.whitespace);
  const char* args_key = o.format == ToolCallFormat::kLlama3Json ? "\"parameters\"" : "\"arguments\"";
  std::vector<Expr> calls;
  for (const ToolSpec& s : specs) {
    if (!o.named_tool.empty() && s.name != o.named_tool) continue;
    auto args = add_json_schema_rule(b, j, s.parameters, o.json, "tool " + s.name + " arguments");
    if (!args.is_ok()) return Status(args.status().code(), "tool '" + s.name + "': " + args.status().message());
    calls.push_back(
        Expr::seq({j.punct('{'), Expr::literal("\"name\""), j.punct(':'), Expr::literal(nlohmann::json(s.name).dump()),
                   j.punct(','), Expr::literal(args_key), j.punct(':'), Expr::call(*args), j.punct('}')}));
  }
  if (calls.empty()) return invalid_argument("tool_choice names '" + o.named_tool + "', which is not among the tools");
  const int32_t call = b.add_rule("tool_call", Expr::alt(std::move(calls)));
  Expr root = Expr::empty();
  switch (o.format) {
    case ToolCallFormat::kHermes: {
      const Expr block = Expr::seq({Expr::literal(std::string(kHermesOpen) + "\n"), Expr::call(call),
                                    Expr::literal("\n" + std::string(kHermesClose))});
      root = o.parallel ? Expr::seq({block, Expr::star(Expr::seq({Expr::literal("\n"), block}))}) : block;
      break;
    }
    case ToolCallFormat::kLlama3Json: root = Expr::call(call); break;
    case ToolCallFormat::kMistral:
      root = Expr::seq({Expr::literal(std::string(kMistralMarker)), j.punct('['), Expr::call(call),
                        o.parallel ? Expr::star(Expr::seq({j.punct(','), Expr::call(call)})) : Expr::empty(),
                        j.punct(']')});
      break;
  }
  return b.build(b.add_rule("tool_calls", std::move(root)));
}

ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format) {
  ParsedToolCalls out;
  std::string content;
  switch (format) {
    case ToolCallFormat::kHermes: {
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t open = text.find(kHermesOpen, pos);
        if (open == std::string_view::npos) {
          content += text.substr(pos);
          break;
        }
        content += text.substr(pos, open - pos);
        const size_t body = open + kHermesOpen.size();
        size_t close = text.find(kHermesClose, body);
        const size_t body_end = close == std::string_view::npos ? text.size() : close;
        const size_t next = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
        auto j = parse_json(trim(text.substr(body, body_end - body)));
        auto call = j ? call_from(*j, {"arguments", "parameters"}) : std::nullopt;
        if (call)
          out.calls.push_back(std::move(*call));
        else
          content += text.substr(open, next - open);
        pos = next;
      }
      break;
    }
    case ToolCallFormat::kLlama3Json: {
      std::string t = trim(text);
      if (t.rfind(kPythonTag, 0) == 0) t = trim(std::string_view(t).substr(kPythonTag.size()));
      // One call, or several separated by ';'.
      std::string_view rest = t;
      std::vector<ToolCall> calls;
      bool ok = !rest.empty();
      while (ok && !rest.empty()) {
        const size_t n = json_extent(rest);
        auto j = n ? parse_json(rest.substr(0, n)) : std::nullopt;
        auto call = j ? call_from(*j, {"parameters", "arguments"}) : std::nullopt;
        if (!call) {
          ok = false;
          break;
        }
        calls.push_back(std::move(*call));
        rest = rest.substr(n);
        while (!rest.empty() && (rest[0] == ' ' || rest[0] == '\n' || rest[0] == ';')) rest.remove_prefix(1);
      }
      if (ok) {
        out.calls = std::move(calls);
      } else {
        content = std::string(text);
      }
      break;
    }
    case ToolCallFormat::kMistral: {
      const size_t marker = text.find(kMistralMarker);
      if (marker == std::string_view::npos) {
        content = std::string(text);
        break;
      }
      content = std::string(text.substr(0, marker));
      std::string_view rest = text.substr(marker + kMistralMarker.size());
      while (!rest.empty() && (rest[0] == ' ' || rest[0] == '\n')) rest.remove_prefix(1);
      const size_t n = json_extent(rest);
      auto j = n ? parse_json(rest.substr(0, n)) : std::nullopt;
      std::vector<ToolCall> calls;
      bool ok = j.has_value();
      if (ok) {
        const Json items = j->is_array() ? *j : Json::array({*j});
        for (const Json& item : items) {
          auto call = call_from(item, {"arguments", "parameters"});
          if (!call) {
            ok = false;
            break;
          }
          calls.push_back(std::move(*call));
        }
      }
      if (ok) {
        out.calls = std::move(calls);
        content += rest.substr(n);
      } else {
        content += text.substr(marker);
      }
      break;
    }
  }
  out.content = trim(content);
  return out;
}

}  // namespace fg::grammar
