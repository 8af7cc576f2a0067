// Scheduler::schedule and the page bookkeeping around it (policy in scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fg {

Scheduler::Scheduler(const SchedulerConfig& config, PagePool& pool, PrefixCache* prefix_cache)
    : config_(config), pool_(pool), prefix_cache_(prefix_cache) {
  FG_CHECK(config.max_batch_tokens > 0 && config.max_running > 0);
  FG_CHECK(prefix_cache == nullptr || prefix_cache->page_size() == pool.page_size(),
           "the prefix cache indexes a pool of another page size");
}

bool Scheduler::served_before(const Sequence* a, const Sequence* b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->arrival < b->arrival;
}

void Scheduler::insert_sorted(std::vector<Sequence*>& v, Sequence* s) {
  v.insert(std::upper_bound(v.begin(), v.end(), s, served_before), s);
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  FG_CHECK(seq->pages.empty() && seq->num_computed == 0, "a new sequence holds no pages");
  seq->state = SeqState::kWaiting;
  Sequence* raw = seq.get();
  FG_CHECK(seqs_.emplace(raw->id, std::move(seq)).second, "duplicate sequence id");
  insert_sorted(waiting_, raw);
}

Sequence* Scheduler::find(uint64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<Sequence*> Scheduler::all_sequences() const {
  std::vector<Sequence*> out;
  out.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) out.push_back(s.get());
  return out;
}

std::unique_ptr<Sequence> Scheduler::remove(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return nullptr;
  std::unique_ptr<Sequence> seq = std::move(it->second);
  seqs_.erase(it);
  auto& list = seq->state == SeqState::kRunning ? running_ : waiting_;
  list.erase(std::find(list.begin(), list.end(), seq.get()));
  release_pages(*seq);
  seq->state = SeqState::kFinished;
  return seq;
}

void Scheduler::release_pages(Sequence& seq) {
  // Leaf first: the LRU then evicts the tail of a cached chain before the pages it hangs from.
  // Pages released earlier for the window are no longer held.
  for (size_t i = seq.pages.size(); i > size_t(seq.num_dropped_pages); --i) pool_.release(seq.pages[i - 1]);
  seq.pages.clear();
  seq.num_dropped_pages = 0;
  seq.prefix.reset();
}

void Scheduler::release_unreachable_pages(Sequence& seq) {
  if (config_.kv_window <= 0 || seq.pages.empty()) return;
  // The next query sits at position num_computed and sees keys >= num_computed - window + 1.
  const int64_t first_needed = int64_t(seq.num_computed) - config_.kv_window + 1;
  if (first_needed < pool_.page_size()) return;
  // The first page still held stands in for the released ones in the block table; it must be full
  // (every slot written), because attention may read a few masked keys through the stand-in.
  int32_t dead = int32_t(std::min<int64_t>(first_needed / pool_.page_size(), seq.num_computed / pool_.page_size() - 1));
  // Never ahead of publication: a page the prefix cache has yet to index must still be held.
  if (prefix_cache_ != nullptr && !seq.prefix.broken) dead = std::min(dead, seq.prefix.num_pages);
  if (dead <= seq.num_dropped_pages) return;
  for (int32_t i = seq.num_dropped_pages; i < dead; ++i) pool_.release(seq.pages[size_t(i)]);
  seq.num_dropped_pages = dead;
  std::fill(seq.pages.begin(), seq.pages.begin() + dead, seq.pages[size_t(dead)]);
}

void Scheduler::publish(Sequence& seq) {
  if (prefix_cache_ == nullptr) return;
  prefix_cache_->publish(seq.tokens, seq.num_computed, seq.pages, seq.cache_salt, seq.prefix);
}

int32_t StepPlan::num_prefill_tokens() const {
  int32_t n = 0;
  for (const ScheduledSeq& s : seqs) n += s.sample && s.num_new - s.num_draft == 1 ? 0 : s.num_new;
  return n;
}

void Scheduler::observe_step(const StepPlan& plan, double seconds) {
  const int32_t prefill = plan.num_prefill_tokens();
  if (prefill > 0 && prefill < plan.prefill_chunk) return;
  step_model_.observe(plan.num_decode, prefill, seconds);
}

