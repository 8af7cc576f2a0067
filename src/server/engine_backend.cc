// EngineBackend: the engine + tokenizer behind the HTTP server (see engine_backend.h).
#include "server/engine_backend.h"

#include <chrono>
#include <ctime>
#include <filesystem>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/stop_matcher.h"

namespace fg::server {

struct EngineBackend::Live {
  uint64_t id = 0;
  std::shared_ptr<EventStream> events;
  EventCallback cb;
  SamplingOptions sampling;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  int64_t cached_tokens = 0;
  std::unique_ptr<IncrementalDecoder> decoder;
  std::unique_ptr<StopStringMatcher> stops;
  // A stop string ended the request here; delivered once the engine confirms the cancellation
  // (so its pages are free when the client hears about it).
  std::optional<GenerationEvent> held_final;
};

namespace {

server::FinishReason map_finish(fg::FinishReason r) {
  switch (r) {
    case fg::FinishReason::kLength: return server::FinishReason::kLength;
    case fg::FinishReason::kStop:
    case fg::FinishReason::kEos: return server::FinishReason::kStopToken;
    case fg::FinishReason::kCancelled: return server::FinishReason::kCancelled;
    case fg::FinishReason::kError: return server::FinishReason::kError;
  }
  return server::FinishReason::kError;
}

}  // namespace

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
  std::string name = options.served_model_name;
  if (name.empty()) name = std::filesystem::path(options.runner.model_dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = options.runner.model_dir;
  info.id = name;
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
  b->kv_pages_total_ = (*runner)->kv_num_pages();
  b->engine_ = std::make_unique<Engine>(options.engine, std::move(runner).value());
  b->pump_ = std::thread([p = b.get()] { p->pump(); });
  return b;
}

EngineBackend::~EngineBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
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

Result<uint64_t> EngineBackend::submit(GenerationRequest request, EventCallback on_event) {
  Request r;
  r.prompt_ids = request.prompt_ids;
  r.priority = request.priority;
  const SamplingOptions& s = request.sampling;
  SamplingParams& p = r.params;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.seed = s.seed;
  p.stop_token_ids = s.stop_token_ids;
  p.ignore_eos = s.ignore_eos;
  p.logprobs = s.logprobs;
  // Stop strings stay here (the matcher below); the engine gets a token budget only.
  if (s.max_new_tokens <= 0) {
    // Nothing to generate (OpenAI allows max_tokens 0 for echo): finish without the engine.
    GenerationEvent ev;
    ev.finished = true;
    ev.finish_reason = FinishReason::kLength;
    ev.prompt_tokens = int64_t(request.prompt_ids.size());
    on_event(std::move(ev));
    return uint64_t(0);
  }
  p.max_new_tokens = int(std::min<int64_t>(s.max_new_tokens, INT32_MAX));
  auto live = std::make_unique<Live>();
  live->cb = std::move(on_event);
  live->sampling = s;
  live->prompt_tokens = int64_t(request.prompt_ids.size());
  // A few prompt ids as context, so the first token keeps the leading space it has after them.
  const size_t ctx = std::min<size_t>(request.prompt_ids.size(), 4);
  live->decoder = std::make_unique<IncrementalDecoder>(
      *tokenizer_, s.skip_special_tokens,
      std::span<const int32_t>(request.prompt_ids.data() + request.prompt_ids.size() - ctx, ctx));
  if (!s.stop.empty()) live->stops = std::make_unique<StopStringMatcher>(s.stop);
  // Hold the lock across submit so the pump cannot see the stream before it is registered.
  std::lock_guard<std::mutex> lock(mu_);
  Result<RequestHandle> h = engine_->submit(std::move(r));
  if (!h.is_ok()) return h.status();
  live->id = h->id;
  live->events = h->events;
  live_.emplace(h->id, std::move(live));
  cv_.notify_all();
  return h->id;
}

void EngineBackend::cancel(uint64_t handle) {
  if (handle == 0) return;
  engine_->cancel(handle);
}

bool EngineBackend::translate(Live& live, RequestEvent&& in, GenerationEvent& out) {
  live.cached_tokens = in.cached_tokens;
  if (live.held_final) {
    // Already ended by a stop string; wait for the engine's own end, drop its extra tokens.
    if (!in.finish) return false;
    out = std::move(*live.held_final);
    return true;
  }
  std::string text;
  if (in.token) {
    const int32_t id = *in.token;
    GeneratedToken t;
    t.id = id;
    t.text = piece(id);
    t.special = tokenizer_->is_special(id);
    t.logprob = in.logprob;
    for (const fg::TokenLogprob& c : in.top_logprobs) t.top.push_back({c.token, piece(c.token), c.logprob});
    out.tokens.push_back(std::move(t));
    ++live.generated;
    text = live.decoder->push(id);
  }
  if (in.finish) text += live.decoder->flush();
  if (live.stops) {
    StopStringMatcher::Output o = live.stops->push(text);
    out.text_delta = std::move(o.text);
    if (o.stopped) {
      if (live.sampling.include_stop_str_in_output) out.text_delta += live.sampling.stop[size_t(o.stop_index)];
      GenerationEvent fin;
      fin.finished = true;
      fin.finish_reason = FinishReason::kStopString;
      fin.stop_string = live.sampling.stop[size_t(o.stop_index)];
      fin.prompt_tokens = live.prompt_tokens;
      fin.cached_prompt_tokens = live.cached_tokens;
      fin.generated_tokens = live.generated;
      fin.seed = live.sampling.seed.value_or(0);
      if (in.finish) {
        // The engine ended on the same token: no cancellation needed.
        fin.tokens = std::move(out.tokens);
        fin.text_delta = std::move(out.text_delta);
        out = std::move(fin);
        return true;
      }
      engine_->cancel(live.id);
      live.held_final = std::move(fin);
      // Deliver the tokens and text up to the stop now; the finish follows the engine's.
      return false;
    }
    if (in.finish) out.text_delta += live.stops->flush();
  } else {
    out.text_delta = std::move(text);
  }
  if (in.finish) {
    out.finished = true;
    out.finish_reason = map_finish(*in.finish);
    out.error = in.status;
    out.prompt_tokens = live.prompt_tokens;
    out.cached_prompt_tokens = live.cached_tokens;
    out.generated_tokens = live.generated;
    out.seed = live.sampling.seed.value_or(0);
    return true;
  }
  return false;
}

void EngineBackend::pump() {
  using namespace std::chrono;
  auto sleep = microseconds(50);
  int64_t last_steps = 0;
  std::vector<Live*> sweep;
  std::vector<std::pair<Live*, GenerationEvent>> ready;
  std::vector<uint64_t> done;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !live_.empty(); });
      if (stopping_) {
        for (auto& [id, l] : live_) engine_->cancel(id);
        return;
      }
      sweep.clear();
      for (auto& [id, l] : live_) sweep.push_back(l.get());
    }
    // Only this thread erases from live_, so the pointers stay valid without the lock.
    bool any = false;
    done.clear();
    for (Live* l : sweep) {
      // The engine pushes a sequence's last token and its finish as two events of one step; a
      // token event is held until the next event is seen so the two reach the client as one
      // (TGI's last stream event must carry both).
      std::optional<GenerationEvent> pending;
      while (std::optional<RequestEvent> ev = l->events->try_next()) {
        any = true;
        GenerationEvent out;
        const bool finished = translate(*l, std::move(*ev), out);
        if (pending && finished && out.tokens.empty()) {
          out.tokens = std::move(pending->tokens);
          out.text_delta = pending->text_delta + out.text_delta;
          pending.reset();
        }
        if (pending) {
          l->cb(std::move(*pending));
          pending.reset();
        }
        if (finished) {
          l->cb(std::move(out));
          done.push_back(l->id);
          break;
        }
        if (!out.tokens.empty() || !out.text_delta.empty()) pending = std::move(out);
      }
      if (pending) l->cb(std::move(*pending));
    }
    if (!done.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t id : done) live_.erase(id);
    }
    // Batch sizes: sequences running per engine step since the last sweep.
    const EngineStats st = engine_->stats();
    if (st.steps > last_steps) {
      for (int64_t k = last_steps; k < st.steps && k < last_steps + 64; ++k) batch_sizes_.observe(double(st.running));
      last_steps = st.steps;
    }
    if (any) {
      sleep = microseconds(50);
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min<microseconds>(sleep * 2, microseconds(250));
    }
  }
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
  b.steps = s.steps;
  b.batch_size = batch_sizes_.snapshot();
  return b;
}

}  // namespace fg::server
