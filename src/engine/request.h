// A request as a client submits it, and the thread-safe stream of events the engine sends back.
//
// Threads: the engine thread is the only producer of a request's events; any number of client
// threads may wait on the stream. A stream ends with exactly one event carrying a finish reason.
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
#include "engine/sampling_params.h"

namespace fg {

enum class FinishReason : uint8_t {
  kLength,     // max_new_tokens, the model's context, or the KV pool's capacity reached
  kStop,       // a stop token id or a stop string
  kEos,        // the model's end-of-sequence token
  kCancelled,  // cancel(id) or shutdown
  kError,      // the request failed; the event's status says why
};
const char* finish_reason_name(FinishReason r);  // "length", "stop", "eos", "cancelled", "error"

struct Request {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int priority = 0;  // larger is served first; ties in arrival order
  // Prefix-cache namespace: pages are shared only between requests with the same salt. Anything
  // that changes the KV of the same tokens (a LoRA adapter, later) or a tenant boundary goes here.
  uint64_t cache_salt = 0;
};

// One candidate of a logprobs list.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One step's output for one request.
struct RequestEvent {
  std::optional<int32_t> token;            // the new token, if this event carries one
  bool has_logprobs = false;               // the request asked for logprobs
  float logprob = 0.0f;                    // of `token`, when has_logprobs
  std::vector<TokenLogprob> top_logprobs;  // the top n, best first, when requested
  std::optional<FinishReason> finish;      // set on the last event of the stream
  Status status;                           // set when finish == kError
  // Prompt tokens served from the prefix cache when the request was first admitted (OpenAI's
  // usage.prompt_tokens_details.cached_tokens). Set on every event; 0 before admission (e.g. a
  // request cancelled while waiting) or with the cache off.
  int32_t cached_tokens = 0;
};

class EventStream {
 public:
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
};

// Everything a request produced, gathered from its stream.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> output_ids;
  std::vector<float> logprobs;  // one per output token when requested
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  FinishReason finish_reason = FinishReason::kError;
  Status status;
  int32_t cached_tokens = 0;  // as in RequestEvent, from the last event
};

struct RequestHandle {
  uint64_t id = 0;
  std::shared_ptr<EventStream> events;
  // Blocks until the request finishes and returns all it produced (consumes the stream).
  RequestOutput wait() const;
};

}  // namespace fg
