// The scheduler: once per step, on the host, decides which sequences advance by how many tokens.
//
//  1. Running sequences in service order (priority desc, then arrival): decodes first (one new
//     token each, plus the tokens drafted for it when the engine speculates: a verification query
//     of 1 + k tokens; drafts are cut before anything is preempted for them), then the next
//     prefill chunk of partially prefilled ones.
//  2. Then waiting sequences are admitted in service order (FCFS within a priority; strict, so a
//     small late request never starves a large early one) while the token budget, --max-running
//     and the free pages allow. A long prompt takes as much of the budget as is left and continues
//     in later steps while the others keep decoding.
//  3. When a running sequence needs a page and none is free, the newest running sequence (lowest
//     priority, latest arrival) is preempted by recompute: its pages are released and it goes back
//     to the waiting queue keeping its output so far; it is re-prefilled later. The oldest
//     sequence can always finish alone (requests that could never fit are refused at submit), so
//     the engine never deadlocks.
//  4. With a prefix cache, admission first looks the sequence's tokens up page by page and takes
//     every verified hit (refcount +1): those tokens count as computed and use none of the token
//     budget. Rule for the last token: at most (num_tokens - 1) / page_size pages are taken, so at
//     least one token (the last) is always run through the model and there are logits to sample.
//     When the whole sequence is cached and ends exactly on a page boundary, this means its last
//     page is recomputed into a fresh private page rather than shared: no page is ever written
//     while another sequence may read it. After each step, publish() indexes the pages the step
//     filled (full pages only; the partial last page stays private). A preempted sequence's pages
//     stay cached if nobody evicts them, so its resume re-hits them. Pages are released leaf first
//     (last page first), so the LRU evicts a chain's tail before its root.
//  5. In-flight prefixes: when the next page a waiting sequence would need is being computed right
//     now by a running sequence (the same system prompt arriving in a burst, or n copies of one
//     prompt), its admission is deferred (later waiting sequences may go first) until that page is
//     published, instead of computing the same prefix twice. The deferral lasts only while the
//     other sequence runs: once it is preempted or past its prompt, nothing is in flight.
//  6. Sliding windows. When every layer of the model attends through a window (the widest is W,
//     SchedulerConfig::kv_window), the next query of a sequence sits at position num_computed and
//     sees keys >= num_computed - W + 1, and so do all later ones. After each step,
//     release_unreachable_pages() releases the sequence's pages that lie entirely before that key,
//     keeping at least one full page, and never a page the prefix cache has not indexed yet
//     (publication always comes first). A released page keeps its slot in the block table, now
//     holding the id of the first page still held (a full page, so every slot read through it is
//     finite); attention reads such slots only where the window masks them out (a kernel's key
//     block may start before the window), and nothing writes them. The cache then holds about W + 2 pages'
//     worth of tokens per sequence whatever its length. A released page that the prefix cache
//     indexed stays cached (evictable) like any page released at refcount 0; preemption releases
//     only the pages still held. When some layer sees the whole context (Gemma 2/3, Qwen2 with
//     max_window_layers, Llama), every page stays until the sequence ends.
//  7. Steady inter-token latency (engine/step_latency.h). The engine reports every step's measured
//     duration (observe_step); a step that carries running decodes takes prefill tokens (chunks of
//     running sequences, then admissions) only up to the chunk the step-time model predicts fits
//     the latency budget, at least a floor. A step without running decodes fills the token budget.
// Never waits on the device and never touches a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_latency.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_cache.h"

