// EngineCore: validation at submit, and the step: schedule -> build -> forward -> sample -> postprocess.
#include <algorithm>
#include <chrono>

#include "backend/sampling_rule.h"
#include "engine/engine.h"

namespace fg {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
SchedulerConfig with_window(SchedulerConfig c, int32_t window) {
  c.kv_window = window;
  return c;
}
}  // namespace

EngineCore::EngineCore(const EngineConfig& config, StepRunner& runner)
    : config_(config),
      runner_(runner),
      vocab_(runner.vocab_size()),
      max_model_len_(runner.max_model_len()),
      eos_ids_(runner.eos_token_ids()),
      pool_(runner.kv_num_pages(), runner.kv_page_size()),
      prefix_cache_(config.enable_prefix_cache ? std::make_unique<PrefixCache>(pool_, config.prefix_cache) : nullptr),
      scheduler_(with_window(config.scheduler, runner.kv_window()), pool_, prefix_cache_.get()),
      spec_(config.spec, max_model_len_, runner.draft(), config.scheduler.max_batch_tokens),
      // Rows to sample: one per running sequence, 1 + k for a verifying one, at most the budget.
      sampler_(
          runner.backend(), vocab_,
          int32_t(std::min<int64_t>(config.scheduler.max_batch_tokens,
                                    int64_t(config.scheduler.max_running) *
                                        (1 + (config.spec.method == SpecMethod::kOff ? 0 : config.spec.num_tokens)))),
          eos_ids_) {
  if (config.spec.method == SpecMethod::kDraft) {
    StepRunner* d = runner.draft();
    FG_CHECK(d != nullptr && d->vocab_size() == vocab_ && d->kv_page_size() == pool_.page_size(),
             "speculative decoding: the draft model must share the target's vocabulary and page size");
  }
}

Result<std::unique_ptr<Sequence>> EngineCore::prepare(Request request, uint64_t id) const {
  const SamplingParams& p = request.params;
  FG_RETURN_IF_ERROR(p.validate(vocab_));
  const int64_t prompt_len = int64_t(request.prompt_ids.size());
  if (prompt_len == 0) return invalid_argument("the prompt is empty: give at least one token");
  if (p.min_new_tokens > 0 && request.constraint != nullptr) {
    return invalid_argument(
        "min_new_tokens cannot be combined with a constraint (grammar, JSON schema, tool "
        "call): the constraint decides where the output ends");
  }
  for (int32_t t : request.prompt_ids) {
    if (t < 0 || t >= vocab_) {
      return invalid_argument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_) + ")");
    }
  }
  const int64_t pool_tokens = int64_t(pool_.num_pages()) * pool_.page_size();
  const std::string pool_text = "the KV pool holds " + std::to_string(pool_tokens) + " tokens (" +
                                std::to_string(pool_.num_pages()) + " pages of " + std::to_string(pool_.page_size()) +
                                "); raise --kv-cache-memory";
  // Output tokens at most: the request's own limit, else what the context and the pool leave room
  // for. The last sampled token is never run through the model, so it needs no KV slot. When every
  // layer is windowed, a sequence never holds more than its window plus one step's tokens and a
  // few pages (Scheduler::release_unreachable_pages), so only the context limits it.
  const int64_t window = scheduler_.config().kv_window;
  const bool window_bounded =
      window > 0 && window + config_.scheduler.max_batch_tokens + 3 * int64_t(pool_.page_size()) <= pool_tokens;
  const int64_t room =
      (window_bounded ? int64_t(max_model_len_) : std::min<int64_t>(max_model_len_, pool_tokens + 1)) - prompt_len;
  int64_t max_output;
  if (p.max_new_tokens.has_value()) {
    max_output = *p.max_new_tokens;
    if (prompt_len + max_output > max_model_len_) {
      return Status(ErrorCode::kContextTooLong, "prompt (" + std::to_string(prompt_len) +
                                                    " tokens) + max_new_tokens (" + std::to_string(max_output) +
                                                    ") exceeds the model's context of " +
                                                    std::to_string(max_model_len_) + " tokens");
    }
    if (max_output > room) {
      return Status(ErrorCode::kContextTooLong, "prompt (" + std::to_string(prompt_len) +
                                                    " tokens) + max_new_tokens (" + std::to_string(max_output) +
                                                    ") can never fit: " + pool_text);
    }
  } else {
    max_output = room;
    if (max_output <= 0) {
      return Status(ErrorCode::kContextTooLong, "prompt of " + std::to_string(prompt_len) +
                                                    " tokens leaves no room to generate: the model's "
                                                    "context is " +
                                                    std::to_string(max_model_len_) + " tokens and " + pool_text);
    }
  }

  auto seq = std::make_unique<Sequence>();
  if (!p.stop.empty()) {
    if (!config_.stop_matcher_factory) {
      return unsupported(
          "stop strings need the model's tokenizer, which this engine was started without; "
          "use stop_token_ids instead");
    }
    FG_ASSIGN_OR_RETURN(seq->stop_matcher, config_.stop_matcher_factory(p.stop));
  }
  seq->id = id;
  seq->priority = request.priority;
  seq->cache_salt = request.cache_salt;
  // Sequences whose K/V differ for the same tokens never share prefix-cache pages.
  if (const uint64_t variant = runner_.kv_variant(int32_t(prompt_len)); variant != 0)
    seq->cache_salt = mix64(seq->cache_salt ^ mix64(variant));
  seq->params = std::move(request.params);
  seq->seed = seq->params.seed.has_value() ? *seq->params.seed : mix64(config_.seed ^ mix64(id));
  seq->tokens = std::move(request.prompt_ids);
  seq->num_prompt = int32_t(prompt_len);
  seq->max_output_tokens = int32_t(max_output);
  seq->speculate = request.speculative && request.constraint == nullptr;
  if (seq->speculate) seq->prediction = std::move(request.prediction);
  seq->constraint = std::move(request.constraint);
  seq->jump_forward = request.jump_forward;
  seq->events = std::make_shared<EventStream>(std::move(request.ready), id);
  seq->submit_time = Clock::now();
  return seq;
}

