// EngineBackend: the engine + tokenizer behind the HTTP server (see engine_backend.h).
#include "server/engine_backend.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <limits>

#include "server/reasoning.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/stop_matcher.h"

namespace fg::server {

struct EngineBackend::Live {
  uint64_t id = 0;
  std::shared_ptr<EventStream> events;
  EventCallback cb;
  std::vector<std::string> stop;  // the request's stop strings (matched here, not in the engine)
  int64_t min_tokens = 0;         // stop strings are looked for in the text after this many tokens
  bool include_stop_str_in_output = false;
  std::optional<uint64_t> seed;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  int64_t cached_tokens = 0;
  int64_t draft_tokens = 0;  // speculative drafts verified for it, and accepted
  int64_t accepted_draft_tokens = 0;
  std::unique_ptr<IncrementalDecoder> decoder;
  std::unique_ptr<StopStringMatcher> stops;
  // A stop string ended the request here: its final event, with the tokens and text up to the
  // stop, is delivered once the engine confirms the cancellation (so its pages are free when the
  // client hears about it, and the last token and the finish reach the client together).
  std::optional<GenerationEvent> held_final;
  std::vector<GeneratedToken> prompt_logprobs;  // when asked: the first token's, then the engine's
  bool prompt_logprobs_pending = false;         // not yet on an event (GenerationEvent)
};

Result<std::unique_ptr<EngineBackend>> EngineBackend::create(const EngineBackendOptions& options) {
  std::unique_ptr<EngineBackend> b(new EngineBackend());
  const std::string tok_dir = options.tokenizer_dir.empty() ? options.runner.model_dir : options.tokenizer_dir;
  auto tok = Tokenizer::load(tok_dir);
  if (!tok.is_ok()) return Status(tok.status().code(), "tokenizer: " + tok.status().message());
  b->tokenizer_ = std::move(tok).value();
  auto tmpl = ChatTemplate::from_model_dir(tok_dir, options.chat_template_file);
  if (tmpl.is_ok()) {
    b->template_ = std::move(tmpl).value();
  } else {
    if (!options.chat_template_file.empty())
      return Status(tmpl.status().code(), "--chat-template: " + tmpl.status().message());
    b->template_error_ = tmpl.status().message();
  }
  auto runner = ModelRunner::create(options.runner);
  if (!runner.is_ok()) return runner.status();
  ModelInfo& info = b->info_;
  if (options.served_model_names.empty()) {
    std::string name = std::filesystem::path(options.runner.model_dir).lexically_normal().filename().string();
    if (name.empty() || name == ".") name = options.runner.model_dir;
    info.id = name;
  } else {
    info.id = options.served_model_names[0];
    for (const std::string& name : options.served_model_names)
      if (!info.has_name(name)) info.aliases.push_back(name);
  }
  info.model_dir = options.runner.model_dir;
  info.max_model_len = (*runner)->max_model_len();
  info.vocab_size = (*runner)->vocab_size();
  if (b->tokenizer_->vocab_size() > info.vocab_size) {
    return invalid_argument(tok_dir + "/tokenizer.json: the tokenizer has " +
                            std::to_string(b->tokenizer_->vocab_size()) + " ids but the model's vocabulary has " +
                            std::to_string(info.vocab_size) +
                            "; use the tokenizer that belongs to the model (--tokenizer DIR)");
  }
  info.device = (*runner)->backend().name();
  info.dtype = (*runner)->backend().act_dtype() == DType::kF32 ? "float32" : "bfloat16";
  info.created = static_cast<int64_t>(std::time(nullptr));
  info.max_batch_tokens = options.engine.scheduler.max_batch_tokens;
  info.max_running = options.engine.scheduler.max_running;
  info.has_chat_template = b->template_.has_value();
  // Structured output: the model's vocabulary as grammars see it, and its tool-call syntax.
  std::optional<grammar::ToolCallFormat> tool_format;
  if (b->template_) tool_format = grammar::detect_tool_call_format(b->template_->sources());
  auto factory =
      ConstraintFactory::create(*b->tokenizer_, (*runner)->eos_token_ids(), (*runner)->vocab_size(), tool_format);
  if (!factory.is_ok()) return Status(factory.status().code(), "structured output: " + factory.status().message());
  b->constraints_ = std::move(factory).value();
  if (b->constraints_->tool_format())
    info.tool_call_format = grammar::tool_call_format_name(*b->constraints_->tool_format());
  if (options.reasoning_parser == "think")
    info.reasoning = true;
  else if (options.reasoning_parser == "auto")
    info.reasoning = b->template_ && template_has_reasoning(b->template_->sources());
  else if (options.reasoning_parser != "none")
    return invalid_argument("--reasoning-parser: expected auto, think or none, not '" + options.reasoning_parser + "'");
  b->kv_pages_total_ = (*runner)->kv_num_pages();
  EngineConfig config = options.engine;
  config.on_step = [p = b.get(), next = options.engine.on_step](const StepSummary& step) {
    p->batch_sizes_.observe(double(step.num_seqs));
    if (next) next(step);
  };
  b->engine_ = std::make_unique<Engine>(config, std::move(runner).value());
  b->pump_ = std::thread([p = b.get()] { p->pump(); });
  return b;
}

EngineBackend::~EngineBackend() {
  ready_->close();
  if (pump_.joinable()) pump_.join();
  engine_.reset();
}

Result<std::vector<int32_t>> EngineBackend::tokenize(std::string_view text, bool add_special_tokens) {
  return tokenizer_->encode(text, add_special_tokens);
}

Result<std::string> EngineBackend::detokenize(std::span<const int32_t> ids, bool skip_special_tokens) {
  for (int32_t id : ids)
    if (id < 0 || id >= info_.vocab_size)
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(info_.vocab_size) + ")");
  return tokenizer_->decode(ids, skip_special_tokens);
}

