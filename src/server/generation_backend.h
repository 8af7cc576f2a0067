// GenerationBackend: the one interface between the HTTP server and whatever produces tokens.
//
// The server (routes, protocols, transport) sees only this file: the engine, the tokenizer and the
// chat-template engine are reached through an implementation of it (engine_backend.h), and the
// unit tests use a deterministic fake. Keeping the seam this narrow lets the HTTP layer be tested
// without a model and keeps engine types out of every route.
//
// Threading contract (every implementation must honour it):
//  - every method may be called from any HTTP thread, concurrently;
//  - `submit` returns at once; the request's events are delivered through its EventCallback, from
//    any thread, in order, one call at a time per request; exactly one event has `finish` set and
//    it is the last one; after it the callback is destroyed;
//  - `cancel` may be called at any time, also after the request finished (then it does nothing);
//    a cancelled request still ends with one finished event (reason kCancelled) and frees its KV
//    pages before that event is delivered.
// The request vocabulary (sampling settings, finish reasons, token logprobs) is the one every layer
// shares (src/request/). This file must never include engine, tokenizer or Boost headers.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "request/constraint_spec.h"
#include "request/finish_reason.h"
#include "request/sampling_params.h"
#include "request/token_logprob.h"

namespace fg::server {

struct GenerationRequest {
  std::string request_id;  // for logs; the backend may add a suffix per choice
  std::vector<int32_t> prompt_ids;
  // What to sample and when to stop (request/sampling_params.h), already validated by the
  // protocol layer. Stop strings are matched on the text by the backend, which cuts them out.
  SamplingParams sampling;
  // How the text deltas are made.
  bool skip_special_tokens = true;               // leave special tokens out of the text
  std::vector<std::string> keep_special_tokens;  // ... but these (tool-call markers such as [TOOL_CALLS])
  bool include_stop_str_in_output = false;       // keep a matched stop string at the end of the text
  // -1: none; n >= 0: each prompt token's logprob given the ones before it and the top n at its
  // position (OpenAI echo with logprobs, TGI decoder_input_details).
  int prompt_logprobs = -1;
  int priority = 0;         // larger first when the scheduler honours priorities
  bool speculative = true;  // speculative decoding may draft for it (when the engine speculates)
  // Predicted output (OpenAI `prediction`), tokenized: drafted and verified as speculation, whether
  // or not the engine speculates otherwise (engine/request.h). Empty: none.
  std::vector<int32_t> prediction;
  // Structured output / tool calls: what the output must follow (request/constraint_spec.h).
  // Compiling it can fail at submit (kInvalidArgument, kUnsupported naming the feature: a 400).
  std::optional<ConstraintSpec> constraint;
  bool jump_forward = true;  // forced tokens run as one query (same tokens either way)
};

struct GeneratedToken {
  int32_t id = 0;
  std::string text;      // the token's own text (may be a partial UTF-8 sequence)
  float logprob = 0.0f;  // meaningful when logprobs >= 0 was asked
  bool special = false;
  std::vector<TokenLogprob> top;  // size = SamplingParams::logprobs when > 0
};

struct GenerationEvent {
  std::vector<GeneratedToken> tokens;  // new tokens since the previous event (may be empty)
  std::string text_delta;              // new, complete UTF-8 text, stop strings already cut
  std::optional<FinishReason> finish;  // set on the request's last event, and only there
  std::string stop_string;             // the matched stop string (kStopString)
  Status error;                        // kError only
  // Set on the finished event.
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t generated_tokens = 0;
  int64_t draft_tokens = 0;           // speculative drafts (a prediction's too) the model verified
  int64_t accepted_draft_tokens = 0;  // ... and accepted
  uint64_t seed = 0;                  // the seed actually used
  // When asked: one entry per prompt token, the first with a NaN logprob and no top list. Set on
  // the first event after the prompt ran and again on the finished one.
  std::vector<GeneratedToken> prompt_logprobs;

