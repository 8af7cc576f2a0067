// ApiServer: the route table of `flashgen serve` on top of a GenerationBackend, and the glue that
// runs it on the HTTP transport.
//
// Routes: OpenAI (/v1/completions, /v1/chat/completions, /v1/models[/{id}]), TGI (/generate,
// /generate_stream, POST /, /info), and /health, /metrics, /tokenize, /detokenize.
// Every reply (also 401/404/405 and transport errors) is JSON in the error shape of the API the
// path belongs to, and is counted in /metrics. With an API key, every route but /health checks the
// bearer token first (compared in constant time), so an unauthenticated client learns nothing
// about routes or parameters.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/generation_backend.h"
#include "server/generation_reply.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/tgi_api.h"

namespace fg::server {

struct ApiServerConfig {
  int64_t max_concurrent_requests = 256;  // generation requests in flight; more get 429
  int64_t max_queued_requests = 256;      // of those, requests that have produced nothing yet; more get 429
  RequestLimits limits;                   // prompt/output tokens, stop-string bytes, JSON nesting
  OpenAiLimits openai;
  TgiLimits tgi;
  // Not empty: every route except /health needs "Authorization: Bearer <api_key>" (401 otherwise).
  std::string api_key;
  bool log_requests = true;
  // A request whose `model` is none of the served names: accepted (false, as text-generation-
  // inference does with one model) or answered 404 model_not_found (true, --strict-model-name).
  bool strict_model_name = false;
};

class ApiServer {
 public:
  ApiServer(GenerationBackend& backend, ApiServerConfig config);

  Reply handle(HttpRequest&& req);
  // Error reply for failures the transport detects (shape chosen by path).
  HttpResponse transport_error(int status, const std::string& message, const std::string& path);

  // While draining, /health answers 503 so load balancers stop sending traffic.
  void set_draining(bool d) { draining_ = d; }
  Metrics& metrics() { return metrics_; }
  int64_t in_flight() const { return ctx_.in_flight.load(); }

 private:
  Reply route(const HttpRequest& req, std::string& route_name);
  // Null when the request may proceed, else the 401 reply.
  std::optional<Reply> check_api_key(const HttpRequest& req);
  Reply tokenize(const HttpRequest& req);
  Reply detokenize(const HttpRequest& req);

  GenerationBackend& backend_;
  ApiServerConfig config_;
  Metrics metrics_;
  ApiContext ctx_;
  std::atomic<bool> draining_{false};
};

// Runs the API on an HttpServer until SIGTERM/SIGINT (or `server->begin_shutdown()`), then drains.
// Returns when the server has stopped.
struct ServeOptions {
  HttpServerConfig http;
  ApiServerConfig api;
  bool handle_signals = true;
};
Status serve(GenerationBackend& backend, ServeOptions options);

}  // namespace fg::server
