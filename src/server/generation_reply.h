// GenerationReply: the ReplySource shared by every generating route (OpenAI chat/completions,
// TGI generate/generate_stream). It submits one backend request per choice, gathers their events
// from backend threads into a locked queue, and on the connection's strand hands them to the
// protocol subclass, which formats SSE chunks or the final JSON body. It also does the
// bookkeeping every route shares: TTFT / inter-token / end-to-end latency, token counters,
// finish reasons, the one log line per request, and cancellation of every choice when the client
// leaves or the reply is dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/generation_backend.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/request_body.h"

namespace fg::server {

// What the routes share: the backend, metrics, limits. Owned by ApiServer.
struct ApiContext {
  GenerationBackend& backend;
  Metrics& metrics;
  int64_t max_concurrent_requests = 256;  // generation requests in flight (queued or producing)
  int64_t max_queued_requests = 256;      // of those, requests with no output yet
  RequestLimits limits;
  std::atomic<int64_t> in_flight{0};  // GenerationReply objects alive
  std::atomic<int64_t> queued{0};     // GenerationReply objects submitted that have seen no event yet
  std::atomic<uint64_t> next_id{0};
  std::string id_prefix;  // random per process, so ids differ across restarts
  bool log_requests = true;
  bool strict_model_name = false;  // a `model` that is not a served name gets 404 (else it is accepted)

  ApiContext(GenerationBackend& b, Metrics& m) : backend(b), metrics(m) {}
  // "cmpl-" + unique suffix.
  std::string make_id(const char* prefix);
};

class GenerationReply : public ReplySource {
 public:
  using Clock = std::chrono::steady_clock;

  GenerationReply(ApiContext& ctx, std::string route, std::string request_id, ApiDialect dialect);
  ~GenerationReply() override;

  // Submits every choice; consecutive groups of `choices_per_prompt` share one prompt (OpenAI n),
  // which usage counts once. On failure, cancels the ones already queued and returns the error
  // (nothing has been sent; the caller answers with it). A request over --max-concurrent-requests
  // or --max-queued-requests is refused with 429 before anything is submitted (the count is taken
  // when this reply was made, so simultaneous requests cannot all slip under the limit).
  std::optional<ApiError> submit_all(std::vector<GenerationRequest> requests, size_t choices_per_prompt = 1);

  void start(std::function<void()> wake) override;
  bool poll(std::string& out) override;
  void cancel() override;
  HttpResponse final_head() override { return final_head_; }

  const std::string& request_id() const { return request_id_; }

 protected:
  struct Choice {
    uint64_t handle = 0;
    bool submitted = false;
    bool finished = false;
    int64_t prompt_tokens = 0;
    bool counts_prompt = true;  // first choice of its prompt
    int64_t generated = 0;
    std::string text;                    // every text delta so far
    std::vector<GeneratedToken> tokens;  // only when keep_tokens_
    GenerationEvent final;               // the finished event (tokens moved out)
  };

  // Called for each event, in order per choice. `choice.text`/`tokens`/`generated` already
  // include this event; `ev.finished()` marks the last one of the choice.
  virtual void on_event(size_t index, const GenerationEvent& ev, std::string& out) = 0;
  // Called once, after every choice finished. Deferred replies set final_head_ here.
  virtual void on_complete(std::string& out) = 0;

  // Usage: each prompt once, however many choices it has.
  int64_t total_prompt_tokens() const;
  int64_t total_cached_tokens() const;
  int64_t total_generated_tokens() const;
  // Speculative drafts (a prediction's tokens) verified over every choice, and those accepted.
  int64_t total_draft_tokens() const;
  int64_t total_accepted_draft_tokens() const;
  // The first error among finished choices, if any.
  const GenerationEvent* first_error() const;
  bool any_cancelled() const;

  ApiContext& ctx_;
  std::vector<Choice> choices_;
  bool keep_tokens_ = false;
  HttpResponse final_head_;
  int64_t created_unix_ = 0;

 private:
  struct Queue {
    std::mutex mu;
    std::vector<std::pair<size_t, GenerationEvent>> events;
    std::function<void()> wake;
  };

  void finish_request();

  std::string route_;
  std::string request_id_;
  ApiDialect dialect_;
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  Clock::time_point arrival_ = Clock::now();
  Clock::time_point first_token_{};
  std::vector<Clock::time_point> last_token_;
  int64_t in_flight_at_start_ = 0;  // in_flight including this reply, when it was made
  bool queued_ = false;             // counted in ctx_.queued
  bool completed_ = false;
  bool cancelled_ = false;
};

}  // namespace fg::server