void EngineCore::add(std::unique_ptr<Sequence> seq) {
  seq->arrival = next_arrival_++;
  ++counters_.submitted;
  if (seq->max_output_tokens == 0 && !seq->params.wants_prompt_logprobs()) {
    // max_new_tokens 0: nothing to generate, so nothing to schedule (unless the prompt's logprobs
    // are asked for: the prompt runs, and the sampled token is dropped).
    ++counters_.finished;
    RequestEvent e;
    e.finish = FinishReason::kLength;
    seq->events->push(std::move(e));
    return;
  }
  scheduler_.add(std::move(seq));
}

Result<RequestHandle> EngineCore::submit(Request request) {
  const uint64_t id = next_id_++;
  FG_ASSIGN_OR_RETURN(auto seq, prepare(std::move(request), id));
  RequestHandle h{id, seq->events};
  add(std::move(seq));
  return h;
}

namespace {

// What every event of a request reports about it as a whole.
void stamp(const Sequence& seq, RequestEvent& e) {
  e.cached_tokens = seq.num_cached_tokens;
  e.draft_tokens = seq.spec_drafted;
  e.accepted_draft_tokens = seq.spec_accepted;
}

}  // namespace

void EngineCore::finish(Sequence& seq, FinishReason reason, Status status, RequestEvent e) {
  spec_.release(seq);
  std::unique_ptr<Sequence> owned = scheduler_.remove(seq.id);
  FG_CHECK(owned != nullptr, "finishing an unknown sequence");
  ++counters_.finished;
  counters_.cached_prompt_tokens += owned->num_cached_tokens;
  if (reason == FinishReason::kCancelled) ++counters_.cancelled;
  if (reason == FinishReason::kError) ++counters_.failed;
  e.finish = reason;
  e.status = std::move(status);
  stamp(*owned, e);
  owned->events->push(std::move(e));
}

bool EngineCore::cancel(uint64_t id) {
  Sequence* seq = scheduler_.find(id);
  if (seq == nullptr) return false;
  finish(*seq, FinishReason::kCancelled, Status(ErrorCode::kCancelled, "cancelled"));
  return true;
}

void EngineCore::cancel_all() {
  for (Sequence* s : scheduler_.all_sequences()) cancel(s->id);
}

