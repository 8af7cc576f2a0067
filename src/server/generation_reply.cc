// GenerationReply: event plumbing and per-request bookkeeping shared by the generating routes.
#include "server/generation_reply.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <ctime>

namespace fg::server {

std::string ApiContext::make_id(const char* prefix) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s-%s%010llu", prefix, id_prefix.c_str(),
                static_cast<unsigned long long>(next_id.fetch_add(1)));
  return buf;
}

GenerationReply::GenerationReply(ApiContext& ctx, std::string route, std::string request_id, ApiDialect dialect)
    : ctx_(ctx), route_(std::move(route)), request_id_(std::move(request_id)), dialect_(dialect) {
  in_flight_at_start_ = ++ctx_.in_flight;
  ctx_.metrics.set_in_flight(ctx_.in_flight.load());
  created_unix_ = static_cast<int64_t>(std::time(nullptr));
}

GenerationReply::~GenerationReply() {
  // Dropped before completion (server stopping, submit failure): nobody will read the rest.
  for (Choice& c : choices_)
    if (c.submitted && !c.finished) ctx_.backend.cancel(c.handle);
  if (queued_) --ctx_.queued;
  ctx_.metrics.set_queued(ctx_.queued.load());
  --ctx_.in_flight;
  ctx_.metrics.set_in_flight(ctx_.in_flight.load());
}

std::optional<ApiError> GenerationReply::submit_all(std::vector<GenerationRequest> requests,
                                                    size_t choices_per_prompt) {
  if (in_flight_at_start_ > ctx_.max_concurrent_requests) {
    completed_ = true;
    return ApiError{429,
                    "The server is at its limit of " + std::to_string(ctx_.max_concurrent_requests) +
                        " concurrent requests (--max-concurrent-requests); retry later.",
                    "rate_limit_error", "", "queue_full"};
  }
  if (ctx_.queued.fetch_add(1) >= ctx_.max_queued_requests) {
    --ctx_.queued;
    completed_ = true;
    return ApiError{429,
                    "The server's queue is full: " + std::to_string(ctx_.max_queued_requests) +
                        " requests are waiting to start (--max-queued-requests); retry later.",
                    "rate_limit_error", "", "queue_full"};
  }
  queued_ = true;
  ctx_.metrics.set_queued(ctx_.queued.load());
  if (choices_per_prompt == 0) choices_per_prompt = 1;
  choices_.resize(requests.size());
  last_token_.assign(requests.size(), Clock::time_point{});
  for (size_t i = 0; i < requests.size(); ++i) {
    choices_[i].prompt_tokens = int64_t(requests[i].prompt_ids.size());
    choices_[i].counts_prompt = i % choices_per_prompt == 0;
    std::shared_ptr<Queue> q = queue_;
    auto callback = [q, i](GenerationEvent&& ev) {
      std::function<void()> wake;
      {
        std::lock_guard<std::mutex> lock(q->mu);
        q->events.emplace_back(i, std::move(ev));
        wake = q->wake;
      }
      if (wake) wake();
    };
    Result<uint64_t> handle = ctx_.backend.submit(std::move(requests[i]), std::move(callback));
    if (!handle.is_ok()) {
      for (size_t k = 0; k < i; ++k) {
        ctx_.backend.cancel(choices_[k].handle);
      }
      // Those cancelled choices still deliver their final events into queue_, which outlives us
      // through the callbacks; mark them finished so the destructor does not cancel twice.
      for (size_t k = 0; k < i; ++k) choices_[k].finished = true;
      completed_ = true;
      return api_error_from_status(handle.status(), dialect_);  // counted by ApiServer::handle
    }
    choices_[i].handle = *handle;
    choices_[i].submitted = true;
  }
  return std::nullopt;
}

void GenerationReply::start(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(queue_->mu);
  queue_->wake = std::move(wake);
}

void GenerationReply::cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  for (Choice& c : choices_)
    if (c.submitted && !c.finished) ctx_.backend.cancel(c.handle);
}

