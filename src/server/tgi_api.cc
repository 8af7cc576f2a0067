// TGI-compatible routes (see tgi_api.h).
#include "server/tgi_api.h"

#include <algorithm>
#include <cmath>

#include "server/json_fields.h"
#include "server/request_body.h"

namespace fg::server {

using nlohmann::json;

namespace {

ApiError validation(std::string message, std::string param = {}) {
  return ApiError{422, std::move(message), "invalid_request_error", std::move(param), "validation"};
}

const char* tgi_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "length";
    case FinishReason::kEos:
    case FinishReason::kStopToken: return "eos_token";
    case FinishReason::kStopString: return "stop_sequence";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

json token_json(const GeneratedToken& t, const std::string& text) {
  return {{"id", t.id}, {"text", text}, {"logprob", t.logprob}, {"special", t.special}};
}

json top_tokens_json(const GeneratedToken& t) {
  json a = json::array();
  for (const TokenLogprob& tl : t.top)
    a.push_back({{"id", tl.id}, {"text", tl.text}, {"logprob", tl.logprob}, {"special", false}});
  return a;
}

struct TgiParams {
  bool details = false;
  bool decoder_input_details = false;
  bool speculative = true;
  std::optional<ConstraintSpec> constraint;
  bool return_full_text = false;
  bool sampling = false;
  int top_n_tokens = 0;
  int64_t truncate = 0;
  int64_t best_of = 1;
  std::optional<int64_t> max_new_tokens;
  SamplingParams s;
};

class TgiReply final : public GenerationReply {
 public:
  TgiReply(ApiContext& ctx, TgiRoute route, std::string id, const TgiParams& p, std::string inputs)
      : GenerationReply(ctx,
                        route == TgiRoute::kGenerate         ? "/generate"
                        : route == TgiRoute::kGenerateStream ? "/generate_stream"
                                                             : "/",
                        std::move(id), ApiDialect::kTgi),
        route_(route),
        p_(p),
        inputs_(std::move(inputs)) {
    keep_tokens_ = true;
  }
  void set_streamed(bool s) { stream_ = s; }

 protected:
  void on_event(size_t index, const GenerationEvent& ev, std::string& out) override {
    if (!stream_) return;
    if (ev.finish == FinishReason::kError) {
      ApiError e = api_error_from_status(ev.error, ApiDialect::kTgi);
      e.http_status = 424;
      out += "data:" + tgi_error_body(e) + "\n\n";
      return;
    }
    const size_t n = ev.tokens.size();
    for (size_t k = 0; k < n; ++k) {
      const bool last = k + 1 == n;
      json e = {{"index", sent_++},
                {"token", token_json(ev.tokens[k], last ? ev.text_delta : std::string())},
                {"generated_text", nullptr},
                {"details", nullptr}};
      if (p_.top_n_tokens > 0) e["top_tokens"] = top_tokens_json(ev.tokens[k]);
      if (last && ev.finished()) finish_fields(e, ev);
      out += "data:" + dump_json(e) + "\n\n";
    }
    if (n == 0 && ev.finished()) {
      // A finish without a token (cancellation): TGI events always carry one, so send an empty one.
      json e = {{"index", sent_++},
                {"token", {{"id", 0}, {"text", ev.text_delta}, {"logprob", 0.0}, {"special", true}}},
                {"generated_text", nullptr},
                {"details", nullptr}};
      finish_fields(e, ev);
      out += "data:" + dump_json(e) + "\n\n";
    } else if (n == 0 && !ev.text_delta.empty()) {
      // Text released without a new token (held-back stop-string prefix): attach to an empty token.
      json e = {{"index", sent_++},
                {"token", {{"id", 0}, {"text", ev.text_delta}, {"logprob", 0.0}, {"special", true}}},
                {"generated_text", nullptr},
                {"details", nullptr}};
      out += "data:" + dump_json(e) + "\n\n";
    }
  }