double EngineCore::step_clock_now() const {
  if (config_.step_clock) return config_.step_clock();
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

Status EngineCore::step() {
  const double start = step_clock_now();
  // Steps that record a graph (or do other one-time setup) in the target or the draft are no
  // measure of what the next such step costs.
  auto setup_count = [this] {
    return runner_.setup_steps() + (runner_.draft() != nullptr ? runner_.draft()->setup_steps() : 0);
  };
  const int64_t setups_before = setup_count();
  auto t0 = Clock::now();
  spec_.propose(scheduler_.running());
  counters_.times.propose += seconds_since(t0);
  auto t05 = Clock::now();
  StepPlan plan = scheduler_.schedule();
  for (Sequence* s : plan.preempted) spec_.release(*s);
  counters_.times.schedule += seconds_since(t05);
  if (plan.empty()) return Status::ok();

  auto t1 = Clock::now();
  const StepMetadata batch = build_step(plan, runner_);
  counters_.times.build += seconds_since(t1);

  auto t2 = Clock::now();
  Result<Tensor> logits = runner_.forward(batch);
  counters_.times.forward += seconds_since(t2);
  Status failure;
  auto t3 = Clock::now();
  outcomes_.clear();
  if (logits.is_ok()) {
    groups_.clear();
    int64_t sampled_rows = 0;
    for (const ScheduledSeq& s : plan.seqs) {
      if (!s.sample) continue;
      SampleGroup g;
      g.seq = s.seq;
      g.draft = std::span<const int32_t>(s.seq->draft).first(size_t(s.num_draft));
      if (!s.seq->draft_probs.empty())
        g.draft_probs = std::span<const float>(s.seq->draft_probs).first(size_t(s.num_draft) * size_t(vocab_));
      groups_.push_back(g);
      sampled_rows += g.rows();
    }
    // The rows after the sampled ones are owed prompt logprobs (build_step), in plan order.
    const int64_t rows = logits->size(0);
    failure =
        rows >= sampled_rows ? Status::ok() : internal_error("the step returned fewer logits rows than it samples");
    if (failure.is_ok() && rows > sampled_rows) failure = prompt_logprobs(plan, *logits, sampled_rows);
    if (failure.is_ok()) {
      Tensor sampled = Tensor::contiguous(logits->data, DType::kF32, logits->device, {sampled_rows, int64_t(vocab_)});
      failure = sampler_.sample(sampled, groups_, outcomes_);
    }
  } else {
    failure = logits.status();
  }
  counters_.times.sample += seconds_since(t3);

  auto t4 = Clock::now();
  if (!failure.is_ok()) {
    for (const ScheduledSeq& s : plan.seqs) finish(*s.seq, FinishReason::kError, failure);
  } else {
    postprocess(plan, outcomes_);
  }
  ++counters_.steps;
  if (batch.decode_only() && batch.num_logits() == batch.num_seqs()) ++counters_.decode_only_steps;
  counters_.times.postprocess += seconds_since(t4);
  counters_.last_step_seconds = seconds_since(t0);
  const double seconds = step_clock_now() - start;
  // A failed forward says nothing about how long a step takes, nor does one that did setup.
  if (failure.is_ok() && setup_count() == setups_before) scheduler_.observe_step(plan, seconds);
  if (config_.on_step) {
    StepSummary s;
    s.step = counters_.steps;
    s.num_seqs = int32_t(plan.seqs.size());
    s.num_decode = plan.num_decode;
    s.prefill_tokens = plan.num_prefill_tokens();
    s.prefill_chunk = plan.prefill_chunk;
    s.running = int64_t(scheduler_.num_running());
    s.waiting = int64_t(scheduler_.num_waiting());
    s.start_seconds = start;
    s.seconds = seconds;
    config_.on_step(s);
  }
  return failure;
}

Status EngineCore::prompt_logprobs(const StepPlan& plan, const Tensor& logits, int64_t first_row) {
  targets_.clear();
  int n = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    const PromptRows& r = s.prompt;
    for (int32_t p = r.first_pos; p < r.first_pos + r.count; ++p) targets_.push_back(s.seq->tokens[size_t(p)]);
    if (r.count > 0) n = std::max(n, s.seq->params.prompt_logprobs);
  }
  const auto count = int64_t(targets_.size());
  if (first_row + count != logits.size(0)) return internal_error("the step's prompt-logprob rows do not add up");
  const Tensor rows = Tensor::contiguous(static_cast<float*>(logits.data) + first_row * int64_t(vocab_), DType::kF32,
                                         logits.device, {count, int64_t(vocab_)});
  FG_RETURN_IF_ERROR(sampler_.prompt_logprobs(rows, targets_, n, prompt_lp_));
  size_t i = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Sequence& seq = *s.seq;
    for (int32_t k = 0; k < s.prompt.count; ++k, ++i) {
      PromptLogprob& lp = prompt_lp_[i];
      if (int(lp.top.size()) > seq.params.prompt_logprobs) lp.top.resize(size_t(seq.params.prompt_logprobs));
      seq.prompt_lp.push_back(std::move(lp));
    }
    seq.prompt_lp_next += s.prompt.count;
  }
  return Status::ok();
}

std::optional<FinishReason> EngineCore::finish_reason_for(Sequence& seq, int32_t token) const {
  std::optional<FinishReason> reason;
  // The first min_new_tokens output tokens end nothing but by length (their stop and eos ids were
  // masked out of sampling); stop strings are matched in what follows them.
  if (seq.num_output() <= seq.params.min_new_tokens) {
    if (seq.num_output() >= seq.max_output_tokens) reason = FinishReason::kLength;
    return reason;
  }
  const auto& stops = seq.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    reason = FinishReason::kStopToken;
  } else if ((!seq.params.ignore_eos || seq.constraint) &&  // a constraint's end is final
             std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    reason = FinishReason::kEos;
  }
  if (seq.stop_matcher && seq.stop_matcher->feed(token) && !reason) reason = FinishReason::kStopString;
  if (!reason && seq.num_output() >= seq.max_output_tokens) reason = FinishReason::kLength;
  return reason;
}

