// Counters and timings the engine exposes through stats() (and later /metrics).
#pragma once

#include <cstdint>

#include "engine/spec_decoder.h"
#include "engine/step_latency.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_cache.h"

namespace fg {

// Cumulative seconds spent in each phase of the step loop.
struct StepTimes {
  double propose = 0.0;  // speculative drafting (n-gram lookup or the draft model's steps)
  double schedule = 0.0;
  double build = 0.0;        // batch builder
  double forward = 0.0;      // model forward, including the metadata upload
  double sample = 0.0;       // penalties, sampling, ids back to the host
  double postprocess = 0.0;  // appending tokens, stop checks, events
  double total() const { return propose + schedule + build + forward + sample + postprocess; }
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  PagePoolStats pages;
  int64_t submitted = 0;
  int64_t finished = 0;  // every finish reason, cancellations and errors included
  int64_t cancelled = 0;
  int64_t failed = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t decode_only_steps = 0;
  int64_t prefill_tokens = 0;  // tokens run without sampling or as a prompt's last token,
                               // recomputation after preemption included
  int64_t generated_tokens = 0;
  int64_t jump_forward_tokens = 0;   // of generated_tokens, forced by a constraint and run as one query
  int64_t cached_prompt_tokens = 0;  // sum of the finished requests' cached_tokens
  // Prefix cache. Lookups happen at every admission (resumes after preemption too); the hit ratio
  // is hit tokens over looked-up tokens. pages.cached counts the evictable cached pages.
  bool prefix_cache_enabled = false;
  int64_t prefix_cache_lookups = 0;
  int64_t prefix_cache_hits = 0;  // lookups that took at least one page
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_deferred = 0;  // admissions that waited for pages being computed
  PrefixCacheStats prefix_cache;      // entries, published, duplicates, collisions, evicted
  double prefix_cache_hit_ratio() const {
    return prefix_cache_query_tokens > 0 ? double(prefix_cache_hit_tokens) / double(prefix_cache_query_tokens) : 0.0;
  }
  StepLatencyStats step_latency;              // the prefill chunk under a latency budget
  SpecMethod spec_method = SpecMethod::kOff;  // speculative decoding
  SpecStats spec;
  StepTimes times;
  double last_step_seconds = 0.0;
  double busy_seconds() const { return times.total(); }
  double mean_step_seconds() const { return steps > 0 ? busy_seconds() / double(steps) : 0.0; }
  // Output tokens per second of time spent stepping.
  double tokens_per_second() const { return busy_seconds() > 0.0 ? double(generated_tokens) / busy_seconds() : 0.0; }
};

}  // namespace fg