StepLatencyStats Scheduler::step_latency_stats() const {
  StepLatencyStats s;
  s.budget_seconds = step_latency_budget(config_.latency, step_model_);
  s.decode_seconds = step_model_.decode_seconds();
  s.prefill_token_seconds = step_model_.prefill_token_seconds();
  s.prefill_chunk = prefill_chunk_;
  s.limited_steps = limited_steps_;
  return s;
}

void Scheduler::trim_pages(Sequence& seq) {
  const int32_t keep = std::max<int32_t>(1, pool_.pages_for_tokens(seq.num_tokens()));
  while (int32_t(seq.pages.size()) > keep) {
    pool_.release(seq.pages.back());
    seq.pages.pop_back();
  }
}

void Scheduler::add_inflight_keys(const Sequence& seq) {
  if (seq.prefix.broken) return;  // its pages will not be published
  key_scratch_.clear();
  prefix_cache_->chain_keys(seq.tokens, seq.cache_salt, seq.prefix, seq.num_tokens() / pool_.page_size(), key_scratch_);
  inflight_keys_.insert(key_scratch_.begin(), key_scratch_.end());
}

bool Scheduler::next_page_in_flight(const Sequence& seq, const PrefixChain& chain) {
  if (!inflight_built_) {
    inflight_keys_.clear();
    for (const Sequence* r : running_) add_inflight_keys(*r);
    inflight_built_ = true;
  }
  if (inflight_keys_.empty()) return false;
  key_scratch_.clear();
  prefix_cache_->chain_keys(seq.tokens, seq.cache_salt, chain, chain.num_pages + 1, key_scratch_);
  return inflight_keys_.count(key_scratch_.back()) > 0;
}

bool Scheduler::grow(Sequence& seq, int32_t n) {
  const int32_t need = pool_.pages_for_tokens(int64_t(seq.num_computed) + n) - int32_t(seq.pages.size());
  if (need <= 0) return true;
  return pool_.allocate(need, seq.pages);
}

void Scheduler::preempt(Sequence& seq, StepPlan& plan, int32_t& budget) {
  // Drop it from this step's plan if it was already scheduled (its pages go away now).
  for (auto it = plan.seqs.begin(); it != plan.seqs.end(); ++it) {
    if (it->seq == &seq) {
      budget += it->num_new;
      plan.num_tokens -= it->num_new;
      if (it->sample && it->num_new - it->num_draft == 1) --plan.num_decode;
      plan.seqs.erase(it);
      break;
    }
  }
  release_pages(seq);
  seq.num_computed = 0;
  seq.draft.clear();
  seq.state = SeqState::kWaiting;
  ++seq.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  insert_sorted(waiting_, &seq);
  plan.preempted.push_back(&seq);
}