  void on_complete(std::string& out) override {
    final_head_.status = 200;
    if (stream_) return;
    if (const GenerationEvent* err = first_error()) {
      ApiError e = api_error_from_status(err->error, ApiDialect::kTgi);
      final_head_.status = 424;
      e.http_status = 424;
      out += tgi_error_body(e);
      return;
    }
    if (any_cancelled()) {
      final_head_.status = 503;
      out += tgi_error_body(ApiError{503, "Request cancelled: the server is shutting down.", "", "", ""});
      return;
    }
    // best_of: the candidate whose tokens have the highest total logprob (ties: the earlier one).
    size_t best = 0;
    double best_sum = 0.0;
    for (size_t i = 0; i < choices_.size(); ++i) {
      double sum = 0.0;
      for (const GeneratedToken& t : choices_[i].tokens) sum += t.logprob;
      if (i == 0 || sum > best_sum) {
        best = i;
        best_sum = sum;
      }
    }
    const Choice& c = choices_[best];
    json body = {{"generated_text", full_text(c.text)}};
    if (p_.details) {
      json d = sequence_details(c);
      json others = nullptr;
      if (choices_.size() > 1) {
        others = json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
          if (i == best) continue;
          json o = {{"generated_text", full_text(choices_[i].text)}};
          o.update(sequence_details(choices_[i]));
          others.push_back(std::move(o));
        }
      }
      d["best_of_sequences"] = std::move(others);
      body["details"] = std::move(d);
    }
    if (route_ == TgiRoute::kCompat) body = json::array({std::move(body)});
    out += dump_json(body);
  }

 private:
  std::string full_text(const std::string& generated) const {
    return p_.return_full_text ? inputs_ + generated : generated;
  }

  // One sequence's details: finish reason, token count, seed, prefill, tokens (and top tokens).
  json sequence_details(const Choice& c) const {
    json d = {{"finish_reason", tgi_finish(*c.final.finish)},
              {"generated_tokens", c.generated},
              {"seed", p_.sampling ? json(c.final.seed) : json(nullptr)},
              {"prefill", prefill(c.final)}};
    json toks = json::array(), tops = json::array();
    for (const GeneratedToken& t : c.tokens) {
      toks.push_back(token_json(t, t.text));
      tops.push_back(top_tokens_json(t));
    }
    d["tokens"] = std::move(toks);
    if (p_.top_n_tokens > 0) d["top_tokens"] = std::move(tops);
    return d;
  }

  void finish_fields(json& e, const GenerationEvent& ev) {
    e["generated_text"] = full_text(choices_[0].text);
    if (p_.details) {
      e["details"] = {{"finish_reason", tgi_finish(*ev.finish)},
                      {"generated_tokens", choices_[0].generated},
                      {"seed", p_.sampling ? json(ev.seed) : json(nullptr)}};
    }
  }

  json prefill(const GenerationEvent& fin) const {
    json a = json::array();
    if (!p_.decoder_input_details) return a;
    for (size_t i = 0; i < fin.prompt_logprobs.size(); ++i) {
      const GeneratedToken& t = fin.prompt_logprobs[i];
      a.push_back({{"id", t.id},
                   {"text", t.text},
                   {"logprob", i == 0 || std::isnan(t.logprob) ? json(nullptr) : json(t.logprob)}});
    }
    return a;
  }

