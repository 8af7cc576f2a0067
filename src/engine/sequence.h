// A request inside the engine: its tokens, how many of them are in the KV cache, the pages that
// hold them, and the per-request sampling state. Owned by the scheduler; touched only by the
// engine thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "kvcache/prefix_cache.h"
#include "spec/prediction.h"

namespace fg {

enum class SeqState : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  int priority = 0;
  uint64_t arrival = 0;  // submission order; smaller is older
  SamplingParams params;
  uint64_t seed = 0;            // params.seed or one the engine derived; with the output position it
                                // fixes every random draw, so preemption and batch mates change nothing
  std::vector<int32_t> tokens;  // prompt then output
  int32_t num_prompt = 0;
  // Output tokens at most: max_new_tokens, or the room the context and the KV pool leave when the
  // request set no limit.
  int32_t max_output_tokens = 0;
  int32_t num_computed = 0;    // leading tokens whose K/V are in the cache
  std::vector<int32_t> pages;  // block table: page i holds token slots [i*P, (i+1)*P)
  // Leading entries of `pages` already released because no query of this sequence can attend to
  // them any more (every layer windowed: Scheduler::release_unreachable_pages). They hold the id of
  // the first page still held, which attention may read only where its window masks it out.
  int32_t num_dropped_pages = 0;
  SeqState state = SeqState::kWaiting;
  int32_t num_preemptions = 0;
  uint64_t cache_salt = 0;        // prefix-cache namespace (Request::cache_salt)
  PrefixChain prefix;             // how far the prefix cache knows this sequence's pages
  bool admitted_once = false;     // set at the first admission
  int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache at the first
                                  // admission (what the request reports as cached_tokens)
  std::shared_ptr<EventStream> events;
  std::unique_ptr<StopMatcher> stop_matcher;
  std::unordered_map<int32_t, int32_t> output_counts;  // for presence/frequency penalties
  std::chrono::steady_clock::time_point submit_time;

  // ---- constrained generation (engine/token_constraint.h); null when unconstrained
  std::shared_ptr<TokenConstraint> constraint;
  bool jump_forward = true;

  // ---- speculative decoding (engine/spec_decoder.h); all empty when the engine does not speculate
  bool speculate = true;              // the request allows it (Request::speculative)
  std::vector<int32_t> draft;         // tokens drafted for this step (cleared after it)
  std::vector<float> draft_probs;     // [draft.size(), vocab] the draft model's distributions, for
                                      // sampled requests (rejection sampling needs q)
  std::vector<int32_t> verify_input;  // [1 + draft.size()] the step's input: last token, then drafts
  float spec_acceptance = 1.0f;       // running mean of accepted / drafted, for back-off
  int32_t spec_cooldown = 0;          // steps left without speculating after low acceptance
  int32_t spec_drafted = 0;           // this request's drafts verified so far ...
  int32_t spec_accepted = 0;          // ... and accepted
  std::vector<int32_t> prediction;    // Request::prediction: drafted from instead of the engine's method
  spec::PredictionState prediction_state;
  std::vector<int32_t> draft_pages;  // the draft model's own KV pages (block table)
  int32_t draft_computed = 0;        // leading tokens whose draft-model K/V are in those pages

  // ---- prompt logprobs (SamplingParams::prompt_logprobs)
  int32_t prompt_lp_next = 1;            // the first prompt position whose logprob is still owed
  std::vector<PromptLogprob> prompt_lp;  // positions [1, prompt_lp_next), until sent
  bool owes_prompt_logprobs() const { return params.wants_prompt_logprobs() && prompt_lp_next < num_prompt; }

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_output() const { return num_tokens() - num_prompt; }
  // Tokens still to be run through the model before the next sample.
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
};

// The prompt positions whose logprobs a chunk of new tokens [first, first + n) of `seq` yields:
// each owed position p with its predicting token p - 1 inside the chunk, p in [first_pos,
// first_pos + count); that token's row is the chunk's (first_pos - 1 - first).
struct PromptRows {
  int32_t first_pos = 0;
  int32_t count = 0;
};
inline PromptRows prompt_rows(const Sequence& seq, int32_t first, int32_t n) {
  if (!seq.owes_prompt_logprobs()) return {};
  const int32_t lo = std::max(first + 1, seq.prompt_lp_next);
  const int32_t hi = std::min(first + n + 1, seq.num_prompt);
  return hi > lo ? PromptRows{lo, hi - lo} : PromptRows{};
}

// Prefill tokens a sequence that owes prompt logprobs runs per step: each yields a logits row.
inline constexpr int32_t kPromptLogprobsChunk = 256;

}  // namespace fg
