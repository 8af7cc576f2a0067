// `flashgen template`: renders a conversation with a model's chat template and writes the prompt
// to stdout byte for byte (no trailing newline, nothing else), as transformers'
// apply_chat_template(..., tokenize=False) would produce it.
//
//   flashgen template --model DIR [--chat-template FILE.jinja] --messages FILE.json
//                     [--add-generation-prompt] [--tools FILE.json] [--var KEY=JSON ...]
//
// --messages holds a JSON array of messages, or an object with "messages" (and optionally
// "tools"). Errors are thrown as std::runtime_error with one line; main prints it.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tokenizer/chat_template.h"

namespace fg::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct TemplateOptions {
  std::string model_dir;
  std::string chat_template;
  std::string messages_file;
  std::string tools_file;
  std::vector<std::string> vars;
  bool add_generation_prompt = false;
};

ojson read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot open ") + what + " file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return ojson::parse(ss.str());
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    throw std::runtime_error(std::string(what) + " file " + path + " is not valid JSON: " + msg);
  }
}

void run_template(const TemplateOptions& o) {
  auto ct = ChatTemplate::from_model_dir(o.model_dir, o.chat_template);
  if (!ct.is_ok()) throw std::runtime_error(ct.status().to_string());

  ojson messages = read_json_file(o.messages_file, "messages");
  ojson tools = nullptr;
  if (messages.is_object()) {
    if (messages.contains("tools")) tools = messages["tools"];
    if (!messages.contains("messages"))
      throw std::runtime_error("messages file " + o.messages_file +
                               " must hold a JSON array of messages or an object with \"messages\"");
    ojson inner = messages["messages"];
    messages = std::move(inner);
  }
  if (!o.tools_file.empty()) tools = read_json_file(o.tools_file, "tools");

  ojson extra = ojson::object();
  for (const std::string& kv : o.vars) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("--var expects KEY=JSON (e.g. enable_thinking=false), got '" + kv + "'");
    std::string value = kv.substr(eq + 1);
    try {
      extra[kv.substr(0, eq)] = ojson::parse(value);
    } catch (const std::exception&) {
      extra[kv.substr(0, eq)] = value;  // not JSON: pass it as a string
    }
  }

  auto out = ct->render(messages, tools, o.add_generation_prompt, extra);
  if (!out.is_ok()) {
    std::string msg = out.status().to_string();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    throw std::runtime_error(msg);
  }
  const std::string& text = out.value();
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    throw std::runtime_error("cannot write the rendered prompt to stdout");
}

}  // namespace

void register_template_commands(CLI::App& app) {
  auto opts = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Render a conversation with a model's chat template (to stdout)");
  cmd->add_option("--model", opts->model_dir,
                  "Model folder (tokenizer_config.json, chat_template.jinja), or a .gguf file")
      ->required();
  cmd->add_option("--chat-template", opts->chat_template, "Jinja file to use instead of the model's template");
  cmd->add_option("--messages", opts->messages_file, "JSON file: an array of messages, or {\"messages\": [...]}")
      ->required();
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt, "End with the assistant turn's header");
  cmd->add_option("--tools", opts->tools_file, "JSON file: an array of tool schemas");
  cmd->add_option("--var", opts->vars, "Extra template variable KEY=JSON (repeatable), e.g. enable_thinking=false");
  cmd->callback([opts]() { run_template(*opts); });
}

}  // namespace fg::cli