Result<std::string> EngineBackend::render_chat(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                               const nlohmann::ordered_json& extra) {
  if (!template_) {
    return invalid_argument("this model has no chat template (" + template_error_ +
                            "); use /v1/completions, or start the server with --chat-template FILE");
  }
  return template_->render(messages, tools, add_generation_prompt, extra);
}

std::string EngineBackend::piece(int32_t id) const {
  return tokenizer_->token_bytes(id);
}

GeneratedToken EngineBackend::token(int32_t id, float logprob, std::span<const TokenLogprob> top) const {
  GeneratedToken t;
  t.id = id;
  t.text = piece(id);
  t.special = tokenizer_->is_special(id);
  t.logprob = logprob;
  for (const TokenLogprob& c : top) t.top.push_back({c.id, c.logprob, piece(c.id)});
  return t;
}

Result<uint64_t> EngineBackend::submit(GenerationRequest request, EventCallback on_event) {
  auto live = std::make_unique<Live>();
  live->cb = std::move(on_event);
  live->stop = std::move(request.sampling.stop);
  live->min_tokens = request.sampling.min_new_tokens;
  live->include_stop_str_in_output = request.include_stop_str_in_output;
  live->seed = request.sampling.seed;
  live->prompt_tokens = int64_t(request.prompt_ids.size());
  // A few prompt ids as context, so the first token keeps the leading space it has after them.
  const size_t ctx = std::min<size_t>(request.prompt_ids.size(), 4);
  std::vector<int32_t> keep;
  for (const std::string& t : request.keep_special_tokens)
    if (const int32_t id = tokenizer_->id_of(t); id >= 0 && tokenizer_->is_special(id)) keep.push_back(id);
  live->decoder = std::make_unique<IncrementalDecoder>(
      *tokenizer_, request.skip_special_tokens,
      std::span<const int32_t>(request.prompt_ids.data() + request.prompt_ids.size() - ctx, ctx), std::move(keep));
  if (!live->stop.empty()) live->stops = std::make_unique<StopStringMatcher>(live->stop);
  // Stop strings stay here (the matcher above, on the pump thread); the engine gets the rest.
  Request r;
  r.prompt_ids = std::move(request.prompt_ids);
  r.params = std::move(request.sampling);
  r.params.stop.clear();
  r.priority = request.priority;
  r.speculative = request.speculative;
  r.prediction = std::move(request.prediction);
  r.params.prompt_logprobs = request.prompt_logprobs;
  if (request.prompt_logprobs >= 0) {
    // The first prompt token has no logprob: nothing came before it.
    live->prompt_logprobs.push_back(token(r.prompt_ids.front(), std::numeric_limits<float>::quiet_NaN(), {}));
    live->prompt_logprobs_pending = true;
  }
  if (request.constraint) {
    Result<std::shared_ptr<TokenConstraint>> c = constraints_->make(*request.constraint);
    if (!c.is_ok()) return c.status();
    r.constraint = std::move(c).value();
    r.jump_forward = request.jump_forward;
  }
  r.ready = ready_;
  // Hold the lock across submit so the pump cannot look the request up before it is registered.
  std::lock_guard<std::mutex> lock(mu_);
  Result<RequestHandle> h = engine_->submit(std::move(r));
  if (!h.is_ok()) return h.status();
  live->id = h->id;
  live->events = h->events;
  live_.emplace(h->id, std::move(live));
  return h->id;
}

void EngineBackend::cancel(uint64_t handle) {
  if (handle == 0) return;
  engine_->cancel(handle);
}

