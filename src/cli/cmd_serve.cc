// `flashgen serve`: the OpenAI- and TGI-compatible HTTP server over the engine.
//   serve [--model DIR|FILE.gguf] [--host 127.0.0.1] [--port 8080] [--served-model-name NAME [ALIAS ...]]
//         [--strict-model-name] [engine flags]
// Loads the tokenizer (and chat template) and the model, starts the engine, and serves until
// SIGTERM/SIGINT, then drains in-flight requests (up to --drain-timeout) and exits 0.
// Endpoints and parameters: docs/api.md.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "kvcache/kv_sizing.h"
#include "server/api_server.h"
#include "server/engine_backend.h"

namespace fg::cli {
namespace {

struct ServeArgs {
  std::string model_dir;
  std::string tokenizer_dir;
  std::vector<std::string> served_model_names;
  bool strict_model_name = false;
  std::string chat_template;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string backend = "auto";
  int page_size = 16;
  uint64_t seed = 0;
  EngineFlags engine;
  int http_threads = 0;
  std::string max_body_bytes = "8MiB";
  int64_t max_concurrent_requests = 256;
  double read_timeout = 30.0;
  double idle_timeout = 75.0;
  double drain_timeout = 30.0;
  bool no_log_requests = false;
  std::string log_level = "info";
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

void run_serve(const ServeArgs& a) {
  spdlog::set_level(spdlog::level::from_str(a.log_level));
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a process exit
  if (a.port < 0 || a.port > 65535) fail("--port must be in [0, 65535]");
  if (a.page_size <= 0) fail("--page-size must be positive");
  if (a.max_concurrent_requests <= 0) fail("--max-concurrent-requests must be positive");

  server::EngineBackendOptions o;
  o.served_model_names = a.served_model_names;
  o.tokenizer_dir = a.tokenizer_dir;
  o.chat_template_file = a.chat_template;
  o.runner.model_dir = a.model_dir.empty() ? default_model_path() : a.model_dir;
  o.runner.backend = a.backend;
  o.runner.dummy_seed = a.seed;
  o.runner.page_size = a.page_size;
  apply_engine_flags(a.engine, o.runner, o.engine);
  o.engine.seed = a.seed;

  server::ServeOptions so;
  so.http.host = a.host;
  so.http.port = uint16_t(a.port);
  so.http.threads = a.http_threads > 0 ? a.http_threads : int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  auto body = parse_byte_size(a.max_body_bytes);
  if (!body.is_ok() || *body <= 0) fail("--max-body-bytes: expected a size such as 8MiB");
  so.http.max_body_bytes = size_t(*body);
  so.http.read_timeout_s = a.read_timeout;
  so.http.idle_timeout_s = a.idle_timeout;
  so.http.drain_timeout_s = a.drain_timeout;
  so.api.max_concurrent_requests = a.max_concurrent_requests;
  so.api.log_requests = !a.no_log_requests;
  so.api.strict_model_name = a.strict_model_name;

  spdlog::info("flashgen serve: loading {}", o.runner.model_dir);
  auto backend = server::EngineBackend::create(o);
  if (!backend.is_ok()) fail(backend.status().to_string());
  const server::BackendStats st = (*backend)->stats();
  spdlog::info("flashgen serve: {} on {}, {} KV pages of {} tokens, max_model_len {}{}", (*backend)->model_info().id,
               (*backend)->model_info().device, st.kv_pages_total, a.page_size, (*backend)->model_info().max_model_len,
               (*backend)->model_info().has_chat_template ? "" : " (no chat template: /v1/chat/completions refuses)");
  Status s = server::serve(**backend, so);
  if (!s.is_ok()) fail(s.to_string());
}

}  // namespace

void register_serve_commands(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI- and TGI-compatible HTTP server (docs/api.md)");
  cmd->add_option("--model", a->model_dir, model_option_help());
  cmd->add_option("--tokenizer", a->tokenizer_dir, "folder with tokenizer.json if not the model folder");
  cmd->add_option("--served-model-name", a->served_model_names,
                  "the model's name (reported by /v1/models and in replies; default: the folder name), then any "
                  "aliases it also answers to");
  cmd->add_flag("--strict-model-name", a->strict_model_name,
                "answer 404 to requests whose `model` is not a served name (by default any name is accepted, as "
                "text-generation-inference does)");
  cmd->add_option("--chat-template", a->chat_template, "a .jinja file replacing the model's chat template");
  cmd->add_option("--host", a->host, "address to listen on (127.0.0.1)");
  cmd->add_option("--port", a->port, "TCP port (8080; 0 picks a free one, printed at start)");
  cmd->add_option("--backend", a->backend, "cpu, cuda or auto");
  cmd->add_option("--page-size", a->page_size, "tokens per KV page (16)");
  cmd->add_option("--seed", a->seed, "seed for requests that bring none, and for --dummy-weights");
  add_engine_flags(cmd, a->engine);
  cmd->add_option("--http-threads", a->http_threads, "HTTP I/O threads (default: min(4, cores))");
  cmd->add_option("--max-body-bytes", a->max_body_bytes, "largest request body accepted, e.g. 8MiB (413 above)");
  cmd->add_option("--max-concurrent-requests", a->max_concurrent_requests,
                  "generation requests in flight at once; more get 429 (256)");
  cmd->add_option("--read-timeout", a->read_timeout, "seconds to receive one request (30)");
  cmd->add_option("--idle-timeout", a->idle_timeout, "seconds a keep-alive connection may stay idle (75)");
  cmd->add_option("--drain-timeout", a->drain_timeout, "on SIGTERM, seconds in-flight requests may still run (30)");
  cmd->add_flag("--no-log-requests", a->no_log_requests, "do not log one line per request");
  cmd->add_option("--log-level", a->log_level, "trace, debug, info, warn, error (info)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace fg::cli
