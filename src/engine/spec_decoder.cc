// SpecDecoder (see spec_decoder.h).
#include "engine/spec_decoder.h"

#include <algorithm>

#include "engine/draft_proposer.h"

namespace fg {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kOff: return "off";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraft: return "draft";
  }
  return "off";
}

SpecDecoder::SpecDecoder(const SpecConfig& config, int32_t max_model_len, StepRunner* draft, int32_t max_batch_tokens)
    : config_(config), max_model_len_(max_model_len) {
  FG_CHECK(config.method == SpecMethod::kOff || config.num_tokens >= 1, "speculative decoding needs k >= 1");
  FG_CHECK(config.method != SpecMethod::kDraft || draft != nullptr, "speculative decoding: no draft model");
  if (config.method == SpecMethod::kDraft) draft_ = std::make_unique<DraftModelProposer>(*draft, max_batch_tokens);
  stats_.drafted_at.assign(size_t(std::max(config.num_tokens, 0)), 0);
  stats_.accepted_at.assign(size_t(std::max(config.num_tokens, 0)), 0);
}

SpecDecoder::~SpecDecoder() = default;

void SpecDecoder::propose(std::span<Sequence* const> running) {
  int32_t decodes = 0;
  for (Sequence* s : running) {
    s->draft.clear();
    s->draft_probs.clear();
    decodes += s->num_uncomputed() == 1 ? 1 : 0;
  }
  if (decodes > config_.max_batch) return;
  drafting_.clear();
  wanted_.clear();
  for (Sequence* s : running) {
    if (!s->speculate || s->num_uncomputed() != 1) continue;
    if (s->spec_cooldown > 0) {
      --s->spec_cooldown;
      continue;
    }
    // The step emits up to k + 1 tokens: never past the output limit or the context.
    const int32_t room = std::min(s->max_output_tokens - s->num_output(), max_model_len_ - s->num_tokens()) - 1;
    const int32_t k = std::min(config_.num_tokens, room);
    if (k <= 0) continue;
    if (!s->prediction.empty()) {
      const std::span<const int32_t> output = std::span<const int32_t>(s->tokens).subspan(size_t(s->num_prompt));
      spec::prediction_propose(output, s->prediction, config_.ngram, k, s->prediction_state, s->draft);
    } else if (config_.method == SpecMethod::kNgram) {
      spec::ngram_propose(s->tokens, config_.ngram, k, s->draft);
    } else if (config_.method == SpecMethod::kDraft) {
      drafting_.push_back(s);
      wanted_.push_back(k);
    }
  }
  if (draft_ && !drafting_.empty()) draft_->propose(drafting_, wanted_);
}

void SpecDecoder::verified(Sequence& seq, int32_t drafted, int32_t accepted) {
  if (draft_) draft_->accepted(seq);
  if (drafted <= 0) return;
  seq.spec_drafted += drafted;
  seq.spec_accepted += accepted;
  ++stats_.verify_steps;
  stats_.draft_tokens += drafted;
  stats_.accepted_tokens += accepted;
  for (int32_t i = 0; i < drafted && size_t(i) < stats_.drafted_at.size(); ++i) {
    ++stats_.drafted_at[size_t(i)];
    if (i < accepted) ++stats_.accepted_at[size_t(i)];
  }
  // A prediction keeps drafting through a run of rejections: after an edit the output usually
  // meets it again, and a pause would miss that.
  if (!seq.prediction.empty()) return;
  // Mean acceptance over recent verifications (exponential, about the last 4).
  seq.spec_acceptance = 0.75f * seq.spec_acceptance + 0.25f * float(accepted) / float(drafted);
  if (seq.spec_acceptance < config_.min_acceptance) {
    seq.spec_cooldown = config_.cooldown_steps;
    seq.spec_acceptance = config_.min_acceptance + 0.2f;  // a fresh start after the pause
  }
}

SpecStats SpecDecoder::stats() const {
  SpecStats s = stats_;
  if (draft_) s.draft_pages_held = draft_->pool().num_held();
  return s;
}

void SpecDecoder::release(Sequence& seq) {
  seq.draft.clear();
  seq.draft_probs.clear();
  if (draft_) draft_->release(seq);
}

}  // namespace fg
