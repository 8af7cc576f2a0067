// `flashgen chat`: a conversation with the model on stdin/stdout, through the engine.
//
//   chat --model DIR [--system TEXT] [--max-new-tokens N] [--temperature T] [--top-k K]
//        [--top-p P] [--seed S] [--backend cpu|cuda|auto] [--page-size P] [engine flags]
//
// Each line read is one user message. The conversation so far (the system message, every turn,
// every reply) is rendered with the model's chat template (add_generation_prompt) and the reply
// is printed as it is generated, then a newline; it joins the history. "/exit" or the end of the
// input ends the session. On a terminal a "> " prompt goes to stderr, so stdout holds only the
// replies. Errors (no chat template, a conversation longer than the context) end the command
// with one line on stderr and exit 1.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "cli/model_text.h"
#include "engine/engine.h"
#include "tokenizer/incremental_decoder.h"

namespace fg::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ChatArgs {
  std::string model_dir;
  std::string backend = "auto";
  std::string system;
  int page_size = 16;
  int max_new_tokens = 512;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  EngineFlags engine;
};

// Runs one turn: streams the reply to stdout and returns its text.
std::string reply(Engine& engine, const ModelText& text, const ojson& history, const ChatArgs& a) {
  Request r;
  r.prompt_ids = text.encode_chat(history, "chat");
  // The last prompt ids as context, so the reply's first token keeps its leading space (as
  // `generate` and the server decode it).
  const size_t ctx = std::min<size_t>(r.prompt_ids.size(), 4);
  const std::vector<int32_t> context(r.prompt_ids.end() - long(ctx), r.prompt_ids.end());
  r.params.temperature = a.temperature;
  r.params.top_k = a.top_k;
  r.params.top_p = a.top_p;
  r.params.seed = a.seed;
  r.params.max_new_tokens = a.max_new_tokens;
  Result<RequestHandle> h = engine.submit(std::move(r));
  if (!h.is_ok()) throw std::runtime_error(h.status().message());
  IncrementalDecoder decoder(text.tokenizer(), /*skip_special_tokens=*/true, context);
  std::string out;
  auto emit = [&out](const std::string& delta) {
    if (delta.empty()) return;
    out += delta;
    std::fwrite(delta.data(), 1, delta.size(), stdout);
    std::fflush(stdout);
  };
  while (std::optional<RequestEvent> e = h->events->next()) {
    if (e->token) emit(decoder.push(*e->token));
    if (e->finish == FinishReason::kError) throw std::runtime_error(e->status.message());
  }
  emit(decoder.flush());
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return out;
}

void run_chat(ChatArgs a) {
  if (a.model_dir.empty()) a.model_dir = default_model_path();
  const ModelText text = ModelText::load(a.model_dir, /*required=*/true);
  EngineStart start;
  start.model_dir = a.model_dir;
  start.backend = a.backend;
  start.page_size = a.page_size;
  start.seed = a.seed;
  std::unique_ptr<Engine> engine = start_engine(start, a.engine);

  ojson history = ojson::array();
  if (!a.system.empty()) history.push_back({{"role", "system"}, {"content", a.system}});
  const bool terminal = isatty(STDIN_FILENO) != 0;
  std::string line;
  for (;;) {
    if (terminal) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit") break;
    if (line.empty()) continue;
    history.push_back({{"role", "user"}, {"content", line}});
    std::string answer = reply(*engine, text, history, a);
    history.push_back({{"role", "assistant"}, {"content", std::move(answer)}});
  }
  engine->shutdown();
}

}  // namespace

void register_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* c = app.add_subcommand("chat", "chat with the model on stdin/stdout (/exit or end of input ends it)");
  c->add_option("--model", a->model_dir, model_option_help());
  c->add_option("--system", a->system, "a system message that opens the conversation");
  c->add_option("--backend", a->backend, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  c->add_option("--page-size", a->page_size, "KV cache page size in tokens (16)");
  c->add_option("--max-new-tokens", a->max_new_tokens, "tokens per reply at most (512)");
  c->add_option("--temperature", a->temperature, "sampling temperature (0 = greedy, the default)");
  c->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = off)");
  c->add_option("--top-p", a->top_p, "nucleus sampling mass (1 = off)");
  c->add_option("--seed", a->seed, "sampling seed");
  add_engine_flags(c, a->engine);
  c->callback([a] { run_chat(*a); });
}

}  // namespace fg::cli
