// flashgen model commands (the model layer alone, no engine):
//   logits --model DIR|FILE.gguf --prompt-ids "..." --output FILE.npy [--backend ...] [--page-size P]
// User errors (bad flags, a broken checkpoint, ids outside the vocabulary) are thrown as one-line
// std::runtime_error messages that name the file and the problem; main prints them and exits 1.
// (`generate`, which runs the engine or the model layer's reference loop, is cmd_generate.cc.)
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/npy.h"

namespace fg::cli {
namespace {

struct LogitsArgs {
  std::string model_dir;
  std::string prompt_ids;
  std::string backend = "auto";
  int page_size = 16;
  std::string output;
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

template <class T>
T value_or_fail(Result<T> r) {
  if (!r.is_ok()) fail(r.status().message());
  return std::move(r).value();
}

// The prompt's token ids.
template <class Args>
std::vector<int32_t> resolve_prompt(const Args& a) {
  std::vector<int32_t> ids = parse_token_ids(a.prompt_ids, "--prompt-ids");
  if (ids.empty()) fail("--prompt-ids: no token ids given");
  return ids;
}

struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

template <class Args>
Loaded load(const Args& a) {
  if (a.page_size <= 0) fail("--page-size must be positive");
  Loaded l;
  l.backend = value_or_fail(make_backend(a.backend));
  l.model = value_or_fail(Model::load(a.model_dir, *l.backend));
  return l;
}

void run_logits(const LogitsArgs& a) {
  std::vector<int32_t> prompt = resolve_prompt(a);
  Loaded l = load(a);
  std::vector<float> logits = value_or_fail(prompt_logits(*l.model, prompt, a.page_size));
  Status s = write_npy_f32(a.output, logits.data(), int64_t(prompt.size()), l.model->config().vocab_size);
  if (!s.is_ok()) fail(s.message());
}

template <class Args>
void add_model_options(CLI::App* cmd, Args& a) {
  cmd->add_option("--model", a.model_dir,
                  "model: a Hugging Face folder (config.json + *.safetensors), a .gguf file, or a folder holding one "
                  ".gguf")
      ->required();
  cmd->add_option("--prompt-ids", a.prompt_ids, "prompt token ids, e.g. \"1,2,3\"")->required();
  cmd->add_option("--backend", a.backend, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--page-size", a.page_size, "KV cache page size in tokens");
}

}  // namespace

void register_model_commands(CLI::App& app) {
  auto lg = std::make_shared<LogitsArgs>();
  CLI::App* l = app.add_subcommand("logits", "write the logits of every prompt position as float32 .npy");
  add_model_options(l, *lg);
  l->add_option("--output", lg->output, "output .npy file, shape [n_tokens, vocab]")->required();
  l->callback([lg] { run_logits(*lg); });
}

}  // namespace fg::cli