  TgiRoute route_;
  TgiParams p_;
  std::string inputs_;
  bool stream_ = false;
  int64_t sent_ = 0;
};

void read_params(JsonFields& f, const TgiLimits& limits, const RequestLimits& rl, const ModelInfo& info, TgiParams& p) {
  auto fail_if = [&](bool bad, std::string msg, const char* param) {
    if (bad) f.fail(validation(std::move(msg), param));
  };
  if (auto b = f.get_int("best_of")) {
    fail_if(*b < 1 || *b > limits.max_best_of,
            "`best_of` must be >= 1 and <= " + std::to_string(limits.max_best_of) + ". Given: " + std::to_string(*b),
            "best_of");
    p.best_of = *b;
  }
  p.decoder_input_details = f.get_bool("decoder_input_details").value_or(false);
  p.details = f.get_bool("details").value_or(false);
  p.speculative = f.get_bool("speculative").value_or(true);
  const bool do_sample = f.get_bool("do_sample").value_or(false);
  SamplingParams& s = p.s;
  auto temperature = f.get_number("temperature");
  auto top_p = f.get_number("top_p");
  auto top_k = f.get_int("top_k");
  if (temperature)
    fail_if(!(*temperature > 0.0 && *temperature <= 100.0), "`temperature` must be strictly positive", "temperature");
  if (top_p) fail_if(!(*top_p > 0.0 && *top_p <= 1.0), "`top_p` must be > 0.0 and <= 1.0", "top_p");
  if (top_k) fail_if(*top_k <= 0, "`top_k` must be strictly positive", "top_k");
  if (auto v = f.get_number("repetition_penalty")) {
    fail_if(!(*v > 0.0), "`repetition_penalty` must be strictly positive", "repetition_penalty");
    s.repetition_penalty = float(*v);
  }
  if (auto v = f.get_number("frequency_penalty")) {
    fail_if(!(*v >= -2.0 && *v <= 2.0), "`frequency_penalty` must be >= -2.0 and <= 2.0", "frequency_penalty");
    s.frequency_penalty = float(*v);
  }
  if (auto m = f.get_int("max_new_tokens")) {
    fail_if(*m <= 0, "`max_new_tokens` must be strictly positive", "max_new_tokens");
    p.max_new_tokens = m;
  }
  p.return_full_text = f.get_bool("return_full_text").value_or(false);
  if (auto seed = f.get_int("seed")) {
    fail_if(*seed < 0, "`seed` must be a non-negative integer", "seed");
    s.seed = uint64_t(*seed);
  }
  if (const json* stop = f.get_array("stop")) {
    fail_if(int(stop->size()) > limits.max_stop_sequences,
            "`stop` supports up to " + std::to_string(limits.max_stop_sequences) +
                " stop sequences. Given: " + std::to_string(stop->size()),
            "stop");
    for (const json& e : *stop) {
      if (!e.is_string()) {
        f.fail(validation("`stop` must be an array of strings", "stop"));
        break;
      }
      if (!e.get<std::string>().empty()) s.stop.push_back(e.get<std::string>());
    }
    for (const std::string& st : s.stop)
      if (auto err = check_stop_string(st, "stop", rl)) f.fail(validation(err->message, "stop"));
  }
  if (auto n = f.get_int("top_n_tokens")) {
    fail_if(*n < 0 || *n > limits.max_top_n_tokens,
            "`top_n_tokens` must be >= 0 and <= " + std::to_string(limits.max_top_n_tokens), "top_n_tokens");
    p.top_n_tokens = int(*n);
  }
  if (auto t = f.get_int("truncate")) {
    fail_if(*t <= 0, "`truncate` must be strictly positive", "truncate");
    p.truncate = *t;
  }
  if (f.get_number("typical_p")) f.fail(validation("`typical_p` is not supported by flashgen", "typical_p"));
  if (f.get_bool("watermark").value_or(false))
    f.fail(validation("`watermark` is not supported by flashgen", "watermark"));
  // grammar: {"type": "json", "value": <JSON schema (object or its text)>} | {"type": "regex",
  // "value": "<regex>"}; flashgen also takes {"type": "gbnf", "value": "<grammar>"}.
  if (const json* g = f.get_raw("grammar")) {
    if (!g->is_null()) {
      const auto type = g->is_object() ? g->find("type") : g->end();
      const auto value = g->is_object() ? g->find("value") : g->end();
      if (!g->is_object() || type == g->end() || !type->is_string() || value == g->end()) {
        f.fail(validation("`grammar` must be {\"type\": \"json\" | \"regex\", \"value\": ...}", "grammar"));
      } else if (*type == "json" || *type == "json_object") {
        if (value->is_string())
          p.constraint = ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, value->get<std::string>(), "", true};
        else if (value->is_object())
          p.constraint = ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, value->dump(), "", true};
        else
          f.fail(validation("`grammar.value` of type json must be a JSON schema", "grammar"));
      } else if ((*type == "regex" || *type == "gbnf") && value->is_string()) {
        p.constraint = ConstraintSpec{*type == "regex" ? ConstraintSpec::Kind::kRegex : ConstraintSpec::Kind::kGbnf,
                                      value->get<std::string>(), "", true};
      } else {
        f.fail(validation("`grammar.type` must be \"json\" or \"regex\" (with a string value)", "grammar"));
      }
    }
  }
  if (f.get_raw("adapter_id"))
    f.fail(validation("`adapter_id` (LoRA adapters) is not supported by flashgen", "adapter_id"));
  // TGI samples when asked to, or when any warper is set away from its neutral value.
  p.sampling = do_sample || (temperature && *temperature != 1.0) || (top_k && *top_k > 0) || (top_p && *top_p < 1.0);
  s.temperature = p.sampling ? float(temperature.value_or(1.0)) : 0.0f;
  s.top_p = float(top_p.value_or(1.0));
  s.top_k = top_k ? int(std::min<int64_t>(*top_k, info.vocab_size)) : 0;
  s.logprobs = p.top_n_tokens;  // TGI token events always carry the chosen token's logprob
  fail_if(p.best_of > 1 && !p.sampling,
          "`best_of` > 1 needs sampling: set `do_sample`, or `temperature`, `top_k` or `top_p` away from their "
          "defaults (greedy candidates would all be the same)",
          "best_of");
}

}  // namespace

