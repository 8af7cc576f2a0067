// OpenAI-compatible routes (see openai_api.h): parameter validation, prompt preparation, and
// the completion / chat.completion object shapes, whole or streamed.
#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "grammar/tool_calls.h"
#include "server/json_fields.h"
#include "server/reasoning.h"
#include "server/request_body.h"

namespace fg::server {

using nlohmann::json;

namespace {

ApiError range_error(const std::string& param, const std::string& rule, double got) {
  std::string g =
      (got == std::floor(got) && std::fabs(got) < 1e15) ? std::to_string(int64_t(got)) : std::to_string(got);
  return invalid_request("Invalid '" + param + "': " + rule + ", got " + g + ".", param, "invalid_value");
}

ApiError unsupported_param(const std::string& param, const std::string& why) {
  return invalid_request("'" + param + "' is not supported by flashgen: " + why, param, "unsupported_parameter");
}

// Settings common to both endpoints, after validation.
struct CommonParams {
  std::string model;  // the name replies report
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // with include_usage: every chunk carries the usage so far
  int64_t n = 1;
  int64_t best_of = 0;  // completions: candidates per prompt, the n best returned (0: n)
  std::optional<int64_t> max_tokens;
  std::string max_tokens_param = "max_tokens";
  SamplingParams sampling;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  bool speculative = true;
  std::vector<int32_t> prediction;  // chat's predicted output, tokenized (empty: none)
  bool has_prediction = false;      // usage then reports accepted and rejected prediction tokens
  int logprobs = -1;
  int prompt_logprobs = -1;                  // completions with echo and logprobs: the echoed prompt's too
  int64_t truncate_prompt_tokens = 0;        // > 0: only the prompt's last this many tokens run
  std::optional<ConstraintSpec> constraint;  // response_format json, `grammar`, or forced tool calls
  bool jump_forward = true;
  bool tools_active = false;      // chat with tools and tool_choice not "none": calls are parsed out
  bool reasoning = false;         // chat: a <think> block is split out of the output (server/reasoning.h)
  bool reasoning_open = false;    // ... and the prompt left one open, so the output starts inside it
  bool include_reasoning = true;  // ... returned as reasoning_content (false: dropped)
};

// response_format ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}}), and flashgen's `grammar` (GBNF text) and `jump_forward` (bool).
void read_structured_output(JsonFields& f, const nlohmann::ordered_json& obody, CommonParams& p) {
  if (const json* rf = f.get_object("response_format")) {
    auto type = rf->find("type");
    if (type == rf->end() || !type->is_string()) {
      f.fail(invalid_type("response_format.type", "a string"));
    } else if (*type == "json_object") {
      p.constraint = ConstraintSpec{ConstraintSpec::Kind::kJsonObject, "", "", true};
    } else if (*type == "json_schema") {
      const auto js = obody.at("response_format").find("json_schema");
      if (js == obody.at("response_format").end() || !js->is_object()) {
        f.fail(missing_parameter("response_format.json_schema"));
      } else {
        const auto schema = js->find("schema");
        // A json_schema without a schema allows any JSON value: any object is what clients mean.
        if (schema == js->end() || schema->is_null())
          p.constraint = ConstraintSpec{ConstraintSpec::Kind::kJsonObject, "", "", true};
        else if (!schema->is_object() && !schema->is_boolean())
          f.fail(invalid_type("response_format.json_schema.schema", "an object"));
        else
          p.constraint = ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, schema->dump(), "", true};
      }
    } else if (*type != "text") {
      f.fail(
          invalid_request("Invalid value for 'response_format.type': expected 'text', 'json_object' or "
                          "'json_schema'.",
                          "response_format.type", "invalid_value"));
    }
  }
  if (auto g = f.get_string("grammar")) {
    if (p.constraint)
      f.fail(invalid_request("Give either 'grammar' or 'response_format', not both.", "grammar", "invalid_value"));
    else
      p.constraint = ConstraintSpec{ConstraintSpec::Kind::kGbnf, *g, "", true};
  }
  p.jump_forward = f.get_bool("jump_forward").value_or(true);
}

// Reads model, stream, stream_options, n, max_tokens, sampling, stop, seed and the extensions.
// With one model served, any `model` name is accepted (as text-generation-inference does, so
// clients that send a placeholder work) unless strict_model_name; replies report the name the
// client sent when it is one of the served names, else the served id.
void read_common(JsonFields& f, const OpenAiLimits& limits, const ApiContext& ctx, CommonParams& p) {
  const ModelInfo& info = ctx.backend.model_info();
  const bool strict_model_name = ctx.strict_model_name;
  auto model = f.get_string("model");
  if (f.ok() && !model) f.fail(missing_parameter("model"));
  if (f.ok() && !info.has_name(*model)) {
    if (strict_model_name) {
      f.fail(not_found_error("The model '" + *model + "' does not exist; this server serves '" + info.id + "'.",
                             "model_not_found"));
    }
    p.model = info.id;
  } else if (f.ok()) {
    p.model = *model;
  }
  p.stream = f.get_bool("stream").value_or(false);
  if (const json* so = f.get_object("stream_options")) {
    if (!p.stream) {
      f.fail(invalid_request("'stream_options' is only allowed when 'stream' is true.", "stream_options"));
    } else {
      JsonFields sf(*so, "stream_options.");
      p.include_usage = sf.get_bool("include_usage").value_or(false);
      const bool continuous = sf.get_bool("continuous_usage_stats").value_or(false);
      p.continuous_usage = p.include_usage && continuous;
      if (!sf.ok()) f.fail(*sf.error());
      std::string unknown = sf.unknown_field();
      if (!unknown.empty()) f.fail(unknown_parameter(unknown));
    }
  }
  if (auto n = f.get_int("n")) {
    if (*n < 1 || *n > limits.max_n)
      f.fail(range_error("n", "must be between 1 and " + std::to_string(limits.max_n), double(*n)));
    p.n = *n;
  }
  SamplingParams& s = p.sampling;
  s.temperature = 1.0f;  // OpenAI's default
  if (auto t = f.get_number("temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) f.fail(range_error("temperature", "must be between 0 and 2", *t));
    s.temperature = float(*t);
  }
  if (auto t = f.get_number("top_p")) {
    if (!(*t >= 0.0 && *t <= 1.0)) f.fail(range_error("top_p", "must be between 0 and 1", *t));
    s.top_p = *t <= 0.0 ? 1e-6f : float(*t);
  }
  if (auto v = f.get_number("presence_penalty")) {
    if (!(*v >= -2.0 && *v <= 2.0)) f.fail(range_error("presence_penalty", "must be between -2 and 2", *v));
    s.presence_penalty = float(*v);
  }
  if (auto v = f.get_number("frequency_penalty")) {
    if (!(*v >= -2.0 && *v <= 2.0)) f.fail(range_error("frequency_penalty", "must be between -2 and 2", *v));
    s.frequency_penalty = float(*v);
  }
  if (auto seed = f.get_int("seed")) s.seed = static_cast<uint64_t>(*seed);
  if (const json* stop = f.get_raw("stop")) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (int64_t(stop->size()) > limits.max_stop)
        f.fail(range_error("stop", "at most " + std::to_string(limits.max_stop) + " stop sequences are allowed",
                           double(stop->size())));
      for (const json& e : *stop) {
        if (!e.is_string()) {
          f.fail(invalid_type("stop", "a string or an array of strings"));
          break;
        }
        if (!e.get<std::string>().empty()) s.stop.push_back(e.get<std::string>());
      }
    } else {
      f.fail(invalid_type("stop", "a string or an array of strings"));
    }
    for (const std::string& st : s.stop)
      if (auto err = check_stop_string(st, "stop", ctx.limits)) f.fail(*err);
  }
  if (const json* lb = f.get_object("logit_bias")) {
    for (auto it = lb->begin(); it != lb->end() && f.ok(); ++it) {
      const std::optional<int32_t> id = token_id_from_key(it.key());
      if (!id || *id >= info.vocab_size) {
        f.fail(invalid_request(
            "'logit_bias' keys must be token ids in [0, " + std::to_string(info.vocab_size) + ") written in decimal.",
            "logit_bias", "invalid_value"));
      } else if (!it.value().is_number()) {
        f.fail(invalid_type("logit_bias", "an object of numbers"));
      } else if (const double b = it.value().get<double>();
                 !(b >= -SamplingParams::kMaxLogitBias && b <= SamplingParams::kMaxLogitBias)) {
        f.fail(range_error("logit_bias", "biases must be between -100 and 100", b));
      } else {
        s.logit_bias.emplace_back(*id, float(b));
      }
    }
  }
  f.get_string("user");
  // Extensions.
  if (auto k = f.get_int("top_k")) {
    if (*k < -1) f.fail(range_error("top_k", "must be -1 or 0 (off) or a positive integer", double(*k)));
    s.top_k = *k > 0 ? int(std::min<int64_t>(*k, 1 << 30)) : 0;
  }
  if (auto v = f.get_number("min_p")) {
    if (!(*v >= 0.0 && *v <= 1.0)) f.fail(range_error("min_p", "must be between 0 and 1", *v));
    s.min_p = float(*v);
  }
  if (auto v = f.get_number("repetition_penalty")) {
    if (!(*v > 0.0 && *v <= 100.0))
      f.fail(range_error("repetition_penalty", "must be greater than 0 and at most 100", *v));
    s.repetition_penalty = float(*v);
  }
  s.ignore_eos = f.get_bool("ignore_eos").value_or(false);
  if (auto v = f.get_int("truncate_prompt_tokens")) {
    if (*v < 1) f.fail(range_error("truncate_prompt_tokens", "must be at least 1", double(*v)));
    p.truncate_prompt_tokens = *v;
  }
  if (auto v = f.get_int("min_tokens")) {
    if (*v < 0 || *v > info.max_model_len)
      f.fail(range_error("min_tokens", "must be between 0 and the model's context", double(*v)));
    else
      s.min_new_tokens = int32_t(*v);
  }
  p.skip_special_tokens = f.get_bool("skip_special_tokens").value_or(true);
  p.include_stop_str_in_output = f.get_bool("include_stop_str_in_output").value_or(false);
  p.speculative = f.get_bool("speculative").value_or(true);
  if (const json* ids = f.get_array("stop_token_ids")) {
    for (const json& e : *ids) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= info.vocab_size) {
        f.fail(invalid_request("'stop_token_ids' must hold token ids in [0, " + std::to_string(info.vocab_size) + ").",
                               "stop_token_ids", "invalid_value"));
        break;
      }
      s.stop_token_ids.push_back(int32_t(e.get<int64_t>()));
    }
  }
}

