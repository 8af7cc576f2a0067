// flashgen model commands:
//   generate [--model DIR|FILE.gguf] --prompt-ids "1,2,3" [--max-new-tokens N] [--temperature T] [--top-k K]
//            [--top-p P] [--seed S] [--backend cpu|cuda|auto] [--page-size P] [--ignore-eos] [--json]
//   logits   --model DIR|FILE.gguf --prompt-ids "..." --output FILE.npy [--backend ...] [--page-size P]
// User errors (bad flags, a broken checkpoint, ids outside the vocabulary) are thrown as one-line
// std::runtime_error messages that name the file and the problem; main prints them and exits 1.
// The prompt comes from --prompt-ids; text prompts plug into resolve_prompt() once the tokenizer
// layer exists.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/token_ids.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/npy.h"

namespace fg::cli {
namespace {

// `generate` reads its flags into GenerateDefaults (cli/commands.h), which the engine path shares.
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

// The prompt's token ids. (A --prompt text option goes through the tokenizer here.)
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

std::string join_ids(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
  return s;
}

void run_generate(const GenerateDefaults& a) {
  std::vector<int32_t> prompt = resolve_prompt(a);
  if (a.max_new_tokens < 0) fail("--max-new-tokens must be >= 0");
  if (a.top_k < 0) fail("--top-k must be >= 0");
  if (!(a.top_p > 0.0f && a.top_p <= 1.0f)) fail("--top-p must be in (0, 1]");
  Loaded l = load(a);
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_k = a.top_k;
  o.sampling.top_p = a.top_p;
  o.sampling.seed = a.seed;
  o.page_size = a.page_size;
  if (!a.ignore_eos) o.stop_ids = l.model->config().eos_token_ids;
  std::vector<int32_t> out = value_or_fail(generate(*l.model, prompt, o));
  if (a.json) {
    std::printf("{\"prompt_ids\": [%s], \"output_ids\": [%s]}\n", join_ids(prompt, ", ").c_str(),
                join_ids(out, ", ").c_str());
  } else {
    std::printf("%s\n", join_ids(out, " ").c_str());
  }
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
  auto gen = std::make_shared<GenerateDefaults>();
  CLI::App* g = app.add_subcommand("generate", "generate token ids from a prompt");
  add_model_options(g, *gen);
  g->get_option("--model")->required(false)->description(model_option_help());  // default: cli/default_model.h
  g->add_option("--max-new-tokens", gen->max_new_tokens, "tokens to generate (default 32)");
  g->add_option("--temperature", gen->temperature, "sampling temperature (0 = greedy, the default)");
  g->add_option("--top-k", gen->top_k, "keep the k most likely tokens (0 = off)");
  g->add_option("--top-p", gen->top_p, "nucleus sampling mass (1 = off)");
  g->add_option("--seed", gen->seed, "sampling seed");
  g->add_flag("--ignore-eos", gen->ignore_eos, "do not stop at end-of-sequence ids");
  g->add_flag("--json", gen->json, "print {\"prompt_ids\": [...], \"output_ids\": [...]}");
  // --prompts FILE / --dummy-weights / KV sizing: the engine path (cmd_engine.cc).
  g->get_option("--prompt-ids")->required(false);
  auto run_engine = add_engine_generate_options(g);
  g->callback([gen, run_engine] {
    if (gen->model_dir.empty()) gen->model_dir = default_model_path();
    if (!run_engine(*gen)) run_generate(*gen);
  });

  auto lg = std::make_shared<LogitsArgs>();
  CLI::App* l = app.add_subcommand("logits", "write the logits of every prompt position as float32 .npy");
  add_model_options(l, *lg);
  l->add_option("--output", lg->output, "output .npy file, shape [n_tokens, vocab]")->required();
  l->callback([lg] { run_logits(*lg); });
}

}  // namespace fg::cli