Reply tgi_generate(ApiContext& ctx, const TgiLimits& limits, const HttpRequest& req, TgiRoute route) {
  json body;
  if (auto err = parse_json_object(req, body, ctx.limits.max_json_depth)) return error_reply(*err, ApiDialect::kTgi);
  const ModelInfo& info = ctx.backend.model_info();
  JsonFields f(body);
  auto inputs = f.get_string("inputs");
  if (f.ok() && !inputs) f.fail(validation("`inputs` is required", "inputs"));
  if (f.ok() && inputs->empty()) f.fail(validation("`inputs` cannot be empty", "inputs"));
  bool stream = route == TgiRoute::kGenerateStream;
  if (auto st = f.get_bool("stream"); st && route == TgiRoute::kCompat) stream = *st;
  TgiParams p;
  const json* params = f.get_object("parameters");
  if (!f.ok()) return error_reply(*f.error(), ApiDialect::kTgi);
  if (params) {
    JsonFields pf(*params);
    read_params(pf, limits, ctx.limits, info, p);
    if (pf.ok() && p.best_of > 1 && stream)
      pf.fail(validation("`best_of` > 1 cannot be streamed: the best candidate is known only at the end", "best_of"));
    if (!pf.ok()) return error_reply(*pf.error(), ApiDialect::kTgi);
    // A schema given as an object keeps the client's property order (the order its JSON is
    // generated in): read it again from the body in document order.
    if (p.constraint && p.constraint->kind == ConstraintSpec::Kind::kJsonSchema &&
        params->at("grammar").at("value").is_object())
      p.constraint->text = nlohmann::ordered_json::parse(req.body).at("parameters").at("grammar").at("value").dump();
  } else {
    const json no_params = json::object();
    JsonFields pf(no_params);
    read_params(pf, limits, ctx.limits, info, p);
  }
  Result<std::vector<int32_t>> ids = ctx.backend.tokenize(*inputs, /*add_special_tokens=*/true);
  if (!ids.is_ok())
    return error_reply(api_error_from_status(ids.status(), ApiDialect::kTgi, "inputs"), ApiDialect::kTgi);
  if (p.truncate > 0 && int64_t(ids->size()) > p.truncate) ids->erase(ids->begin(), ids->end() - p.truncate);
  LengthCheck lc = check_length(int64_t(ids->size()), p.max_new_tokens, limits.default_max_new_tokens,
                                info.max_model_len, "max_new_tokens", ctx.limits);
  if (lc.error) return error_reply(validation(lc.error->message, "max_new_tokens"), ApiDialect::kTgi);
  GenerationRequest r;
  r.request_id = ctx.make_id("tgi");
  r.prompt_ids = *ids;
  r.sampling = p.s;
  r.sampling.max_new_tokens = lc.max_new_tokens;
  r.include_stop_str_in_output = true;  // TGI keeps the stop sequence in generated_text
  r.skip_special_tokens = true;
  r.prompt_logprobs = p.decoder_input_details ? 0 : -1;
  r.speculative = p.speculative;
  r.constraint = p.constraint;
  auto reply = std::make_unique<TgiReply>(ctx, route, r.request_id, p, *inputs);
  reply->set_streamed(stream);
  std::vector<GenerationRequest> reqs;
  for (int64_t i = 0; i < p.best_of; ++i) {
    reqs.push_back(r);
    if (p.s.seed) reqs.back().sampling.seed = *p.s.seed + uint64_t(i);  // else each gets its own
  }
  if (auto err = reply->submit_all(std::move(reqs), size_t(p.best_of))) return error_reply(*err, ApiDialect::kTgi);
  Reply out;
  out.streamed = stream;
  if (stream) {
    out.head.content_type = "text/event-stream";
    out.head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  }
  out.source = std::move(reply);
  return out;
}

Reply tgi_info(ApiContext& ctx, const TgiLimits& limits) {
  const ModelInfo& info = ctx.backend.model_info();
  int64_t max_input = info.max_model_len - 1;
  if (ctx.limits.max_prompt_tokens > 0) max_input = std::min(max_input, ctx.limits.max_prompt_tokens);
  json j = {{"model_id", info.id},
            {"model_sha", nullptr},
            {"model_dtype", info.dtype},
            {"model_device_type", info.device},
            {"model_pipeline_tag", "text-generation"},
            {"max_concurrent_requests", ctx.max_concurrent_requests},
            {"max_best_of", limits.max_best_of},
            {"max_stop_sequences", limits.max_stop_sequences},
            {"max_input_tokens", max_input},
            {"max_input_length", max_input},
            {"max_total_tokens", info.max_model_len},
            {"vocab_size", info.vocab_size},
            {"validation_workers", 1},
            {"max_client_batch_size", 1},
            {"max_batch_total_tokens", info.max_batch_tokens},
            {"max_batch_prefill_tokens", info.max_batch_tokens},
            {"max_waiting_tokens", 0},
            {"waiting_served_ratio", 0.0},
            {"router", "flashgen"},
            {"version", "0.1.0"},
            {"sha", nullptr},
            {"docker_label", nullptr}};
  return json_reply(200, j);
}

}  // namespace fg::server
