// A request as a client submits it, and the thread-safe stream of events the engine sends back.
//
// Threads: the engine thread is the only producer of a request's events; any number of client
// threads may wait on the stream. A stream ends with exactly one event carrying a finish reason
// (the request's last token, if any, travels in that same event).
//
// Consumers are woken, never made to poll: one waiting on a single stream blocks in next(); one
// serving many requests on one thread (the server's event pump) gives each request the same
// ReadyQueue and sleeps in ReadyQueue::wait() until some stream has events.
// The vocabulary a request shares with the other layers (SamplingParams, FinishReason,
// TokenLogprob) lives in src/request/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "request/finish_reason.h"
#include "request/sampling_params.h"
#include "request/token_logprob.h"

namespace fg {

// A wake-up shared by many event streams. Each push onto an attached stream marks the stream's
// request id; the consumer takes every marked id at once. Marking costs one short lock, plus a
// notify only while the consumer sleeps, so the engine thread never waits on a consumer.
class ReadyQueue {
 public:
  // Producer side (the engine thread, via EventStream::push).
  void mark(uint64_t id);
  // Consumer side. Blocks until an id is marked or close() was called; then appends the marked
  // ids (in marking order; an id may appear more than once) to `out`. False once closed.
  bool wait(std::vector<uint64_t>& out);
  void close();
  // Times wait() returned (tests check that an idle consumer does not spin).
  uint64_t wakeups() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> ready_;
  bool sleeping_ = false;
  bool closed_ = false;
  uint64_t wakeups_ = 0;
};

struct Request {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int priority = 0;  // larger is served first; ties in arrival order
  // Prefix-cache namespace: pages are shared only between requests with the same salt. Anything
  // that changes the KV of the same tokens (a LoRA adapter, later) or a tenant boundary goes here.
  uint64_t cache_salt = 0;
  // Optional: marked with the request's id whenever its stream gets events.
  std::shared_ptr<ReadyQueue> ready;
  // Whether speculative decoding may draft for this request when the engine speculates (per-request
  // opt-out; outputs are the same either way for greedy requests, and follow the same distribution
  // for sampled ones).
  bool speculative = true;
  // Predicted output (spec/prediction.h): the tokens the client expects, drafted and verified as
  // speculation whether or not the engine speculates otherwise (not when `speculative` is false
  // or the request is constrained). Empty: none.
  std::vector<int32_t> prediction;
  // Constrained generation (engine/token_constraint.h): which tokens may come next. A constrained
  // request never speculates. shared_ptr so a Request stays copyable; the engine owns it after
  // submit.
  std::shared_ptr<TokenConstraint> constraint;
  // Whether tokens the constraint forces are run as one multi-token query (jump-forward) rather
  // than sampled one step at a time (the same tokens either way).
  bool jump_forward = true;
};

// One step's output for one request.
struct RequestEvent {
  std::optional<int32_t> token;            // the new token, if this event carries one
  bool has_logprobs = false;               // the request asked for logprobs
  float logprob = 0.0f;                    // of `token`, when has_logprobs
  std::vector<TokenLogprob> top_logprobs;  // the top n, best first, when requested
  // With SamplingParams::prompt_logprobs: the prompt's tokens from the second on, once, on the
  // first event after the prompt ran (the one with the first output token, or the finishing one).
  std::vector<PromptLogprob> prompt_logprobs;
  std::optional<FinishReason> finish;  // set on the last event of the stream
  Status status;                       // set when finish == kError
  // Prompt tokens served from the prefix cache when the request was first admitted (OpenAI's
  // usage.prompt_tokens_details.cached_tokens). Set on every event; 0 before admission (e.g. a
  // request cancelled while waiting) or with the cache off.
  int32_t cached_tokens = 0;
  // Speculative decoding for this request so far: drafted tokens the model verified, and how many
  // of them it accepted (set on every event).
  int32_t draft_tokens = 0;
  int32_t accepted_draft_tokens = 0;
};

class EventStream {
 public:
  EventStream() = default;
  // Every push also marks `id` in `ready` (when not null).
  EventStream(std::shared_ptr<ReadyQueue> ready, uint64_t id) : ready_(std::move(ready)), id_(id) {}

  // Producer side (engine thread).
  void push(RequestEvent event);
  // Consumer side. Blocks until an event arrives; nullopt once the stream ended and was drained.
  std::optional<RequestEvent> next();
  // Non-blocking: nullopt when nothing is queued right now.
  std::optional<RequestEvent> try_next();
  bool finished() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> queue_;
  bool ended_ = false;  // the finishing event was pushed
  std::shared_ptr<ReadyQueue> ready_;
  uint64_t id_ = 0;
};

// Everything a request produced, gathered from its stream.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> output_ids;
  std::vector<float> logprobs;  // one per output token when requested
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<PromptLogprob> prompt_logprobs;  // prompt positions 1.. when requested
  FinishReason finish_reason = FinishReason::kError;
  Status status;
  int32_t cached_tokens = 0;  // as in RequestEvent, from the last event
  int32_t draft_tokens = 0;   // ... and so are these
  int32_t accepted_draft_tokens = 0;
};

struct RequestHandle {
  uint64_t id = 0;
  std::shared_ptr<EventStream> events;
  // Blocks until the request finishes and returns all it produced (consumes the stream).
  RequestOutput wait() const;
};

}  // namespace fg