  bool finished() const { return finish.has_value(); }
};

using EventCallback = std::function<void(GenerationEvent&&)>;

// Static facts about the served model.
struct ModelInfo {
  std::string id;                    // the name the server reports (OpenAI `model`, TGI `model_id`)
  std::vector<std::string> aliases;  // further names it answers to (--served-model-name A B ...)
  std::string model_dir;
  int64_t max_model_len = 0;  // prompt + output tokens, at most
  int64_t vocab_size = 0;
  std::string dtype;    // "float32", "bfloat16", ...
  std::string device;   // "cpu", "cuda"
  int64_t created = 0;  // unix seconds, for /v1/models
  int64_t max_batch_tokens = 0;
  int64_t max_running = 0;
  bool has_chat_template = false;
  // The tool-call syntax of the model's chat template: "hermes", "llama3_json", "mistral", or ""
  // when none is recognized (tool_choice "required" or a named tool is then refused).
  std::string tool_call_format;
  // Chat replies split the model's <think> ... </think> block out as `reasoning_content`
  // (server/reasoning.h): the chat template speaks of it, or --reasoning-parser think.
  bool reasoning = false;

  // True when `name` is the id or one of the aliases.
  bool has_name(std::string_view name) const {
    if (name == id) return true;
    for (const std::string& a : aliases)
      if (name == a) return true;
    return false;
  }
};

// Histogram counts for fixed upper bounds (a Prometheus histogram without the _sum rounding).
struct HistogramSnapshot {
  std::vector<double> upper_bounds;  // ascending; the +Inf bucket is implicit
  std::vector<uint64_t> counts;      // per bucket, not cumulative; size upper_bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;
};

struct BackendStats {
  int64_t waiting = 0;  // queued, not yet scheduled
  int64_t running = 0;  // sequences being prefilled or decoded
  int64_t kv_pages_total = 0;
  int64_t kv_pages_used = 0;    // held by live sequences (cached-but-free pages are not "used")
  int64_t kv_pages_cached = 0;  // evictable prefix-cache pages
  int64_t preemptions = 0;
  int64_t steps = 0;
  HistogramSnapshot batch_size;     // sequences per engine step
  int64_t jump_forward_tokens = 0;  // tokens a constraint forced, run as one multi-token query
  // Speculative decoding (all zero while nothing was drafted: the engine does not speculate and
  // no request brought a prediction).
  int64_t spec_draft_tokens = 0;          // drafted tokens verified
  int64_t spec_accepted_tokens = 0;       // ... accepted
  std::vector<int64_t> spec_drafted_at;   // [k] drafts verified at position i + 1
  std::vector<int64_t> spec_accepted_at;  // [k] ... accepted
  // The prefill chunk under a latency budget (engine/step_latency.h; all zero when it is off).
  double step_latency_budget_seconds = 0.0;  // budget of a step that carries running decodes
  double decode_step_seconds = 0.0;          // median decode-only step
  double prefill_token_seconds = 0.0;        // fitted cost of a prefill token in such a step
  int64_t prefill_chunk_tokens = 0;          // the chunk the latest such step could take
  int64_t prefill_chunk_limited_steps = 0;   // steps whose prefill filled a chunk the budget cut
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;

  virtual const ModelInfo& model_info() const = 0;

  // Text -> ids. add_special_tokens: the tokenizer's BOS/EOS rules (tokenizer_config.json).
  virtual Result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special_tokens) = 0;
  // ids -> text. An id outside the vocabulary is kInvalidArgument.
  virtual Result<std::string> detokenize(std::span<const int32_t> ids, bool skip_special_tokens) = 0;
  // Renders a chat with the model's template. messages/tools are OpenAI-shaped JSON arrays (tools
  // may be null); extra holds template variables (chat_template_kwargs). ordered_json keeps the
  // request's key order, which templates that print `tools | tojson` show.
  virtual Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                          bool add_generation_prompt, const nlohmann::ordered_json& extra) = 0;

  // Queues a generation. Returns a handle for cancel(), or kResourceExhausted when the queue is
  // full, kContextTooLong when the request can never fit, kInvalidArgument for bad settings.
  // On error the callback is never called.
  virtual Result<uint64_t> submit(GenerationRequest request, EventCallback on_event) = 0;
  virtual void cancel(uint64_t handle) = 0;

  virtual BackendStats stats() = 0;
};

}  // namespace fg::server