void EngineCore::postprocess(const StepPlan& plan, const std::vector<SampleOutcome>& outcomes) {
  size_t group = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Scheduler::commit(s);
    Sequence& seq = *s.seq;
    if (!s.sample) {
      scheduler_.publish(seq);
      scheduler_.release_unreachable_pages(seq);
      counters_.prefill_tokens += s.num_new;
      continue;
    }
    counters_.prefill_tokens += s.num_new - 1 - s.num_draft;
    const SampleOutcome& o = outcomes[group++];
    if (seq.max_output_tokens == 0) {  // ran only for its prompt logprobs
      RequestEvent e;
      stamp(seq, e);
      e.prompt_logprobs = std::move(seq.prompt_lp);
      finish(seq, FinishReason::kLength, Status(), std::move(e));
      continue;
    }
    // The tokens this step emits: the outcome's (accepted drafts, then the target's own), then
    // for a constrained sequence the tokens its constraint forces (jump-forward: they run as one
    // multi-token query next step), until one finishes the request: what follows is dropped.
    std::optional<FinishReason> reason;
    Status status;
    emitted_.clear();
    auto emit = [&](const SampledToken& st) {
      seq.tokens.push_back(st.token);
      ++seq.output_counts[st.token];
      ++counters_.generated_tokens;
      emitted_.push_back(st);
      reason = finish_reason_for(seq, st.token);
    };
    for (size_t j = 0; j < o.tokens.size() && !reason; ++j) {
      if (seq.constraint && !seq.constraint->accept(o.tokens[j].token)) {
        reason = FinishReason::kError;
        status = internal_error("the request's constraint refused token " + std::to_string(o.tokens[j].token) +
                                " that its own mask allowed");
        break;
      }
      emit(o.tokens[j]);
    }
    // Roll back over rejected (or dropped) drafts: the cache holds K/V of the kept tokens only,
    // so only their pages can ever be published.
    seq.num_computed = std::min(seq.num_computed, seq.num_tokens() - 1);
    if (s.num_draft > 0 && !reason) scheduler_.trim_pages(seq);
    if (!reason && seq.constraint && seq.jump_forward) {  // constrained sequences never draft
      forced_.clear();
      seq.constraint->forced_tokens(forced_);
      for (size_t j = 0; j < forced_.size() && !reason; ++j) {
        SampledToken st;
        st.token = forced_[j];
        emit(st);
        ++counters_.jump_forward_tokens;
      }
    }
    spec_.verified(seq, s.num_draft, o.accepted);
    seq.draft.clear();
    seq.draft_probs.clear();
    scheduler_.publish(seq);
    scheduler_.release_unreachable_pages(seq);

    for (size_t j = 0; j < emitted_.size(); ++j) {
      const SampledToken& st = emitted_[j];
      RequestEvent e;
      e.token = st.token;
      stamp(seq, e);
      if (j == 0) e.prompt_logprobs = std::move(seq.prompt_lp);  // empty once sent
      if (seq.params.wants_logprobs()) {
        e.has_logprobs = true;
        e.logprob = st.logprob;
        e.top_logprobs = st.top_logprobs;
      }
      // The last token travels in the finishing event, so a consumer sees both at once.
      if (reason && j + 1 == emitted_.size()) {
        finish(seq, *reason, status, std::move(e));
      } else {
        seq.events->push(std::move(e));
      }
    }
    if (reason && emitted_.empty()) finish(seq, *reason, status);
  }
}

EngineStats EngineCore::stats() const {
  EngineStats s = counters_;
  s.running = int64_t(scheduler_.num_running());
  s.waiting = int64_t(scheduler_.num_waiting());
  s.pages = pool_.stats();
  s.preemptions = scheduler_.num_preemptions();
  s.prefix_cache_enabled = prefix_cache_ != nullptr;
  const PrefixLookupStats& l = scheduler_.prefix_lookup_stats();
  s.prefix_cache_lookups = l.lookups;
  s.prefix_cache_hits = l.hits;
  s.prefix_cache_query_tokens = l.query_tokens;
  s.prefix_cache_hit_tokens = l.hit_tokens;
  s.prefix_cache_deferred = l.deferred;
  if (prefix_cache_ != nullptr) s.prefix_cache = prefix_cache_->stats();
  s.step_latency = scheduler_.step_latency_stats();
  s.spec_method = spec_.config().method;
  s.spec = spec_.stats();
  return s;
}

}  // namespace fg
