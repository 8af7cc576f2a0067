// Speculative decoding in the engine's step loop. Verifying k drafted tokens is one query of
// 1 + k tokens against the KV cache in the same ragged step as everything else (DESIGN.md), so
// the whole mechanism is host-side bookkeeping around the one attention kernel:
//
//  1. propose (before the scheduler runs): for each running decode that may speculate, draft up
//     to k tokens into seq->draft — from the request's predicted output when it brought one
//     (spec/prediction.h; also when the engine does not speculate otherwise), else n-gram prompt
//     lookup (spec/ngram.h) or a draft model (DraftModelProposer, its own KV pages, stepping
//     inside the same step loop);
//  2. the scheduler gives the decode 1 + k query tokens (drafts are cut first when the budget or
//     the pool is short), the step computes logits for all of them;
//  3. the sampler verifies (spec/verify.h): greedy accepts the matching prefix, sampled requests
//     use rejection sampling, so outputs are exactly (greedy) or in distribution (sampled) what
//     plain decoding gives;
//  4. the engine rolls the sequence back over rejected drafts (KV length and pages; only pages of
//     kept tokens are ever published to the prefix cache) and calls verified().
//
// Back-off, so speculation never costs throughput under load: nobody speculates in a step with
// more running decodes than SpecConfig::max_batch (big batches are compute-bound: the extra query
// rows cost about what they save); a sequence whose mean acceptance falls below min_acceptance
// pauses for cooldown_steps, then tries again (not one drafting from its prediction, which keeps
// drafting through an edit to meet the prediction again after it); no sequence drafts past its
// output limit or the model's context. Requests can opt out (Request::speculative).
// Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_runner.h"
#include "spec/ngram.h"

namespace fg {

class DraftModelProposer;

enum class SpecMethod { kOff, kNgram, kDraft };
const char* spec_method_name(SpecMethod m);  // "off", "ngram", "draft"

struct SpecConfig {
  SpecMethod method = SpecMethod::kOff;
  int32_t num_tokens = 4;       // k: drafted tokens per step at most (--num-speculative-tokens)
  spec::NgramOptions ngram;     // --ngram-min / --ngram-max
  int32_t max_batch = 32;       // no speculation in a step with more running decodes than this
  float min_acceptance = 0.3f;  // below this mean acceptance a sequence pauses speculating ...
  int32_t cooldown_steps = 16;  // ... for this many steps
};

struct SpecStats {
  int64_t verify_steps = 0;          // sequence-steps that verified at least one draft
  int64_t draft_tokens = 0;          // tokens drafted and verified
  int64_t accepted_tokens = 0;       // drafts accepted
  std::vector<int64_t> drafted_at;   // [num_tokens]: drafts verified at position i + 1
  std::vector<int64_t> accepted_at;  // [num_tokens]: ... of which accepted
  int64_t draft_pages_held = 0;      // pages of the draft model's pool held now
  double acceptance_rate() const { return draft_tokens > 0 ? double(accepted_tokens) / double(draft_tokens) : 0.0; }
};

class SpecDecoder {
 public:
  // draft: the draft model's runner when config.method == kDraft (must outlive this).
  // max_model_len: the target's context, drafts never run past it.
  SpecDecoder(const SpecConfig& config, int32_t max_model_len, StepRunner* draft, int32_t max_batch_tokens);
  ~SpecDecoder();

  // Whether the engine speculates for every request (a request's prediction is drafted either way).
  bool enabled() const { return config_.method != SpecMethod::kOff; }
  const SpecConfig& config() const { return config_; }
  // Drafts for the running sequences that decode next (clears every other draft). Called every
  // step, speculating or not: requests may bring predictions.
  void propose(std::span<Sequence* const> running);
  // After the step verified `drafted` drafts of seq and accepted `accepted` of them (seq already
  // rolled back).
  void verified(Sequence& seq, int32_t drafted, int32_t accepted);
  // The sequence stopped running (finished, cancelled, preempted): frees its draft-model pages.
  void release(Sequence& seq);
  SpecStats stats() const;

 private:
  SpecConfig config_;
  int32_t max_model_len_;
  std::unique_ptr<DraftModelProposer> draft_;
  SpecStats stats_;
  std::vector<Sequence*> drafting_;
  std::vector<int32_t> wanted_;
};

}  // namespace fg
