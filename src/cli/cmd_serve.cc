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
  std::string reasoning_parser = "auto";
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string backend = "auto";
  int page_size = 16;
  uint64_t seed = 0;
  EngineFlags engine;
  int http_threads = 0;
  std::string api_key;  // also FLASHGEN_API_KEY
  std::string max_body_bytes = "8MiB";
  std::string max_header_bytes = "16KiB";
  int64_t max_connections = 4096;
  int64_t max_concurrent_requests = 256;
  int64_t max_queued_requests = 256;
  int64_t max_prompt_tokens = 0;
  int64_t max_output_tokens = 0;
  int max_n = 16;
  int max_stop_sequences = -1;  // -1: each API's own default (OpenAI 16, TGI 4)
  int64_t max_stop_bytes = 1024;
  int max_logprobs = 20;
  int max_json_depth = 64;
  double read_timeout = 30.0;
  double idle_timeout = 75.0;
  double write_timeout = 60.0;
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
  if (a.max_queued_requests <= 0) fail("--max-queued-requests must be positive");
  if (a.max_connections <= 0) fail("--max-connections must be positive");
  if (a.max_prompt_tokens < 0) fail("--max-prompt-tokens must be >= 0 (0: the context)");
  if (a.max_output_tokens < 0) fail("--max-output-tokens must be >= 0 (0: the context)");
  if (a.max_n <= 0) fail("--max-n must be positive");
  if (a.max_stop_sequences < -1) fail("--max-stop-sequences must be >= 0");
  if (a.max_stop_bytes <= 0) fail("--max-stop-bytes must be positive");
  if (a.max_logprobs < 0) fail("--max-logprobs must be >= 0");
  if (a.max_json_depth < 2) fail("--max-json-depth must be at least 2");
  for (double t : {a.read_timeout, a.idle_timeout, a.write_timeout, a.drain_timeout})
    if (!(t > 0.0)) fail("--read-timeout, --idle-timeout, --write-timeout and --drain-timeout must be positive");

  server::EngineBackendOptions o;
  o.served_model_names = a.served_model_names;
  o.tokenizer_dir = a.tokenizer_dir;
  o.chat_template_file = a.chat_template;
  o.reasoning_parser = a.reasoning_parser;
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
  auto header = parse_byte_size(a.max_header_bytes);
  if (!header.is_ok() || *header < 1024 || *header > (64 << 20))
    fail("--max-header-bytes: expected a size between 1KiB and 64MiB, such as 16KiB");
  so.http.max_header_bytes = size_t(*header);
  so.http.max_connections = a.max_connections;
  so.http.read_timeout_s = a.read_timeout;
  so.http.idle_timeout_s = a.idle_timeout;
  so.http.write_timeout_s = a.write_timeout;
  so.http.drain_timeout_s = a.drain_timeout;
  so.api.api_key = a.api_key;
  so.api.max_concurrent_requests = a.max_concurrent_requests;
  so.api.max_queued_requests = a.max_queued_requests;
  so.api.limits.max_prompt_tokens = a.max_prompt_tokens;
  so.api.limits.max_output_tokens = a.max_output_tokens;
  so.api.limits.max_stop_bytes = size_t(a.max_stop_bytes);
  so.api.limits.max_json_depth = a.max_json_depth;
  so.api.openai.max_n = a.max_n;
  so.api.tgi.max_best_of = a.max_n;
  so.api.openai.max_logprobs = a.max_logprobs;
  so.api.tgi.max_top_n_tokens = std::min(so.api.tgi.max_top_n_tokens, a.max_logprobs);
  if (a.max_stop_sequences >= 0) {
    so.api.openai.max_stop = a.max_stop_sequences;
    so.api.tgi.max_stop_sequences = a.max_stop_sequences;
  }
  so.api.log_requests = !a.no_log_requests;
  so.api.strict_model_name = a.strict_model_name;

  spdlog::info("flashgen serve: loading {}", o.runner.model_dir);
  auto backend = server::EngineBackend::create(o);
  if (!backend.is_ok()) fail(backend.status().to_string());
  const server::BackendStats st = (*backend)->stats();
  spdlog::info("flashgen serve: {} on {}, {} KV pages of {} tokens, max_model_len {}{}", (*backend)->model_info().id,
               (*backend)->model_info().device, st.kv_pages_total, a.page_size, (*backend)->model_info().max_model_len,
               (*backend)->model_info().has_chat_template ? "" : " (no chat template: /v1/chat/completions refuses)");
  if ((*backend)->model_info().reasoning)
    spdlog::info(
        "flashgen serve: chat replies return the model's <think> block as reasoning_content "
        "(--reasoning-parser none keeps it in content)");
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
  cmd->add_option("--reasoning-parser", a->reasoning_parser,
                  "auto: chat replies return a <think> ... </think> block apart, as reasoning_content, when the "
                  "chat template speaks of one; think: always; none: the block stays in content (auto)")
      ->check(CLI::IsMember({"auto", "think", "none"}));
  cmd->add_option("--host", a->host, "address to listen on (127.0.0.1)");
  cmd->add_option("--port", a->port, "TCP port (8080; 0 picks a free one, printed at start)");
  cmd->add_option("--backend", a->backend, "cpu, cuda or auto");
  cmd->add_option("--page-size", a->page_size, "tokens per KV page (16)");
  cmd->add_option("--seed", a->seed, "seed for requests that bring none, and for --dummy-weights");
  add_engine_flags(cmd, a->engine);
  cmd->add_option("--http-threads", a->http_threads, "HTTP I/O threads (default: min(4, cores))");
  cmd->add_option("--api-key", a->api_key,
                  "require 'Authorization: Bearer KEY' on every route except /health (401 otherwise)")
      ->envname("FLASHGEN_API_KEY");
  cmd->add_option("--max-body-bytes", a->max_body_bytes, "largest request body accepted, e.g. 8MiB (413 above)");
  cmd->add_option("--max-header-bytes", a->max_header_bytes, "largest request header block, e.g. 16KiB (431 above)");
  cmd->add_option("--max-connections", a->max_connections,
                  "open HTTP connections at most; more are answered 429 and closed (4096)");
  cmd->add_option("--max-concurrent-requests", a->max_concurrent_requests,
                  "generation requests in flight at once; more get 429 (256)");
  cmd->add_option("--max-queued-requests", a->max_queued_requests,
                  "generation requests accepted that have not produced output yet; more get 429 (256)");
  cmd->add_option("--max-prompt-tokens", a->max_prompt_tokens,
                  "prompt tokens of one prompt at most; more get 400 (0: the context)");
  cmd->add_option("--max-output-tokens", a->max_output_tokens,
                  "max_tokens / max_new_tokens a request may ask; more get 400, and it caps the defaults (0: the "
                  "context)");
  cmd->add_option("--max-n", a->max_n, "choices per prompt (OpenAI n and best_of, TGI best_of) at most (16)");
  cmd->add_option("--max-stop-sequences", a->max_stop_sequences,
                  "stop strings per request at most (default: 16 on OpenAI routes, 4 on TGI routes)");
  cmd->add_option("--max-stop-bytes", a->max_stop_bytes, "bytes of one stop string at most (1024)");
  cmd->add_option("--max-logprobs", a->max_logprobs,
                  "logprobs / top_logprobs at most (20); TGI's top_n_tokens at most min(5, this)");
  cmd->add_option("--max-json-depth", a->max_json_depth, "nesting of arrays and objects in a request body (64)");
  cmd->add_option("--read-timeout", a->read_timeout, "seconds to receive one request (30; 408 after that)");
  cmd->add_option("--idle-timeout", a->idle_timeout, "seconds a keep-alive connection may stay idle (75)");
  cmd->add_option("--write-timeout", a->write_timeout,
                  "seconds one write to a client may take; a client that reads slower is dropped and its request "
                  "cancelled (60)");
  cmd->add_option("--drain-timeout", a->drain_timeout,
                  "on SIGTERM or SIGINT, seconds in-flight requests may still run (30)");
  cmd->add_flag("--no-log-requests", a->no_log_requests, "do not log one line per request");
  cmd->add_option("--log-level", a->log_level, "trace, debug, info, warn, error (info)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace fg::cli
