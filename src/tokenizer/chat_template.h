// A model's chat template, rendered exactly as Hugging Face transformers'
// `tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False)`
// renders it: same template selection, same message normalization (keys whose value is null are
// dropped; reasoning_content/thinking/reasoning are aliased to each other), same variables
// (messages, tools, documents, add_generation_prompt, the named special tokens, extra kwargs).
//
// JSON goes in as nlohmann::ordered_json: Python keeps the key order of JSON objects, and
// templates that print `tools | tojson` show it, so a key-sorting json type would change prompts.
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "jinja/template.h"

namespace fg {

class ChatTemplate {
 public:
  // Loads a model folder's template, by transformers' precedence: `chat_template.jinja` (plus
  // named ones in `additional_chat_templates/<name>.jinja`), else tokenizer_config.json's
  // `chat_template` (a string, or a list of {"name", "template"}). The special-token strings
  // (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token) come from
  // tokenizer_config.json, then special_tokens_map.json for those it lacks.
  // template_file, when not empty, replaces the folder's template (the special tokens stay).
  // `dir` may also be a .gguf file, or a folder holding one .gguf and no tokenizer_config.json /
  // chat_template.jinja: the template then comes from the metadata's tokenizer.chat_template
  // (named ones from tokenizer.chat_template.<name>) and the special tokens from the
  // tokenizer.ggml.*_token_id entries (tokenizer/gguf_tokenizer.h).
  static Result<ChatTemplate> from_model_dir(const std::string& dir, const std::string& template_file = "");

  // A template given as text; special_tokens: {"bos_token": "<s>", ...} (strings).
  static Result<ChatTemplate> from_string(
      std::string_view source, const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  // messages: array of message objects. tools: array of tool schemas, or null for none.
  // extra_context: an object of more template variables (e.g. {"enable_thinking": false});
  // they override the special tokens, as keyword arguments do in transformers.
  Result<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object()) const;

  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  // The text of every template it holds, concatenated (to recognize a family's tool-call syntax).
  const std::string& sources() const { return sources_; }
  // Pins what strftime_now() returns (tests); otherwise the local time at render.
  void set_fixed_now(const std::tm& now) { options_.fixed_now = now; }
  void set_limits(const jinja::Limits& limits) { options_.limits = limits; }

 private:
  std::vector<std::pair<std::string, jinja::Template>> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  std::string sources_;
  jinja::RenderOptions options_;
};

}  // namespace fg