void read_max_tokens(JsonFields& f, CommonParams& p, bool chat) {
  std::optional<int64_t> mt = f.get_int("max_tokens");
  if (chat) {
    if (auto mct = f.get_int("max_completion_tokens")) {
      mt = mct;
      p.max_tokens_param = "max_completion_tokens";
    }
  }
  if (mt) {
    const int64_t min = chat ? 1 : 0;
    if (*mt < min) f.fail(range_error(p.max_tokens_param, "must be at least " + std::to_string(min), double(*mt)));
    p.max_tokens = mt;
  }
}

// Token pieces as OpenAI's `bytes` arrays.
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json chat_logprob_entry(const GeneratedToken& t) {
  json top = json::array();
  for (const TokenLogprob& tl : t.top)
    top.push_back({{"token", tl.text}, {"logprob", tl.logprob}, {"bytes", bytes_of(tl.text)}});
  return {{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}, {"top_logprobs", top}};
}

// The echoed prompt's tokens (with their logprobs) followed by the generated ones.
std::vector<GeneratedToken> with_prompt(const std::vector<GeneratedToken>& prompt,
                                        const std::vector<GeneratedToken>& generated) {
  std::vector<GeneratedToken> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  return all;
}

// Completions logprobs object for `tokens`, with text offsets counted from `offset`. A token
// without a logprob (the prompt's first) has null for it and for its top list.
json completion_logprobs(const std::vector<GeneratedToken>& tokens, size_t offset, int top_n) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const GeneratedToken& t : tokens) {
    const bool scored = !std::isnan(t.logprob);
    toks.push_back(t.text);
    lps.push_back(scored ? json(t.logprob) : json(nullptr));
    if (scored && top_n > 0) {
      json m = json::object();
      for (const TokenLogprob& tl : t.top) m[tl.text] = tl.logprob;
      tops.push_back(m);
    } else {
      tops.push_back(nullptr);
    }
    offs.push_back(offset);
    offset += t.text.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

const char* openai_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "length";
    case FinishReason::kEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString: return "stop";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

ApiError generation_error(const GenerationEvent& ev) {
  ApiError e = api_error_from_status(ev.error.is_ok() ? Status(ErrorCode::kInternal, "generation failed") : ev.error,
                                     ApiDialect::kOpenAi);
  if (e.http_status < 500 && e.http_status != 429) e.http_status = 500;
  return e;
}

// Where a tool call begins in a format's output (the text before it is content).
std::vector<std::string> tool_call_markers(grammar::ToolCallFormat f) {
  switch (f) {
    case grammar::ToolCallFormat::kHermes: return {"<tool_call>"};
    case grammar::ToolCallFormat::kMistral: return {"[TOOL_CALLS]"};
    case grammar::ToolCallFormat::kLlama3Json: return {"<|python_tag|>", "{"};
  }
  return {};
}

// One reply object for both endpoints; `chat` picks the shapes.
class OpenAiReply final : public GenerationReply {
 public:
  OpenAiReply(ApiContext& ctx, bool chat, std::string id, std::string model, const CommonParams& p,
              std::vector<std::string> echo_prefix, std::optional<grammar::ToolCallFormat> tool_format)
      : GenerationReply(ctx, chat ? "/v1/chat/completions" : "/v1/completions", id, ApiDialect::kOpenAi),
        chat_(chat),
        tool_format_(p.tools_active ? tool_format : std::nullopt),
        id_(std::move(id)),
        model_(std::move(model)),
        stream_(p.stream),
        include_usage_(p.include_usage),
        continuous_usage_(p.continuous_usage),
        has_prediction_(p.has_prediction),
        reasoning_(chat && p.reasoning),
        reasoning_open_(p.reasoning_open),
        include_reasoning_(p.include_reasoning),
        logprobs_(p.logprobs),
        n_(size_t(p.n)),
        per_prompt_(size_t(std::max(p.n, p.best_of))),
        echo_prefix_(std::move(echo_prefix)) {
    keep_tokens_ = (logprobs_ >= 0 || per_prompt_ > n_) && !stream_;
    if (tool_format_) markers_ = tool_call_markers(*tool_format_);
  }

  void prepare(size_t choices) {
    role_sent_.assign(choices, false);
    echo_done_.assign(choices, false);
    text_offset_.assign(choices, 0);
    tool_text_.assign(choices, "");
    tool_sent_.assign(choices, 0);
    in_call_.assign(choices, false);
    splitters_.assign(choices, ReasoningSplitter(ReasoningMarkers{}, reasoning_open_));
  }

 protected:
  void on_event(size_t index, const GenerationEvent& ev, std::string& out) override {
    if (!stream_) return;
    if (ev.finish == FinishReason::kError) {
      out += sse_event(json::parse(openai_error_body(generation_error(ev))));
      return;
    }
    if (chat_ && !role_sent_[index]) {
      role_sent_[index] = true;
      out += sse_event(chunk(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    }
    std::string text = ev.text_delta;
    std::string reasoning;
    if (reasoning_) split_reasoning(splitters_[index], ev.finished(), text, reasoning);
    if (tool_format_) text = tool_stream_delta(index, text);
    // The echoed prompt goes out with the first chunk, and its tokens' logprobs with it.
    const std::vector<GeneratedToken>* tokens = &ev.tokens;
    std::vector<GeneratedToken> echoed;
    if (!chat_ && !echo_prefix_.empty() && !echo_done_[index]) {
      text = echo_prefix_[index / per_prompt_] + text;
      echo_done_[index] = true;
      if (!ev.prompt_logprobs.empty()) tokens = &(echoed = with_prompt(ev.prompt_logprobs, ev.tokens));
    }
    bool want_lp = logprobs_ >= 0 && !tokens->empty();
    if (!reasoning.empty() && include_reasoning_) {
      json lp = nullptr;
      if (want_lp) {  // (chat only: completions have no reasoning)
        json content = json::array();
        for (const GeneratedToken& t : *tokens) content.push_back(chat_logprob_entry(t));
        lp = {{"content", content}};
        want_lp = false;
      }
      out += sse_event(chunk(index, {{"reasoning_content", reasoning}}, lp, nullptr));
    }
    if (!text.empty() || want_lp) {
      json lp = nullptr;
      if (want_lp) {
        if (chat_) {
          json content = json::array();
          for (const GeneratedToken& t : *tokens) content.push_back(chat_logprob_entry(t));
          lp = {{"content", content}};
        } else {
          lp = completion_logprobs(*tokens, text_offset_[index], logprobs_);
        }
      }
      for (const GeneratedToken& t : *tokens) text_offset_[index] += t.text.size();
      json delta = chat_ ? json{{"content", text}} : json(text);
      out += sse_event(chunk(index, delta, lp, nullptr));
    }
    if (ev.finished()) {
      const char* finish = openai_finish(*ev.finish);
      if (tool_format_) {
        const grammar::ParsedToolCalls parsed = grammar::parse_tool_calls(tool_text_[index], *tool_format_);
        if (!parsed.calls.empty()) {
          json calls = json::array();
          for (size_t k = 0; k < parsed.calls.size(); ++k) {
            json c = tool_call_json(parsed.calls[k]);
            c["index"] = k;
            calls.push_back(std::move(c));
          }
          out += sse_event(chunk(index, {{"tool_calls", calls}}, nullptr, nullptr));
          finish = "tool_calls";
        } else if (tool_sent_[index] < tool_text_[index].size()) {
          // No call after all: what was held back is content.
          out += sse_event(chunk(index, {{"content", tool_text_[index].substr(tool_sent_[index])}}, nullptr, nullptr));
        }
      }
      out += sse_event(chunk(index, chat_ ? json::object() : json(""), nullptr, finish));
    }
  }

  // Reasoning: `text` (the output's next piece; its last when `last`) becomes the part of it that
  // is content, and the reasoning found in it goes to `reasoning`.
  static void split_reasoning(ReasoningSplitter& splitter, bool last, std::string& text, std::string& reasoning) {
    ReasoningSplitter::Piece piece = splitter.feed(text);
    if (last) {
      ReasoningSplitter::Piece rest = splitter.finish();
      piece.reasoning += rest.reasoning;
      piece.content += rest.content;
    }
    text = std::move(piece.content);
    reasoning = std::move(piece.reasoning);
  }

  // Tool calls: `text` is the output's next piece (its call markers kept even where they are
  // special tokens: GenerationRequest::keep_special_tokens); returns the part of all of it so far
  // that can be streamed as content now: everything before a call marker, holding back a tail that
  // could still become one.
  std::string tool_stream_delta(size_t index, std::string_view text) {
    std::string& all = tool_text_[index];
    all += text;
    if (in_call_[index]) return "";
    size_t stop = all.size();
    for (const std::string& m : markers_) {
      size_t at = all.find(m, tool_sent_[index]);
      if (m == "{") {  // Llama 3 JSON calls: a reply that starts with an object
        const size_t first = all.find_first_not_of(" \n\t");
        at = first != std::string::npos && all[first] == '{' ? first : std::string::npos;
      }
      if (at != std::string::npos && at < stop) {
        stop = at;
        in_call_[index] = true;
      }
    }
    if (!in_call_[index]) {
      for (const std::string& m : markers_) {  // a tail that is a marker's beginning waits
        for (size_t len = std::min(m.size() - 1, all.size() - tool_sent_[index]); len > 0; --len) {
          if (all.compare(all.size() - len, len, m, 0, len) == 0) {
            stop = std::min(stop, all.size() - len);
            break;
          }
        }
      }
      if (all.find_first_not_of(" \n\t") == std::string::npos) stop = tool_sent_[index];  // nothing yet
    }
    std::string delta = all.substr(tool_sent_[index], stop - tool_sent_[index]);
    tool_sent_[index] = stop;
    return delta;
  }

  json tool_call_json(const grammar::ToolCall& call) {
    static const char* kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlnum[rng_() % 62];
    return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  }

  void on_complete(std::string& out) override {
    if (stream_) {
      if (include_usage_) {
        json c = base_object();
        c["choices"] = json::array();
        c["usage"] = usage();
        out += sse_event(c);
      }
      out += "data: [DONE]\n\n";
      final_head_.status = 200;
      return;
    }
    if (const GenerationEvent* err = first_error()) {
      ApiError e = generation_error(*err);
      final_head_.status = e.http_status;
      out += openai_error_body(e);
      return;
    }
    if (any_cancelled()) {
      ApiError e{503, "The request was cancelled before it finished (the server is shutting down).",
                 "service_unavailable", "", "cancelled"};
      final_head_.status = 503;
      out += openai_error_body(e);
      return;
    }
    json choices = json::array();
    const std::vector<size_t> order = returned_choices();
    for (size_t i = 0; i < order.size(); ++i) {
      const Choice& c = choices_[order[i]];
      json lp = nullptr;
      if (logprobs_ >= 0) {
        if (chat_) {
          json content = json::array();
          for (const GeneratedToken& t : c.tokens) content.push_back(chat_logprob_entry(t));
          lp = {{"content", content}};
        } else {
          lp = completion_logprobs(with_prompt(c.final.prompt_logprobs, c.tokens), 0, logprobs_);
        }
      }
      json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", openai_finish(*c.final.finish)}};
      std::string all = c.text;
      std::string reasoning;
      ReasoningSplitter splitter(ReasoningMarkers{}, reasoning_open_);
      if (reasoning_) split_reasoning(splitter, /*last=*/true, all, reasoning);
      if (chat_ && tool_format_) {
        const grammar::ParsedToolCalls parsed = grammar::parse_tool_calls(all, *tool_format_);
        json msg = {{"role", "assistant"}, {"content", parsed.calls.empty() ? json(all) : json(nullptr)}};
        if (!parsed.calls.empty()) {
          if (!parsed.content.empty()) msg["content"] = parsed.content;
          json calls = json::array();
          for (const grammar::ToolCall& call : parsed.calls) calls.push_back(tool_call_json(call));
          msg["tool_calls"] = std::move(calls);
          choice["finish_reason"] = "tool_calls";
        }
        choice["message"] = std::move(msg);
      } else if (chat_) {
        choice["message"] = {{"role", "assistant"}, {"content", all}};
      } else {
        choice["text"] = echo_prefix_.empty() ? c.text : echo_prefix_[order[i] / per_prompt_] + c.text;
      }
      if (splitter.saw_reasoning() && include_reasoning_) choice["message"]["reasoning_content"] = reasoning;
      if (c.final.finish == FinishReason::kStopString) choice["stop_reason"] = c.final.stop_string;
      choices.push_back(std::move(choice));
    }
    json body = base_object();
    body["choices"] = std::move(choices);
    body["usage"] = usage();
    final_head_.status = 200;
    out += dump_json(body);
  }

 private:
  json base_object() const {
    json o = {{"id", id_},
              {"object", chat_ ? (stream_ ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", created_unix_},
              {"model", model_},
              {"system_fingerprint", "flashgen"}};
    return o;
  }

  json chunk(size_t index, json delta, json logprobs, const char* finish) const {
    json c = base_object();
    json choice = {
        {"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    choice[chat_ ? "delta" : "text"] = std::move(delta);
    c["choices"] = json::array({std::move(choice)});
    if (include_usage_) c["usage"] = continuous_usage_ ? usage() : json(nullptr);
    return c;
  }

  // The choices the reply returns, in order: all of them, or with best_of the n of each prompt's
  // candidates whose tokens have the highest mean logprob (ties: the earlier candidate).
  std::vector<size_t> returned_choices() const {
    std::vector<size_t> order;
    for (size_t first = 0; first < choices_.size(); first += per_prompt_) {
      std::vector<std::pair<double, size_t>> ranked;
      for (size_t i = first; i < std::min(choices_.size(), first + per_prompt_); ++i) {
        double sum = 0.0;
        for (const GeneratedToken& t : choices_[i].tokens) sum += t.logprob;
        const double mean = choices_[i].tokens.empty() ? 0.0 : sum / double(choices_[i].tokens.size());
        ranked.emplace_back(per_prompt_ > n_ ? -mean : 0.0, i);
      }
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < std::min(n_, ranked.size()); ++k) order.push_back(ranked[k].second);
    }
    return order;
  }

  json usage() const {
    const int64_t prompt = total_prompt_tokens();
    const int64_t completion = total_generated_tokens();
    json u = {{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", total_cached_tokens()}}}};
    // With a predicted output: its tokens the model verified and kept, and those it verified and
    // replaced (drafts never verified, e.g. past the end of the output, count in neither).
    if (has_prediction_) {
      const int64_t accepted = total_accepted_draft_tokens();
      u["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                        {"rejected_prediction_tokens", total_draft_tokens() - accepted}};
    }
    return u;
  }

  bool chat_;
  std::optional<grammar::ToolCallFormat> tool_format_;  // set when tool calls are parsed out
  std::vector<std::string> markers_;
  std::vector<std::string> tool_text_;  // per choice: the output's text for tool-call parsing
  std::vector<size_t> tool_sent_;       // ... of which streamed as content
  std::vector<bool> in_call_;           // ... a call marker was seen
  std::mt19937_64 rng_{std::random_device{}()};
  std::string id_;
  std::string model_;
  bool stream_;
  bool include_usage_;
  bool continuous_usage_;
  bool has_prediction_;
  bool reasoning_;                            // a <think> block is split out (chat)
  bool reasoning_open_;                       // ... and the output starts inside it
  bool include_reasoning_;                    // ... and returned as reasoning_content
  std::vector<ReasoningSplitter> splitters_;  // per choice, when streaming
  int logprobs_;
  size_t n_;                              // choices returned per prompt
  size_t per_prompt_;                     // choices generated per prompt (best_of, or n)
  std::vector<std::string> echo_prefix_;  // per prompt, completions with echo only
  std::vector<bool> role_sent_;
  std::vector<size_t> text_offset_;
  std::vector<bool> echo_done_;
};

// Validated token ids of a prompt given as an array of integers.
std::optional<ApiError> read_token_prompt(const json& arr, int64_t vocab, std::vector<int32_t>& out) {
  for (const json& e : arr) {
    if (!e.is_number_integer())
      return invalid_type("prompt", "a string, an array of strings, or an array of token ids");
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id >= vocab)
      return invalid_request("Token id " + std::to_string(id) + " in 'prompt' is outside the vocabulary [0, " +
                                 std::to_string(vocab) + ").",
                             "prompt", "invalid_value");
    out.push_back(int32_t(id));
  }
  return std::nullopt;
}

// Submits prompts x n choices and builds the reply (or the error reply).
Reply submit_reply(ApiContext& ctx, bool chat, const CommonParams& p, std::vector<std::vector<int32_t>> prompts,
                   std::vector<std::string> echo_prefix, std::optional<int64_t> default_max) {
  const ModelInfo& info = ctx.backend.model_info();
  std::optional<grammar::ToolCallFormat> format;
  for (auto f :
       {grammar::ToolCallFormat::kHermes, grammar::ToolCallFormat::kLlama3Json, grammar::ToolCallFormat::kMistral})
    if (info.tool_call_format == grammar::tool_call_format_name(f)) format = f;
  std::vector<GenerationRequest> requests;
  const std::string id = ctx.make_id(chat ? "chatcmpl" : "cmpl");
  if (p.sampling.min_new_tokens > 0 && p.constraint) {
    return error_reply(invalid_request("'min_tokens' cannot be combined with response_format, a grammar or required "
                                       "tool calls: they decide where the output ends.",
                                       "min_tokens", "invalid_value"),
                       ApiDialect::kOpenAi);
  }
  // truncate_prompt_tokens: the prompt's last tokens only (left truncation); an echoed prompt is
  // the part that ran.
  for (size_t i = 0; i < prompts.size() && p.truncate_prompt_tokens > 0; ++i) {
    std::vector<int32_t>& ids = prompts[i];
    if (int64_t(ids.size()) <= p.truncate_prompt_tokens) continue;
    ids.erase(ids.begin(), ids.end() - p.truncate_prompt_tokens);
    if (i < echo_prefix.size()) {
      Result<std::string> t = ctx.backend.detokenize(ids, false);
      if (!t.is_ok())
        return error_reply(api_error_from_status(t.status(), ApiDialect::kOpenAi, "prompt"), ApiDialect::kOpenAi);
      echo_prefix[i] = std::move(*t);
    }
  }
  for (auto& ids : prompts) {
    LengthCheck lc = check_length(int64_t(ids.size()), p.max_tokens, default_max, info.max_model_len,
                                  p.max_tokens_param, ctx.limits);
    if (lc.error) return error_reply(*lc.error, ApiDialect::kOpenAi);
    if (lc.max_new_tokens && p.sampling.min_new_tokens > *lc.max_new_tokens) {
      return error_reply(
          invalid_request("'min_tokens' (" + std::to_string(p.sampling.min_new_tokens) + ") is more than '" +
                              p.max_tokens_param + "' (" + std::to_string(*lc.max_new_tokens) + ").",
                          "min_tokens", "invalid_value"),
          ApiDialect::kOpenAi);
    }
    for (int64_t i = 0; i < std::max(p.n, p.best_of); ++i) {
      GenerationRequest r;
      r.request_id = id;
      r.prompt_ids = ids;
      r.sampling = p.sampling;
      r.sampling.max_new_tokens = lc.max_new_tokens;
      // best_of ranks candidates by their tokens' logprobs.
      r.sampling.logprobs = p.best_of > p.n ? std::max(p.logprobs, 0) : p.logprobs;
      r.prompt_logprobs = p.prompt_logprobs;
      r.skip_special_tokens = p.skip_special_tokens;
      r.include_stop_str_in_output = p.include_stop_str_in_output;
      r.speculative = p.speculative;
      r.prediction = p.prediction;
      r.constraint = p.constraint;
      r.jump_forward = p.jump_forward;
      // Tool calls are parsed from the text, their markers kept where they are special tokens.
      if (p.tools_active && format) r.keep_special_tokens = tool_call_markers(*format);
      if (p.sampling.seed) r.sampling.seed = *p.sampling.seed + uint64_t(i);
      requests.push_back(std::move(r));
    }
  }
  auto reply = std::make_unique<OpenAiReply>(ctx, chat, id, p.model, p, std::move(echo_prefix), format);
  reply->prepare(requests.size());
  if (auto err = reply->submit_all(std::move(requests), size_t(std::max(p.n, p.best_of))))
    return error_reply(*err, ApiDialect::kOpenAi);
  Reply out;
  out.streamed = p.stream;
  if (p.stream) {
    out.head.content_type = "text/event-stream";
    out.head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  }
  out.source = std::move(reply);
  return out;
}

Reply fail(const JsonFields& f) {
  return error_reply(*f.error(), ApiDialect::kOpenAi);
}

}  // namespace

Reply openai_completions(ApiContext& ctx, const OpenAiLimits& limits, const HttpRequest& req) {
  json body;
  if (auto err = parse_json_object(req, body, ctx.limits.max_json_depth)) return error_reply(*err, ApiDialect::kOpenAi);
  const ModelInfo& info = ctx.backend.model_info();
  JsonFields f(body);
  CommonParams p;
  read_common(f, limits, ctx, p);
  read_max_tokens(f, p, /*chat=*/false);
  if (auto lp = f.get_int("logprobs")) {
    if (*lp < 0 || *lp > limits.max_logprobs)
      f.fail(range_error("logprobs", "must be between 0 and " + std::to_string(limits.max_logprobs), double(*lp)));
    p.logprobs = int(*lp);
  }
  const bool echo = f.get_bool("echo").value_or(false);
  if (echo) p.prompt_logprobs = p.logprobs;  // the echoed prompt's tokens come with logprobs too
  if (auto suffix = f.get_string("suffix"))
    if (!suffix->empty()) f.fail(unsupported_param("suffix", "insertion (suffix) is not implemented."));
  if (auto best_of = f.get_int("best_of")) {
    if (*best_of < p.n || *best_of > limits.max_n)
      f.fail(range_error("best_of", "must be between n and " + std::to_string(limits.max_n), double(*best_of)));
    else if (*best_of > p.n && p.stream)
      f.fail(invalid_request("'best_of' greater than 'n' cannot be streamed.", "best_of", "invalid_value"));
    p.best_of = *best_of;
  }
  const bool add_special = f.get_bool("add_special_tokens").value_or(true);
  read_structured_output(f, nlohmann::ordered_json::parse(req.body), p);
  const json* prompt = f.get_raw("prompt");
  if (f.ok() && !prompt) f.fail(missing_parameter("prompt"));
  if (f.ok()) {
    std::string unknown = f.unknown_field();
    if (!unknown.empty()) f.fail(unknown_parameter(unknown));
  }
  if (!f.ok()) return fail(f);

  // prompt: "text" | ["text", ...] | [ids...] | [[ids...], ...]
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  bool token_prompts = false;
  auto bad_prompt = [] { return invalid_type("prompt", "a string, an array of strings, or an array of token ids"); };
  if (prompt->is_string()) {
    texts.push_back(prompt->get<std::string>());
  } else if (prompt->is_array() && !prompt->empty()) {
    if ((*prompt)[0].is_string()) {
      for (const json& e : *prompt) {
        if (!e.is_string()) return error_reply(bad_prompt(), ApiDialect::kOpenAi);
        texts.push_back(e.get<std::string>());
      }
    } else if ((*prompt)[0].is_array()) {
      token_prompts = true;
      for (const json& e : *prompt) {
        if (!e.is_array() || e.empty()) return error_reply(bad_prompt(), ApiDialect::kOpenAi);
        prompts.emplace_back();
        if (auto err = read_token_prompt(e, info.vocab_size, prompts.back()))
          return error_reply(*err, ApiDialect::kOpenAi);
      }
    } else {
      token_prompts = true;
      prompts.emplace_back();
      if (auto err = read_token_prompt(*prompt, info.vocab_size, prompts.back()))
        return error_reply(*err, ApiDialect::kOpenAi);
    }
  } else {
    return error_reply(
        prompt->is_array() ? invalid_request("'prompt' must not be empty.", "prompt", "invalid_value") : bad_prompt(),
        ApiDialect::kOpenAi);
  }
  if (int64_t(texts.size() + prompts.size()) * std::max(p.n, p.best_of) > limits.max_n * 8) {
    return error_reply(
        invalid_request("Too many prompts x choices in one request (at most " + std::to_string(limits.max_n * 8) + ").",
                        "prompt", "invalid_value"),
        ApiDialect::kOpenAi);
  }
  for (const std::string& t : texts) {
    Result<std::vector<int32_t>> ids = ctx.backend.tokenize(t, add_special);
    if (!ids.is_ok())
      return error_reply(api_error_from_status(ids.status(), ApiDialect::kOpenAi, "prompt"), ApiDialect::kOpenAi);
    if (ids->empty())
      return error_reply(invalid_request("'prompt' encodes to zero tokens.", "prompt", "invalid_value"),
                         ApiDialect::kOpenAi);
    prompts.push_back(std::move(*ids));
  }
  std::vector<std::string> echo_prefix;
  if (echo) {
    if (token_prompts) {
      for (const auto& ids : prompts) {
        Result<std::string> t = ctx.backend.detokenize(ids, false);
        if (!t.is_ok())
          return error_reply(api_error_from_status(t.status(), ApiDialect::kOpenAi, "prompt"), ApiDialect::kOpenAi);
        echo_prefix.push_back(*t);
      }
    } else {
      echo_prefix = texts;
    }
  }
  // OpenAI's legacy completions default to 16 new tokens.
  return submit_reply(ctx, false, p, std::move(prompts), std::move(echo_prefix), 16);
}

Reply openai_chat_completions(ApiContext& ctx, const OpenAiLimits& limits, const HttpRequest& req) {
  json body;
  if (auto err = parse_json_object(req, body, ctx.limits.max_json_depth)) return error_reply(*err, ApiDialect::kOpenAi);
  const ModelInfo& info = ctx.backend.model_info();
  JsonFields f(body);
  CommonParams p;
  read_common(f, limits, ctx, p);
  read_max_tokens(f, p, /*chat=*/true);
  const bool logprobs = f.get_bool("logprobs").value_or(false);
  if (logprobs) p.logprobs = 0;
  if (auto top = f.get_int("top_logprobs")) {
    if (*top < 0 || *top > limits.max_logprobs)
      f.fail(range_error("top_logprobs", "must be between 0 and " + std::to_string(limits.max_logprobs), double(*top)));
    else if (!logprobs && *top > 0)
      f.fail(invalid_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs", "invalid_value"));
    else if (logprobs)
      p.logprobs = int(*top);
  }
  using ojson = nlohmann::ordered_json;
  const ojson obody = ojson::parse(req.body);
  read_structured_output(f, obody, p);
  const json* tools = f.get_array("tools");
  // tool_choice: "auto" (default with tools; calls parsed from the output), "none", "required"
  // (at least one call, constrained by the tools' schemas) or {"type": "function", "function":
  // {"name": ...}} (a call of that tool).
  std::string choice = tools ? "auto" : "none";
  std::string named_tool;
  if (const json* tc = f.get_raw("tool_choice")) {
    if (tc->is_string() && (*tc == "none" || *tc == "auto" || *tc == "required")) {
      choice = tc->get<std::string>();
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      choice = "named";
      named_tool = (*tc)["function"]["name"].get<std::string>();
    } else {
      f.fail(
          invalid_request("Invalid 'tool_choice': expected \"none\", \"auto\", \"required\" or {\"type\": "
                          "\"function\", \"function\": {\"name\": ...}}.",
                          "tool_choice", "invalid_value"));
    }
    if (f.ok() && choice != "none" && !tools)
      f.fail(invalid_request("'tool_choice' needs 'tools'.", "tool_choice", "invalid_value"));
  }
  const bool parallel_tool_calls = f.get_bool("parallel_tool_calls").value_or(true);
  if (f.ok() && tools && choice != "none") {
    if (info.tool_call_format.empty() && (choice == "required" || choice == "named"))
      f.fail(
          invalid_request("This model's chat template writes tool calls in no syntax flashgen knows (Hermes "
                          "<tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS]), so tool_choice '" +
                              choice + "' cannot be enforced; use \"auto\".",
                          "tool_choice", "invalid_value"));
    else if (p.constraint && (choice == "required" || choice == "named"))
      f.fail(
          invalid_request("A forced tool call ('tool_choice') cannot be combined with 'response_format' or "
                          "'grammar'.",
                          "tool_choice", "invalid_value"));
    else
      p.tools_active = !info.tool_call_format.empty();  // "auto" without a known syntax: plain text
    if (f.ok() && (choice == "required" || choice == "named"))
      p.constraint =
          ConstraintSpec{ConstraintSpec::Kind::kToolCalls, obody.at("tools").dump(), named_tool, parallel_tool_calls};
  }
  if (choice == "none") tools = nullptr;
  f.get_bool("store");
  f.get_object("metadata");
  f.get_string("service_tier");
  // Predicted output: {"type": "content", "content": a string or an array of text parts}.
  std::string prediction;
  if (const json* pred = f.get_object("prediction")) {
    p.has_prediction = true;
    const auto type = pred->find("type");
    const auto content = pred->find("content");
    const auto text_part = [](const json& part) {
      return part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") &&
             part["text"].is_string();
    };
    if (type == pred->end() || *type != "content") {
      f.fail(invalid_request("Invalid 'prediction.type': expected \"content\".", "prediction.type", "invalid_value"));
    } else if (content == pred->end()) {
      f.fail(missing_parameter("prediction.content"));
    } else if (content->is_string()) {
      prediction = content->get<std::string>();
    } else if (content->is_array() && std::all_of(content->begin(), content->end(), text_part)) {
      for (const json& part : *content) prediction += part["text"].get<std::string>();
    } else {
      f.fail(invalid_type("prediction.content", "a string or an array of text parts"));
    }
  }
  const bool add_generation_prompt = f.get_bool("add_generation_prompt").value_or(true);
  p.reasoning = info.reasoning;
  p.include_reasoning = f.get_bool("include_reasoning").value_or(true);
  const json* template_kwargs = f.get_object("chat_template_kwargs");
  const json* messages = f.get_array("messages");
  if (f.ok() && !messages) f.fail(missing_parameter("messages"));
  if (f.ok() && messages->empty())
    f.fail(invalid_request("'messages' must not be empty.", "messages", "invalid_value"));
  if (f.ok()) {
    std::string unknown = f.unknown_field();
    if (!unknown.empty()) f.fail(unknown_parameter(unknown));
  }
  if (!f.ok()) return fail(f);

  // Normalize messages for the template: text parts joined, "developer" read as "system". The
  // body is read again as ordered JSON so tool schemas keep the client's key order.
  const ojson& omessages = obody.at("messages");
  ojson msgs = ojson::array();
  for (size_t i = 0; i < omessages.size(); ++i) {
    const ojson& m = omessages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return error_reply(invalid_type(where, "an object"), ApiDialect::kOpenAi);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return error_reply(missing_parameter(where + ".role"), ApiDialect::kOpenAi);
    std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool" && r != "function")
      return error_reply(invalid_request("Invalid value for '" + where + ".role': '" + r +
                                             "'. Expected one of system, developer, user, assistant, tool.",
                                         where + ".role", "invalid_value"),
                         ApiDialect::kOpenAi);
    ojson nm = m;
    if (r == "developer") nm["role"] = "system";
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (r != "assistant") return error_reply(missing_parameter(where + ".content"), ApiDialect::kOpenAi);
      nm["content"] = "";
    } else if (content->is_array()) {
      std::string joined;
      for (const ojson& part : *content) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return error_reply(invalid_type(where + ".content", "a string or an array of content parts"),
                             ApiDialect::kOpenAi);
        if (part["type"] != "text" || !part.contains("text") || !part["text"].is_string())
          return error_reply(
              unsupported_param(where + ".content", "only text content parts are supported by this text-only server."),
              ApiDialect::kOpenAi);
        if (!joined.empty()) joined += "\n";
        joined += part["text"].get<std::string>();
      }
      nm["content"] = joined;
    } else if (!content->is_string()) {
      return error_reply(invalid_type(where + ".content", "a string or an array of content parts"),
                         ApiDialect::kOpenAi);
    }
    msgs.push_back(std::move(nm));
  }
  const ojson otools = tools ? obody.at("tools") : ojson(nullptr);
  const ojson okwargs = template_kwargs ? obody.at("chat_template_kwargs") : ojson::object();
  Result<std::string> text = ctx.backend.render_chat(msgs, otools, add_generation_prompt, okwargs);
  if (!text.is_ok()) return error_reply(chat_template_error(text.status(), "messages"), ApiDialect::kOpenAi);
  Result<std::vector<int32_t>> ids = ctx.backend.tokenize(*text, /*add_special_tokens=*/false);
  if (!ids.is_ok())
    return error_reply(api_error_from_status(ids.status(), ApiDialect::kOpenAi, "messages"), ApiDialect::kOpenAi);
  if (ids->empty())
    return error_reply(invalid_request("The rendered chat encodes to zero tokens.", "messages", "invalid_value"),
                       ApiDialect::kOpenAi);
  // A constrained output is the answer from its first token (the grammar applies there), so it
  // starts outside any block the prompt opened.
  p.reasoning_open = p.reasoning && !p.constraint && prompt_opens_reasoning(*text);
  if (!prediction.empty()) {
    Result<std::vector<int32_t>> pids = ctx.backend.tokenize(prediction, /*add_special_tokens=*/false);
    if (!pids.is_ok())
      return error_reply(api_error_from_status(pids.status(), ApiDialect::kOpenAi, "prediction"), ApiDialect::kOpenAi);
    if (int64_t(pids->size()) > info.max_model_len)
      return error_reply(
          invalid_request("'prediction' encodes to " + std::to_string(pids->size()) +
                              " tokens, more than the model's context of " + std::to_string(info.max_model_len) + ".",
                          "prediction", "invalid_value"),
          ApiDialect::kOpenAi);
    p.prediction = std::move(*pids);
  }
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(*ids));
  // Chat's default is no limit: the rest of the context (or of the KV pool).
  return submit_reply(ctx, true, p, std::move(prompts), {}, std::nullopt);
}

Reply openai_models(ApiContext& ctx, std::string_view model_id) {
  const ModelInfo& info = ctx.backend.model_info();
  auto card = [&](const std::string& name) {
    return json{{"id", name},
                {"object", "model"},
                {"created", info.created},
                {"owned_by", "flashgen"},
                {"root", info.model_dir},
                {"max_model_len", info.max_model_len}};
  };
  if (!model_id.empty()) {
    if (!info.has_name(model_id))
      return error_reply(
          not_found_error("The model '" + std::string(model_id) + "' does not exist.", "model_not_found"),
          ApiDialect::kOpenAi);
    return json_reply(200, card(std::string(model_id)));
  }
  // Every served name, the reported one first.
  json data = json::array({card(info.id)});
  for (const std::string& alias : info.aliases) data.push_back(card(alias));
  return json_reply(200, {{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace fg::server