namespace {

// Prefill tokens a sequence may run this step beyond the budget's own limit: each token of a
// sequence that owes prompt logprobs yields a logits row, so its chunks are kept short.
int32_t chunk_limit(const Sequence& seq) {
  return seq.owes_prompt_logprobs() ? kPromptLogprobsChunk : INT32_MAX;
}

}  // namespace

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int32_t budget = config_.max_batch_tokens;
  bool cut = false;  // the latency budget lowered this step's prefill chunk

  // Running sequences: decodes, then prefill continuations.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    if (pass == 1 && plan.num_decode > 0) {
      // The prefill of a step that carries decodes (continuations here, admissions below) fits
      // the latency budget.
      prefill_chunk_ = prefill_chunk_limit(config_.latency, step_model_, budget);
      plan.prefill_chunk = prefill_chunk_;
      cut = prefill_chunk_ < budget;
      budget = prefill_chunk_;
    }
    const std::vector<Sequence*> snapshot = running_;
    for (Sequence* seq : snapshot) {
      if (budget == 0) break;
      if (seq->state != SeqState::kRunning) continue;  // preempted earlier in this loop
      const bool is_decode = seq->num_uncomputed() == 1;
      if (is_decode != (pass == 0)) continue;
      // A decode verifies its drafts too, as far as the budget and the free pages allow.
      if (is_decode && int32_t(seq->draft.size()) > budget - 1) seq->draft.resize(size_t(budget - 1));
      if (is_decode && !seq->draft.empty() && !grow(*seq, 1 + int32_t(seq->draft.size()))) seq->draft.clear();
      const int32_t drafts = is_decode ? int32_t(seq->draft.size()) : 0;
      const int32_t n = is_decode ? 1 + drafts : std::min({seq->num_uncomputed(), budget, chunk_limit(*seq)});
      bool fits = true;
      while (!grow(*seq, n)) {
        Sequence* victim = running_.back();
        preempt(*victim, plan, budget);
        if (victim == seq) {
          fits = false;
          break;
        }
      }
      if (!fits) continue;
      ScheduledSeq s{seq, n, is_decode || seq->num_computed + n == seq->num_tokens(), drafts,
                     prompt_rows(*seq, seq->num_computed, n)};
      plan.seqs.push_back(s);
      plan.num_tokens += n;
      budget -= n;
      if (is_decode) ++plan.num_decode;
    }
  }

  // Admission. Skipped in a step that had to preempt: the pool is under pressure, and admitting
  // now would only take pages the running sequences need next.
  if (plan.preempted.empty()) {
    const int32_t watermark = int32_t(std::floor(config_.admission_watermark * pool_.num_pages()));
    inflight_built_ = false;
    size_t i = 0;  // waiting_[0, i) are deferred this step
    while (budget > 0 && i < waiting_.size() && int32_t(running_.size()) < config_.max_running) {
      Sequence* seq = waiting_[i];
      FG_CHECK(seq->pages.empty() && seq->num_computed == 0, "a waiting sequence holds no pages");
      hit_pages_.clear();
      PrefixChain chain;
      int32_t hits = 0;
      int32_t revived = 0;  // hit pages that are cached now (refcount 0): taking them uses pool room
      if (prefix_cache_ != nullptr) {
        // At most (num_tokens - 1) / P pages, so the last token is always computed (see header),
        // and none past the first token whose row an owed prompt logprob needs.
        const int32_t reusable = seq->owes_prompt_logprobs() ? seq->prompt_lp_next - 1 : seq->num_tokens() - 1;
        const int32_t max_pages = reusable / pool_.page_size();
        hits = prefix_cache_->match(seq->tokens, seq->cache_salt, max_pages, hit_pages_, chain);
        if (hits < max_pages && next_page_in_flight(*seq, chain)) {
          ++lookup_stats_.deferred;
          ++i;
          continue;
        }
        for (int32_t p : hit_pages_) revived += pool_.is_cached(p) ? 1 : 0;
      }
      const int32_t cached_tokens = hits * pool_.page_size();
      const int32_t n = std::min({seq->num_tokens() - cached_tokens, budget, chunk_limit(*seq)});
      const int32_t need = pool_.pages_for_tokens(int64_t(cached_tokens) + n) - hits;
      // The watermark does not apply when nothing runs: the oldest request must always start.
      if (need + revived > pool_.num_available() - (running_.empty() ? 0 : watermark)) break;
      for (int32_t p : hit_pages_) pool_.retain(p);
      seq->pages = hit_pages_;
      seq->num_computed = cached_tokens;
      seq->prefix = chain;
      FG_CHECK(grow(*seq, n));
      if (prefix_cache_ != nullptr) {
        ++lookup_stats_.lookups;
        lookup_stats_.hits += hits > 0 ? 1 : 0;
        lookup_stats_.query_tokens += seq->num_tokens();
        lookup_stats_.hit_tokens += cached_tokens;
      }
      if (!seq->admitted_once) {
        seq->admitted_once = true;
        seq->num_cached_tokens = std::min(cached_tokens, seq->num_prompt);
      }
      waiting_.erase(waiting_.begin() + ptrdiff_t(i));
      if (inflight_built_) add_inflight_keys(*seq);
      seq->state = SeqState::kRunning;
      insert_sorted(running_, seq);
      ScheduledSeq s{seq, n, seq->num_computed + n == seq->num_tokens(), 0, prompt_rows(*seq, seq->num_computed, n)};
      plan.seqs.push_back(s);
      plan.num_tokens += n;
      budget -= n;
      if (s.sample && n == 1) ++plan.num_decode;
    }
  }
  if (cut && budget == 0 && prefill_chunk_ > 0) ++limited_steps_;  // prefill filled the cut chunk
  return plan;
}

}  // namespace fg