bool GenerationReply::poll(std::string& out) {
  if (completed_) return true;
  std::vector<std::pair<size_t, GenerationEvent>> events;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    events.swap(queue_->events);
  }
  const Clock::time_point now = Clock::now();
  if (queued_ && !events.empty()) {
    // The first sign of life: the request has left the queue.
    queued_ = false;
    --ctx_.queued;
    ctx_.metrics.set_queued(ctx_.queued.load());
  }
  for (auto& [index, ev] : events) {
    if (index >= choices_.size()) continue;
    Choice& c = choices_[index];
    if (c.finished) continue;
    if (!ev.tokens.empty()) {
      const auto n = int64_t(ev.tokens.size());
      if (c.generated == 0) {
        const double ttft = std::chrono::duration<double>(now - arrival_).count();
        ctx_.metrics.observe_ttft(ttft);
        if (first_token_ == Clock::time_point{}) first_token_ = now;
      } else {
        // Tokens that arrive together share the interval since the previous event.
        const double gap = std::chrono::duration<double>(now - last_token_[index]).count() / double(n);
        for (int64_t k = 0; k < n; ++k) ctx_.metrics.observe_itl(gap);
      }
      last_token_[index] = now;
      c.generated += n;
    }
    c.text += ev.text_delta;
    if (keep_tokens_) c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished()) {
      c.finished = true;
      if (ev.prompt_tokens == 0) ev.prompt_tokens = c.prompt_tokens;
      if (ev.generated_tokens == 0) ev.generated_tokens = c.generated;
      ctx_.metrics.count_finish(*ev.finish);
      ctx_.metrics.add_tokens(ev.prompt_tokens, ev.cached_prompt_tokens, ev.generated_tokens);
    }
    on_event(index, ev, out);
    if (ev.finished()) {
      ev.tokens.clear();
      c.final = std::move(ev);
    }
  }
  for (const Choice& c : choices_)
    if (!c.finished) return false;
  on_complete(out);
  finish_request();
  completed_ = true;
  return true;
}

int64_t GenerationReply::total_prompt_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_)
    if (c.counts_prompt) n += c.final.prompt_tokens ? c.final.prompt_tokens : c.prompt_tokens;
  return n;
}

int64_t GenerationReply::total_cached_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_)
    if (c.counts_prompt) n += c.final.cached_prompt_tokens;
  return n;
}

int64_t GenerationReply::total_draft_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.final.draft_tokens;
  return n;
}

int64_t GenerationReply::total_accepted_draft_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.final.accepted_draft_tokens;
  return n;
}

int64_t GenerationReply::total_generated_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.generated;
  return n;
}

const GenerationEvent* GenerationReply::first_error() const {
  for (const Choice& c : choices_)
    if (c.finished && c.final.finish == FinishReason::kError) return &c.final;
  return nullptr;
}

bool GenerationReply::any_cancelled() const {
  for (const Choice& c : choices_)
    if (c.finished && c.final.finish == FinishReason::kCancelled) return true;
  return false;
}

void GenerationReply::finish_request() {
  const Clock::time_point now = Clock::now();
  const double e2e = std::chrono::duration<double>(now - arrival_).count();
  ctx_.metrics.observe_e2e(e2e);
  const int status = final_head_.status;
  ctx_.metrics.count_request(route_, status);
  if (!ctx_.log_requests) return;
  const double ttft_ms = first_token_ == Clock::time_point{}
                             ? -1.0
                             : std::chrono::duration<double, std::milli>(first_token_ - arrival_).count();
  std::string reasons;
  for (const Choice& c : choices_) {
    if (!reasons.empty()) reasons += ',';
    reasons += c.final.finish ? finish_reason_name(*c.final.finish) : "none";
  }
  spdlog::info(
      "{} {} status={} prompt_tokens={} cached_tokens={} completion_tokens={} ttft_ms={:.1f} duration_ms={:.1f} "
      "finish={}",
      request_id_, route_, status, total_prompt_tokens(), total_cached_tokens(), total_generated_tokens(), ttft_ms,
      e2e * 1000.0, reasons);
}

}  // namespace fg::server