bool EngineBackend::translate(Live& live, RequestEvent&& in, GenerationEvent& out) {
  live.cached_tokens = in.cached_tokens;
  live.draft_tokens = in.draft_tokens;
  live.accepted_draft_tokens = in.accepted_draft_tokens;
  if (live.held_final) {
    // Already ended by a stop string; wait for the engine's own end, drop its extra tokens.
    if (!in.finish) return false;
    out = std::move(*live.held_final);
    return true;
  }
  for (const PromptLogprob& p : in.prompt_logprobs) live.prompt_logprobs.push_back(token(p.id, p.logprob, p.top));
  // The engine sends them with the first token (or the end); a one-token prompt has none to send.
  if (live.prompt_logprobs_pending && (in.token || in.finish)) {
    out.prompt_logprobs = live.prompt_logprobs;
    live.prompt_logprobs_pending = false;
  }
  std::string text;
  if (in.token) {
    const int32_t id = *in.token;
    out.tokens.push_back(token(id, in.logprob, in.top_logprobs));
    ++live.generated;
    text = live.decoder->push(id);
  }
  if (in.finish) text += live.decoder->flush();
  auto finish = [&](GenerationEvent& ev, FinishReason reason) {
    ev.finish = reason;
    ev.prompt_tokens = live.prompt_tokens;
    ev.cached_prompt_tokens = live.cached_tokens;
    ev.generated_tokens = live.generated;
    ev.draft_tokens = live.draft_tokens;
    ev.accepted_draft_tokens = live.accepted_draft_tokens;
    ev.seed = live.seed.value_or(0);
    ev.prompt_logprobs = live.prompt_logprobs;
  };
  if (live.stops && live.generated > live.min_tokens) {
    StopStringMatcher::Output o = live.stops->push(text);
    out.text_delta = std::move(o.text);
    if (o.stopped) {
      const std::string& stop = live.stop[size_t(o.stop_index)];
      if (live.include_stop_str_in_output) out.text_delta += stop;
      out.stop_string = stop;
      finish(out, FinishReason::kStopString);
      if (in.finish) return true;  // the engine ended on the same token: nothing to cancel
      engine_->cancel(live.id);
      live.held_final = std::move(out);
      out = GenerationEvent();
      return false;
    }
    if (in.finish) out.text_delta += live.stops->flush();
  } else {
    out.text_delta = std::move(text);
  }
  if (in.finish) {
    finish(out, *in.finish);
    out.error = in.status;
    return true;
  }
  return false;
}

void EngineBackend::pump() {
  std::vector<uint64_t> ready;
  std::vector<uint64_t> done;
  // Sleeps until some request's stream has events; false once the backend is being destroyed.
  while (ready_->wait(ready)) {
    for (uint64_t id : ready) {
      Live* l = nullptr;
      {
        // Only this thread erases from live_, so the pointer stays valid without the lock.
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(id);
        if (it != live_.end()) l = it->second.get();
      }
      if (l == nullptr) continue;
      while (std::optional<RequestEvent> ev = l->events->try_next()) {
        GenerationEvent out;
        if (translate(*l, std::move(*ev), out)) {
          l->cb(std::move(out));
          done.push_back(id);
          break;
        }
        if (!out.tokens.empty() || !out.text_delta.empty()) l->cb(std::move(out));
      }
    }
    if (!done.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t id : done) live_.erase(id);
    }
    ready.clear();
    done.clear();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, l] : live_) engine_->cancel(id);
}

BackendStats EngineBackend::stats() {
  const EngineStats s = engine_->stats();
  BackendStats b;
  b.waiting = s.waiting;
  b.running = s.running;
  b.kv_pages_total = s.pages.num_pages > 0 ? s.pages.num_pages : kv_pages_total_;
  b.kv_pages_used = s.pages.held;
  b.kv_pages_cached = s.pages.cached;
  b.preemptions = s.preemptions;
  b.jump_forward_tokens = s.jump_forward_tokens;
  b.spec_draft_tokens = s.spec.draft_tokens;
  b.spec_accepted_tokens = s.spec.accepted_tokens;
  b.spec_drafted_at = s.spec.drafted_at;
  b.spec_accepted_at = s.spec.accepted_at;
  b.steps = s.steps;
  b.step_latency_budget_seconds = s.step_latency.budget_seconds;
  b.decode_step_seconds = s.step_latency.decode_seconds;
  b.prefill_token_seconds = s.step_latency.prefill_token_seconds;
  b.prefill_chunk_tokens = s.step_latency.prefill_chunk;
  b.prefill_chunk_limited_steps = s.step_latency.limited_steps;
  b.batch_size = batch_sizes_.snapshot();
  return b;
}

}  // namespace fg::server
