// Route table and the non-generating routes (see api_server.h).
#include "server/api_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <string_view>

#include "server/json_fields.h"
#include "server/request_body.h"

namespace fg::server {

using nlohmann::json;

namespace {

bool is_tgi_path(const std::string& path) {
  return path == "/" || path == "/generate" || path == "/generate_stream" || path == "/info" || path == "/health";
}

// Whether `s` starts with `prefix`, ASCII case-insensitively (HTTP auth schemes are).
bool starts_with_ignoring_case(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

std::string random_prefix() {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 8; ++i) s += kHex[rd() % 16];
  return s;
}

}  // namespace

ApiServer::ApiServer(GenerationBackend& backend, ApiServerConfig config)
    : backend_(backend), config_(std::move(config)), ctx_(backend, metrics_) {
  ctx_.max_concurrent_requests = config_.max_concurrent_requests;
  ctx_.max_queued_requests = config_.max_queued_requests;
  ctx_.limits = config_.limits;
  ctx_.log_requests = config_.log_requests;
  ctx_.strict_model_name = config_.strict_model_name;
  ctx_.id_prefix = random_prefix();
}

HttpResponse ApiServer::transport_error(int status, const std::string& message, const std::string& path) {
  const ApiDialect d = is_tgi_path(path) ? ApiDialect::kTgi : ApiDialect::kOpenAi;
  ApiError e{status, message, "", "", ""};
  if (status == 413) e.code = "request_too_large";
  if (status == 431) e.code = "headers_too_large";
  if (status == 429) e.code = "too_many_connections";
  metrics_.count_request(path.empty() ? "other" : path, status);
  // The transport's status stands as it is (no 400 -> 422 for TGI paths: these are not
  // validation errors of a parsed request).
  HttpResponse r;
  r.status = status;
  r.body = error_body(e, d);
  if (status == 429) r.headers.push_back({"Retry-After", "1"});
  return r;
}

std::optional<Reply> ApiServer::check_api_key(const HttpRequest& req) {
  if (config_.api_key.empty() || req.path == "/health") return std::nullopt;
  std::string_view auth = req.authorization;
  constexpr std::string_view kScheme = "Bearer ";
  const bool bearer = auth.size() >= kScheme.size() && starts_with_ignoring_case(auth, kScheme);
  std::string_view token = bearer ? auth.substr(kScheme.size()) : std::string_view();
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (bearer && constant_time_equal(token, config_.api_key)) return std::nullopt;
  ApiError e{401,
             auth.empty() ? "Missing API key: send the header 'Authorization: Bearer <key>'."
                          : "Invalid API key in the Authorization header.",
             "authentication_error", "", "invalid_api_key"};
  Reply r = error_reply(e, is_tgi_path(req.path) ? ApiDialect::kTgi : ApiDialect::kOpenAi);
  r.head.headers.push_back({"WWW-Authenticate", "Bearer"});
  return r;
}

Reply ApiServer::handle(HttpRequest&& req) {
  std::string route_name;
  if (std::optional<Reply> denied = check_api_key(req)) {
    metrics_.count_request("unauthorized", denied->head.status);
    return std::move(*denied);
  }
  Reply r = route(req, route_name);
  // Generating replies count themselves when they finish; count everything else now.
  if (!r.source) metrics_.count_request(route_name, r.head.status);
  return r;
}

Reply ApiServer::route(const HttpRequest& req, std::string& route_name) {
  const std::string& p = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  route_name = p;
  auto method_not_allowed = [&](const char* allowed) {
    Reply r = error_reply(ApiError{405, "Method " + req.method + " is not allowed on " + p + "; use " + allowed + ".",
                                   "invalid_request_error", "", "method_not_allowed"},
                          is_tgi_path(p) ? ApiDialect::kTgi : ApiDialect::kOpenAi);
    r.head.headers.push_back({"Allow", allowed});
    return r;
  };
  if (p == "/v1/chat/completions") {
    if (!post) return method_not_allowed("POST");
    return openai_chat_completions(ctx_, config_.openai, req);
  }
  if (p == "/v1/completions") {
    if (!post) return method_not_allowed("POST");
    return openai_completions(ctx_, config_.openai, req);
  }
  if (p == "/v1/models" || p.rfind("/v1/models/", 0) == 0) {
    if (!get) return method_not_allowed("GET");
    route_name = "/v1/models";
    return openai_models(ctx_, p.size() > 11 ? std::string_view(p).substr(11) : std::string_view());
  }
  if (p == "/generate" || p == "/generate_stream") {
    if (!post) return method_not_allowed("POST");
    return tgi_generate(ctx_, config_.tgi, req, p == "/generate" ? TgiRoute::kGenerate : TgiRoute::kGenerateStream);
  }
  if (p == "/") {
    if (!post) return method_not_allowed("POST");
    return tgi_generate(ctx_, config_.tgi, req, TgiRoute::kCompat);
  }
  if (p == "/info") {
    if (!get) return method_not_allowed("GET");
    return tgi_info(ctx_, config_.tgi);
  }
  if (p == "/health") {
    if (!get) return method_not_allowed("GET");
    if (draining_.load())
      return error_reply(ApiError{503, "The server is shutting down.", "", "", ""}, ApiDialect::kTgi);
    Reply r;
    r.head.status = 200;
    r.head.body = "{}";
    return r;
  }
  if (p == "/metrics") {
    if (!get) return method_not_allowed("GET");
    Reply r;
    r.head.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.head.body = metrics_.render_prometheus(backend_.stats(), backend_.model_info());
    return r;
  }
  if (p == "/tokenize") {
    if (!post) return method_not_allowed("POST");
    return tokenize(req);
  }
  if (p == "/detokenize") {
    if (!post) return method_not_allowed("POST");
    return detokenize(req);
  }
  route_name = "other";
  return error_reply(
      not_found_error("No route for " + req.method + " " + p + ". See docs/api.md for the endpoints.", "not_found"),
      ApiDialect::kOpenAi);
}

// POST /tokenize {"prompt": "..."} or {"messages": [...]}: the ids the generating routes would use.
Reply ApiServer::tokenize(const HttpRequest& req) {
  json body;
  if (auto err = parse_json_object(req, body)) return error_reply(*err, ApiDialect::kOpenAi);
  JsonFields f(body);
  f.get_string("model");
  auto prompt = f.get_string("prompt");
  const json* messages = f.get_array("messages");
  auto add_special = f.get_bool("add_special_tokens");
  auto add_gen = f.get_bool("add_generation_prompt");
  if (f.ok() && !prompt == !messages)
    f.fail(invalid_request("Give exactly one of 'prompt' (text) or 'messages' (a chat).", "prompt", "invalid_value"));
  if (f.ok()) {
    std::string unknown = f.unknown_field();
    if (!unknown.empty()) f.fail(unknown_parameter(unknown));
  }
  if (!f.ok()) return error_reply(*f.error(), ApiDialect::kOpenAi);
  std::string text;
  if (prompt) {
    text = *prompt;
  } else {
    const nlohmann::ordered_json omessages = nlohmann::ordered_json::parse(req.body).at("messages");
    Result<std::string> r =
        backend_.render_chat(omessages, nullptr, add_gen.value_or(true), nlohmann::ordered_json::object());
    if (!r.is_ok()) return error_reply(chat_template_error(r.status(), "messages"), ApiDialect::kOpenAi);
    text = *r;
  }
  Result<std::vector<int32_t>> ids = backend_.tokenize(text, add_special.value_or(prompt.has_value()));
  if (!ids.is_ok()) return error_reply(api_error_from_status(ids.status(), ApiDialect::kOpenAi), ApiDialect::kOpenAi);
  return json_reply(200,
                    {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", backend_.model_info().max_model_len}});
}

// POST /detokenize {"tokens": [ids]}: the text.
Reply ApiServer::detokenize(const HttpRequest& req) {
  json body;
  if (auto err = parse_json_object(req, body)) return error_reply(*err, ApiDialect::kOpenAi);
  JsonFields f(body);
  f.get_string("model");
  const json* tokens = f.get_array("tokens");
  auto skip = f.get_bool("skip_special_tokens");
  if (f.ok() && !tokens) f.fail(missing_parameter("tokens"));
  if (f.ok()) {
    std::string unknown = f.unknown_field();
    if (!unknown.empty()) f.fail(unknown_parameter(unknown));
  }
  if (!f.ok()) return error_reply(*f.error(), ApiDialect::kOpenAi);
  std::vector<int32_t> ids;
  const int64_t vocab = backend_.model_info().vocab_size;
  for (const json& e : *tokens) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= vocab)
      return error_reply(invalid_request("'tokens' must hold token ids in [0, " + std::to_string(vocab) + ").",
                                         "tokens", "invalid_value"),
                         ApiDialect::kOpenAi);
    ids.push_back(int32_t(e.get<int64_t>()));
  }
  Result<std::string> text = backend_.detokenize(ids, skip.value_or(false));
  if (!text.is_ok())
    return error_reply(api_error_from_status(text.status(), ApiDialect::kOpenAi, "tokens"), ApiDialect::kOpenAi);
  return json_reply(200, {{"prompt", *text}});
}

Status serve(GenerationBackend& backend, ServeOptions options) {
  ApiServer api(backend, options.api);
  options.http.error_reply = [&api](int status, const std::string& message, const std::string& path) {
    return api.transport_error(status, message, path);
  };
  HttpServer* http_ptr = nullptr;
  HttpServer http(options.http, [&api, &http_ptr](HttpRequest&& req) {
    if (http_ptr && http_ptr->draining()) api.set_draining(true);
    return api.handle(std::move(req));
  });
  http_ptr = &http;
  api.metrics().set_connection_counts(
      [&http] { return std::make_pair(http.open_connections(), http.refused_connections()); });
  FG_RETURN_IF_ERROR(http.start());
  if (options.handle_signals) http.install_signal_handlers();
  spdlog::info("flashgen serve: listening on http://{}:{} (model '{}', max_model_len {}{})", options.http.host,
               http.port(), backend.model_info().id, backend.model_info().max_model_len,
               options.api.api_key.empty() ? "" : ", API key required");
  if (options.api.api_key.empty() && options.http.host != "127.0.0.1" && options.http.host != "::1")
    spdlog::warn("flashgen serve: listening on {} without --api-key: anyone who can reach it may use it",
                 options.http.host);
  http.wait();
  api.set_draining(true);
  spdlog::info("flashgen serve: stopped ({} requests still in flight were cancelled)", api.in_flight());
  return Status::ok();
}

}  // namespace fg::server
