// The scheduler: once per step, on the host, decides which sequences advance by how many tokens.
//
//  1. Running sequences in service order (priority desc, then arrival): decodes first (one new
//     token each), then the next prefill chunk of partially prefilled ones.
//  2. Then waiting sequences are admitted in service order (FCFS within a priority; strict, so a
//     small late request never starves a large early one) while the token budget, --max-running
//     and the free pages allow. A long prompt takes as much of the budget as is left and continues
//     in later steps while the others keep decoding.
//  3. When a running sequence needs a page and none is free, the newest running sequence (lowest
//     priority, latest arrival) is preempted by recompute: its pages are released and it goes back
//     to the waiting queue keeping its output so far; it is re-prefilled later. The oldest
//     sequence can always finish alone (requests that could never fit are refused at submit), so
//     the engine never deadlocks.
// Never waits on the device and never touches a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "kvcache/page_pool.h"

namespace fg {

struct SchedulerConfig {
  int32_t max_batch_tokens = 2048;  // new tokens per step, over all sequences (--max-batch-tokens)
  int32_t max_running = 256;        // sequences holding KV pages at once (--max-running)
  // Pages kept free when admitting new sequences, so running ones can grow a little before
  // anything has to be preempted. A fraction of the pool.
  double admission_watermark = 0.01;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t num_new = 0;   // tokens [seq->num_computed, seq->num_computed + num_new) run this step
  bool sample = false;   // the step reaches the sequence's last token: its logits are sampled
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // decodes first, then prefill chunks
  int32_t num_tokens = 0;
  int32_t num_decode = 0;          // sequences with exactly one new token that sample
  std::vector<Sequence*> preempted;  // preempted while planning this step (now waiting)
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, PagePool& pool);

  const SchedulerConfig& config() const { return config_; }
  // Takes ownership; the sequence waits until admitted.
  void add(std::unique_ptr<Sequence> seq);
  // Plans one step. Pages for every scheduled token are allocated when it returns.
  StepPlan schedule();
  // After the step ran: the sequence's planned tokens are in the cache.
  static void commit(const ScheduledSeq& s) { s.seq->num_computed += s.num_new; }
  // Ends a sequence (finished, cancelled or failed): releases its pages at once and hands it back.
  std::unique_ptr<Sequence> remove(uint64_t id);
  Sequence* find(uint64_t id);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  std::vector<Sequence*> all_sequences() const;

 private:
  // Ensures seq has pages for its first num_computed + n tokens; false if the pool is short.
  bool grow(Sequence& seq, int32_t n);
  void preempt(Sequence& seq, StepPlan& plan, int32_t& budget);
  static bool served_before(const Sequence* a, const Sequence* b);
  void insert_sorted(std::vector<Sequence*>& v, Sequence* s);

  SchedulerConfig config_;
  PagePool& pool_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // service order
  std::vector<Sequence*> waiting_;  // service order
  int64_t num_preemptions_ = 0;
};

}  // namespace fg
