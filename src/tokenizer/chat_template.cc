// Loading a model's chat template(s) and rendering a conversation the way transformers'
// apply_chat_template(..., tokenize=False) does (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/gguf_tokenizer.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(ErrorCode::kIo, "cannot read " + path.string());
  return ss.str();
}

Result<ojson> read_json(const fs::path& path) {
  FG_ASSIGN_OR_RETURN(std::string text, read_file(path));
  try {
    return ojson::parse(text);
  } catch (const std::exception& e) {
    return invalid_argument(path.string() + " is not valid JSON: " + e.what());
  }
}

// A special token in tokenizer_config.json is a string or an AddedToken object {"content": ...}.
std::optional<std::string> token_string(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

void collect_special_tokens(const ojson& config, ojson& out) {
  if (!config.is_object()) return;
  for (const char* name : kSpecialTokenNames) {
    if (out.contains(name) || !config.contains(name)) continue;
    if (auto s = token_string(config[name])) out[name] = *s;
  }
}

Result<jinja::Template> parse_named(const std::string& source, const std::string& where) {
  auto t = jinja::Template::parse(source);
  if (!t.is_ok()) return Status(t.status().code(), where + ": " + t.status().message());
  return std::move(t).value();
}

// transformers' message normalization: drop keys whose value is null, then alias the reasoning
// fields (`thinking` first, the message's own keys, then `reasoning_content`).
Result<jinja::Value> normalize_messages(const ojson& messages) {
  if (!messages.is_array()) return invalid_argument("chat messages must be a JSON array of message objects");
  if (messages.empty()) return invalid_argument("cannot apply the chat template to an empty conversation");
  jinja::List out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (!m.is_object())
      return invalid_argument("chat message " + std::to_string(i) + " must be a JSON object, got " +
                              m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    auto d = std::make_shared<jinja::Dict>();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) d->set(it.key(), jinja::Value::from_json(it.value()));
    const jinja::Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if ((reasoning = d->find(std::string_view(key)))) break;
    }
    if (reasoning) {
      jinja::Value r = *reasoning;
      auto aliased = std::make_shared<jinja::Dict>();
      aliased->set("thinking", r);
      for (const auto& [k, v] : d->entries()) aliased->set(k, v);
      aliased->set("reasoning_content", r);
      d = std::move(aliased);
    }
    out.push_back(jinja::Value::dict(std::move(d)));
  }
  return jinja::Value::list(std::move(out));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir, const std::string& template_file) {
  const fs::path root(dir);
  std::error_code ec;
  // A GGUF model (a .gguf file, or a folder holding one and no Hugging Face tokenizer files)
  // carries its special tokens and templates in its metadata.
  std::string gguf_path;
  if (!(fs::is_directory(root, ec) &&
        (fs::exists(root / "tokenizer_config.json", ec) || fs::exists(root / "chat_template.jinja", ec)))) {
    FG_ASSIGN_OR_RETURN(gguf_path, find_gguf_model(dir));
  }
  if (gguf_path.empty() && !fs::is_directory(root)) return not_found("model folder " + dir + " does not exist");
  ChatTemplate ct;
  ojson config;
  const fs::path config_path = root / "tokenizer_config.json";
  if (!gguf_path.empty()) {
    FG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf_path));
    FG_ASSIGN_OR_RETURN(nlohmann::json c, gguf_tokenizer_config(*file));
    config = c;
    collect_special_tokens(config, ct.special_tokens_);
  } else {
    if (fs::exists(config_path)) {
      FG_ASSIGN_OR_RETURN(config, read_json(config_path));
      collect_special_tokens(config, ct.special_tokens_);
    }
    const fs::path map_path = root / "special_tokens_map.json";
    if (fs::exists(map_path)) {
      FG_ASSIGN_OR_RETURN(ojson map, read_json(map_path));
      collect_special_tokens(map, ct.special_tokens_);
    }
  }

  if (!template_file.empty()) {
    FG_ASSIGN_OR_RETURN(std::string src, read_file(template_file));
    FG_ASSIGN_OR_RETURN(auto t, parse_named(src, template_file));
    ct.sources_ += src;
    ct.templates_.emplace_back("default", std::move(t));
    return ct;
  }

  const fs::path jinja_path = root / "chat_template.jinja";
  const fs::path extra_dir = root / "additional_chat_templates";
  if (gguf_path.empty() && fs::exists(jinja_path)) {
    FG_ASSIGN_OR_RETURN(std::string src, read_file(jinja_path));
    FG_ASSIGN_OR_RETURN(auto t, parse_named(src, jinja_path.string()));
    ct.sources_ += src;
    ct.templates_.emplace_back("default", std::move(t));
  }
  if (gguf_path.empty() && fs::is_directory(extra_dir)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(extra_dir))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      FG_ASSIGN_OR_RETURN(std::string src, read_file(p));
      FG_ASSIGN_OR_RETURN(auto t, parse_named(src, p.string()));
      ct.sources_ += src;
      ct.templates_.emplace_back(p.stem().string(), std::move(t));
    }
  }
  if (!ct.templates_.empty()) return ct;

  const bool gguf = !gguf_path.empty();
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return not_found(dir +
                     (gguf ? " has no chat template (no tokenizer.chat_template in its metadata)"
                           : " has no chat template (neither chat_template.jinja nor a chat_template in "
                             "tokenizer_config.json)") +
                     "; pass one with --chat-template");
  const ojson& field = config["chat_template"];
  const std::string where =
      gguf ? gguf_path + " metadata tokenizer.chat_template" : config_path.string() + " chat_template";
  if (field.is_string()) {
    FG_ASSIGN_OR_RETURN(auto t, parse_named(field.get<std::string>(), where));
    ct.sources_ += field.get<std::string>();
    ct.templates_.emplace_back("default", std::move(t));
  } else if (field.is_array()) {
    for (const ojson& entry : field) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
          !entry["template"].is_string())
        return invalid_argument(where + ": each entry of the list must be {\"name\": ..., \"template\": ...}");
      std::string name = entry["name"].get<std::string>();
      FG_ASSIGN_OR_RETURN(auto t, parse_named(entry["template"].get<std::string>(), where + " '" + name + "'"));
      ct.sources_ += entry["template"].get<std::string>();
      ct.templates_.emplace_back(std::move(name), std::move(t));
    }
    if (ct.templates_.empty()) return invalid_argument(where + " is an empty list");
  } else {
    return invalid_argument(where + " must be a string or a list of {name, template}");
  }
  return ct;
}

