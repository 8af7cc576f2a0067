// The engine: continuous batching where every step is one ragged forward pass.
//
// EngineCore is the single-threaded heart: step() = schedule -> build the batch -> forward ->
// sample -> append tokens, emit events, finish sequences. It owns the page pool, the scheduler and
// every sequence. Tests may drive it directly, step by step.
//
// Engine wraps a core in its own thread. Client threads call submit / cancel / stats; they talk
// to the engine thread only through a locked inbox and the per-request event streams. Validation
// happens on the caller's thread, so a request that can never run is refused at submit with a
// message (context too long, bigger than the whole KV pool, bad parameters).
//
// Prefix caching (on by default, EngineConfig::enable_prefix_cache) shares full KV pages between
// requests whose token prefixes agree; see kvcache/prefix_cache.h for the cache and scheduler.h
// for how admission and publication use it. Each request reports the prompt tokens it was served
// from the cache (RequestEvent::cached_tokens); stats() counts lookups, hit tokens and the ratio.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/engine_stats.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec_decoder.h"
#include "engine/step_runner.h"
#include "engine/stop_matcher.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_cache.h"

namespace fg {

// What one step ran, for observers such as the server's batch-size histogram and --step-trace.
struct StepSummary {
  int64_t step = 0;            // 1 for the engine's first step
  int32_t num_seqs = 0;        // sequences in the step's batch
  int32_t num_decode = 0;      // of them decodes (or verifications)
  int32_t prefill_tokens = 0;  // every other token of the step
  int32_t prefill_chunk = -1;  // the latency budget's chunk for this step (-1: not limited)
  int64_t running = 0;         // sequences running and waiting after the step
  int64_t waiting = 0;
  double start_seconds = 0.0;  // on the step clock
  double seconds = 0.0;        // the whole step: schedule to postprocess
};

struct EngineConfig {
  SchedulerConfig scheduler;
  uint64_t seed = 0;                        // seeds requests that bring none (mixed with the request id)
  StopMatcherFactory stop_matcher_factory;  // empty: requests with stop strings are refused
  bool enable_prefix_cache = true;          // share KV pages of common prefixes (--no-prefix-cache: false)
  PrefixCacheOptions prefix_cache;          // its knobs (tests narrow the hash to force collisions)
  // Called on the engine thread after every step that ran a batch; must be cheap and never block.
  std::function<void(const StepSummary&)> on_step;
  SpecConfig spec;  // speculative decoding (off by default); kDraft needs the runner's draft()
  // Seconds on a monotonic clock, which times each step for the scheduler's step-time model
  // (engine/step_latency.h); empty: std::chrono::steady_clock. Tests inject a simulated one.
  std::function<double()> step_clock;
};

class EngineCore {
 public:
  // The runner must outlive the core.
  EngineCore(const EngineConfig& config, StepRunner& runner);

  // Validates and turns a request into a sequence (thread-safe: reads only immutable state).
  Result<std::unique_ptr<Sequence>> prepare(Request request, uint64_t id) const;
  // Queues a prepared sequence.
  void add(std::unique_ptr<Sequence> seq);
  // Convenience for single-threaded use: prepare + add.
  Result<RequestHandle> submit(Request request);
  // Ends the request with reason cancelled and frees its pages now. False if it is not known
  // (already finished).
  bool cancel(uint64_t id);
  void cancel_all();

  // One step. Failures of the forward pass end the step's requests with an error (returned here
  // too, for logging); the engine stays usable.
  Status step();
  bool has_work() const { return scheduler_.has_work(); }
  EngineStats stats() const;
  const PagePool& pool() const { return pool_; }
  StepRunner& runner() { return runner_; }
  // nullptr when the prefix cache is off.
  PrefixCache* prefix_cache() { return prefix_cache_.get(); }

 private:
  // Ends the sequence with `e` (which may carry its last token) as the stream's finishing event.
  void finish(Sequence& seq, FinishReason reason, Status status = Status::ok(), RequestEvent e = {});
  void postprocess(const StepPlan& plan, const std::vector<SampleOutcome>& outcomes);
  // The step's owed prompt logprobs: logits rows [first_row, end) in plan order (build_step),
  // appended to each sequence's prompt_lp.
  Status prompt_logprobs(const StepPlan& plan, const Tensor& logits, int64_t first_row);
  // Now on EngineConfig::step_clock, in seconds.
  double step_clock_now() const;
  // The finish reason `token` (just appended to seq) gives, if any.
  std::optional<FinishReason> finish_reason_for(Sequence& seq, int32_t token) const;

  EngineConfig config_;
  StepRunner& runner_;
  int32_t vocab_;
  int32_t max_model_len_;
  std::vector<int32_t> eos_ids_;
  PagePool pool_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // after pool_ (it registers with the pool)
  Scheduler scheduler_;
  SpecDecoder spec_;
  Sampler sampler_;
  uint64_t next_id_ = 1;  // for submit(); Engine hands out its own ids
  uint64_t next_arrival_ = 0;
  EngineStats counters_;
  std::vector<SampleGroup> groups_;
  std::vector<SampleOutcome> outcomes_;
  std::vector<SampledToken> emitted_;  // postprocess scratch
  std::vector<int32_t> targets_;       // prompt_logprobs scratch
  std::vector<PromptLogprob> prompt_lp_;
  std::vector<int32_t> forced_;
};

class Engine {
 public:
  // Starts the engine thread. The runner is owned by the engine.
  Engine(const EngineConfig& config, std::unique_ptr<StepRunner> runner);
  ~Engine();  // cancels what is left, joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<RequestHandle> submit(Request request);
  // Asynchronous: the engine thread ends the request (reason cancelled) before its next step.
  void cancel(uint64_t id);
  // A snapshot taken after the latest step.
  EngineStats stats() const;
  void shutdown();

 private:
  void loop();

  std::unique_ptr<StepRunner> runner_;
  EngineCore core_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<uint64_t> cancels_;
  bool stopping_ = false;
  EngineStats snapshot_;
  std::thread thread_;
};

}  // namespace fg
