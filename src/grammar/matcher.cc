// GrammarMatcher: one request's grammar state (see matcher.h).
#include "grammar/matcher.h"

#include <algorithm>

#include "core/status.h"

namespace fg::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar)
    : tg_(std::move(grammar)), g_(tg_->grammar()), stepper_(g_, arena_) {
  reset();
}

void GrammarMatcher::reset() {
  tops_.clear();
  snaps_.clear();
  stepper_.begin();
  stepper_.expand(arena_.intern(g_.rules()[size_t(g_.root())].start, kRootParent));
  const std::vector<int32_t> tops = stepper_.tops();
  push_state(tops, stepper_.end_exact(), false);
}

void GrammarMatcher::push_state(std::span<const int32_t> tops, bool can_end, bool terminated) {
  Snapshot s;
  s.offset = int32_t(tops_.size());
  s.count = int32_t(tops.size());
  s.can_end = can_end;
  s.terminated = terminated;
  tops_.insert(tops_.end(), tops.begin(), tops.end());
  snaps_.push_back(s);
}

bool GrammarMatcher::run(std::span<const int32_t> from, std::string_view bytes) {
  run_.assign(from.begin(), from.end());
  run_end_ = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    stepper_.advance(run_, uint8_t(bytes[i]));
    run_ = stepper_.tops();
    run_end_ = stepper_.end_exact();
    if (run_.empty() && !(run_end_ && i + 1 == bytes.size())) return false;
  }
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (snap().terminated || bytes.empty()) return false;
  if (!run(current_tops(), bytes)) return false;
  push_state(run_, run_end_, false);
  return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) {
  if (snap().terminated || bytes.empty()) return false;
  return run(current_tops(), bytes);
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (snap().terminated) return false;
  if (vocab().is_eos(id)) {
    if (!snap().can_end) return false;
    scratch_.assign(current_tops().begin(), current_tops().end());
    push_state(scratch_, true, true);
    return true;
  }
  if (!vocab().is_text(id)) return false;
  return accept_bytes(vocab().token(id));
}

void GrammarMatcher::rollback(int n) {
  FG_CHECK(n >= 0 && n <= num_tokens(), "rollback past the first token");
  for (int i = 0; i < n; ++i) {
    tops_.resize(size_t(snaps_.back().offset));
    snaps_.pop_back();
  }
}

void GrammarMatcher::fill_mask(std::span<uint32_t> words) {
  const GrammarVocab& v = vocab();
  FG_CHECK(words.size() >= size_t(v.mask_words()), "grammar mask buffer too small");
  std::fill(words.begin(), words.end(), 0u);
  uint32_t* mask = words.data();
  auto set = [mask](int32_t id) { mask[size_t(id) >> 5] |= uint32_t(1) << (id & 31); };
  auto test = [mask](int32_t id) { return ((mask[size_t(id) >> 5] >> (id & 31)) & 1) != 0; };
  if (!snap().terminated) {
    nodes_seen_.clear();
    refined_seen_.clear();
    const std::span<const int32_t> tops = current_tops();
    for (size_t k = 0; k < tops.size(); ++k) {
      const int32_t top = tops[k];
      const FrameArena::Frame f = arena_[top];
      const PositionTokens& pt = tg_->position(f.node);
      if (std::find(nodes_seen_.begin(), nodes_seen_.end(), f.node) == nodes_seen_.end()) {
        nodes_seen_.push_back(f.node);
        pt.accepted.add_to(mask, v.text_mask(), scratch_);
      }
      if (pt.uncertain.empty()) continue;
      const int32_t ret = f.parent < 0 ? Grammar::kEndOfInput : arena_[f.parent].node;
      const RefinedTokens* rt = pt.refined_for(ret);
      FG_CHECK(rt != nullptr, "no refined tokens for a return node of the rule");
      const uint64_t key = (uint64_t(uint32_t(f.node)) << 32) | uint32_t(ret);
      if (std::find(refined_seen_.begin(), refined_seen_.end(), key) == refined_seen_.end()) {
        refined_seen_.push_back(key);
        for (int32_t id : rt->accepted) set(id);
      }
      for (int32_t id : rt->uncertain) {
        if (!test(id) && run({&tops[k], 1}, v.token(id))) set(id);
      }
    }
  }
  if (snap().can_end || snap().terminated)
    for (int32_t id : v.eos_ids()) set(id);
}

std::string GrammarMatcher::forced_continuation(size_t max_bytes) {
  std::string out;
  if (snap().terminated) return out;
  run_.assign(current_tops().begin(), current_tops().end());
  bool can_end = snap().can_end;
  while (out.size() < max_bytes && !can_end && !run_.empty()) {
    int forced = -1;
    for (int32_t t : run_) {
      for (const GrammarEdge& e : g_.byte_edges(arena_[t].node)) {
        if (e.lo != e.hi || (forced >= 0 && forced != e.lo)) return out;
        forced = e.lo;
      }
    }
    if (forced < 0) break;
    stepper_.advance(run_, uint8_t(forced));
    run_ = stepper_.tops();
    can_end = stepper_.end_exact();
    out.push_back(char(forced));
  }
  return out;
}

int64_t GrammarMatcher::min_bytes_to_end() const {
  if (accepted()) return 0;
  int64_t best = INT64_MAX;
  for (int32_t t : current_tops()) {
    int64_t sum = 0;
    for (int32_t f = t; f >= 0; f = arena_[f].parent) sum += g_.node(arena_[f].node).min_bytes;
    best = std::min(best, sum);
  }
  return best;
}

}  // namespace fg::grammar