Result<ChatTemplate> ChatTemplate::from_string(std::string_view source, const ojson& special_tokens) {
  ChatTemplate ct;
  FG_ASSIGN_OR_RETURN(auto t, parse_named(std::string(source), "chat template"));
  ct.sources_ += std::string(source);
  ct.templates_.emplace_back("default", std::move(t));
  if (special_tokens.is_object()) {
    for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it)
      if (it.value().is_string()) ct.special_tokens_[it.key()] = it.value();
  }
  return ct;
}

Result<std::string> ChatTemplate::render(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                         const ojson& extra_context) const {
  // transformers' get_chat_template(): one template, or by name: "tool_use" when tools are given
  // and the model has one, else "default".
  const jinja::Template* tpl = nullptr;
  if (templates_.size() == 1) {
    tpl = &templates_[0].second;
  } else {
    auto find = [&](const char* name) -> const jinja::Template* {
      for (const auto& [n, t] : templates_)
        if (n == name) return &t;
      return nullptr;
    };
    if (!tools.is_null()) tpl = find("tool_use");
    if (!tpl) tpl = find("default");
    if (!tpl) return invalid_argument("the model has several chat templates and none is named \"default\"");
  }
  if (!tools.is_null() && !tools.is_array()) return invalid_argument("tools must be a JSON array of tool schemas");
  if (!extra_context.is_null() && !extra_context.is_object())
    return invalid_argument("extra template variables must be a JSON object");
  FG_ASSIGN_OR_RETURN(jinja::Value msgs, normalize_messages(messages));

  jinja::Dict vars;
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
    vars.set(it.key(), jinja::Value::from_json(it.value()));
  if (extra_context.is_object())
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it)
      vars.set(it.key(), jinja::Value::from_json(it.value()));
  vars.set("messages", std::move(msgs));
  vars.set("tools", tools.is_null() ? jinja::Value::none() : jinja::Value::from_json(tools));
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  return tpl->render(vars, options_);
}

}  // namespace fg