namespace fg {

struct SchedulerConfig {
  int32_t max_batch_tokens = 2048;  // new tokens per step, over all sequences (--max-batch-tokens)
  int32_t max_running = 256;        // sequences holding KV pages at once (--max-running)
  // Pages kept free when admitting new sequences, so running ones can grow a little before
  // anything has to be preempted. A fraction of the pool.
  double admission_watermark = 0.01;
  // The sliding window every layer of the model attends through (StepRunner::kv_window); 0: some
  // layer sees the whole context, nothing is released early. Set by the engine from its runner.
  int32_t kv_window = 0;
  // The prefill chunk of steps that carry running decodes, under a latency budget (7. above). Off
  // here; the command line turns it on by default.
  StepLatencyConfig latency{.adaptive = false};
};

// Prefix-cache lookups made at admission (resumes after preemption included).
struct PrefixLookupStats {
  int64_t lookups = 0;       // admissions that consulted the cache
  int64_t hits = 0;          // admissions that took at least one cached page
  int64_t query_tokens = 0;  // tokens of the sequences looked up (all their tokens at admission)
  int64_t hit_tokens = 0;    // tokens served from cached pages instead of being computed
  int64_t deferred = 0;      // admissions postponed because a running sequence was computing
                             // the pages the waiting one needed
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t num_new = 0;    // tokens [seq->num_computed, seq->num_computed + num_new) run this step
  bool sample = false;    // the step reaches the sequence's last token: its logits are sampled
  int32_t num_draft = 0;  // of num_new, drafted tokens to verify (seq->draft, all rows sampled)
  PromptRows prompt;      // the owed prompt logprobs this chunk yields (prompt_rows)
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // decodes first, then prefill chunks
  int32_t num_tokens = 0;
  int32_t num_decode = 0;  // sequences with exactly one new token that sample
  // The prefill tokens the latency budget allowed this step (7. above); -1 without running decodes.
  int32_t prefill_chunk = -1;
  std::vector<Sequence*> preempted;  // preempted while planning this step (now waiting)
  bool empty() const { return seqs.empty(); }
  // Tokens of everything but single-token decodes and verification queries (whose rows all sample
  // and whose query is one token plus drafts): prefill chunks, admissions, jump-forward runs.
  int32_t num_prefill_tokens() const;
};

class Scheduler {
 public:
  // prefix_cache: nullptr runs without one; otherwise it must index pages of `pool` and outlive
  // the scheduler.
  Scheduler(const SchedulerConfig& config, PagePool& pool, PrefixCache* prefix_cache = nullptr);

  const SchedulerConfig& config() const { return config_; }
  // Takes ownership; the sequence waits until admitted.
  void add(std::unique_ptr<Sequence> seq);
  // Plans one step. Pages for every scheduled token are allocated when it returns.
  StepPlan schedule();
  // After the step ran: the sequence's planned tokens are in the cache.
  static void commit(const ScheduledSeq& s) { s.seq->num_computed += s.num_new; }
  // After commit: offers the sequence's newly filled pages to the prefix cache (no-op without one).
  void publish(Sequence& seq);
  // After a verification step rolled num_computed back over rejected drafts: releases the pages
  // past those the sequence needs for its tokens (private pages: never published).
  void trim_pages(Sequence& seq);
  // After a step ran: its measured duration, which the step-time model learns from (7. above).
  // A step whose prefill ran out before its chunk was full (a prompt's last piece) is left out:
  // small pieces ride free in a decode step's idle compute and would make full chunks look cheap.
  void observe_step(const StepPlan& plan, double seconds);
  // After publish: with a window on every layer, releases the pages no future query of the
  // sequence can attend to (see 6. above). No-op otherwise.
  void release_unreachable_pages(Sequence& seq);
  // Ends a sequence (finished, cancelled or failed): releases its pages at once and hands it back.
  std::unique_ptr<Sequence> remove(uint64_t id);
  Sequence* find(uint64_t id);

  size_t num_running() const { return running_.size(); }
  const std::vector<Sequence*>& running() const { return running_; }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const PrefixLookupStats& prefix_lookup_stats() const { return lookup_stats_; }
  PrefixCache* prefix_cache() const { return prefix_cache_; }
  const StepTimeModel& step_model() const { return step_model_; }
  StepLatencyStats step_latency_stats() const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  std::vector<Sequence*> all_sequences() const;

 private:
  // Ensures seq has pages for its first num_computed + n tokens; false if the pool is short.
  bool grow(Sequence& seq, int32_t n);
  // Releases every page of seq, last page first, and forgets its cache chain.
  void release_pages(Sequence& seq);
  // Adds the keys of the full pages seq has yet to compute and publish to inflight_keys_.
  void add_inflight_keys(const Sequence& seq);
  // True when the first page seq missed in the cache (chain = its match) is in flight.
  bool next_page_in_flight(const Sequence& seq, const PrefixChain& chain);
  void preempt(Sequence& seq, StepPlan& plan, int32_t& budget);
  static bool served_before(const Sequence* a, const Sequence* b);
  void insert_sorted(std::vector<Sequence*>& v, Sequence* s);

  SchedulerConfig config_;
  PagePool& pool_;
  PrefixCache* prefix_cache_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // service order
  std::vector<Sequence*> waiting_;  // service order
  int64_t num_preemptions_ = 0;
  PrefixLookupStats lookup_stats_;
  std::vector<int32_t> hit_pages_;  // scratch for admission lookups
  std::vector<uint64_t> key_scratch_;
  std::unordered_set<uint64_t> inflight_keys_;  // built lazily in each schedule() that needs it
  bool inflight_built_ = false;
  StepTimeModel step_model_;
  int32_t prefill_chunk_ = 0;  // the chunk the latest step with running decodes could take
  int64_t limited_steps_ = 0;
};

}  // namespace fg
