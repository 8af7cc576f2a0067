// DraftModelProposer: drafts with a smaller model that shares the target's tokenizer. It holds its
// own KV pages (a PagePool over the draft runner's cache) and its own per-sequence block table
// (Sequence::draft_pages); it never shares pages with the target or the prefix cache.
//
// Per step, for the sequences asked to draft k tokens: one ragged step catches the draft's KV up
// with the sequence (tokens [draft_computed, num_tokens): usually one or two, a whole prompt the
// first time) and samples d1 from its last row; k - 1 decode steps then feed d1, d2, ... and
// sample the rest. Greedy requests take the draft's argmax; sampled requests draw from the draft's
// distribution under the request's own sampling rule and keep it (Sequence::draft_probs) for the
// target's rejection sampling. After verification the draft's KV stays valid up to the tokens the
// target kept (accepted()).
// Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"
#include "engine/step_runner.h"
#include "kvcache/page_pool.h"

namespace fg {

class DraftModelProposer {
 public:
  // runner: the draft model (outlives this). max_batch_tokens: catch-up tokens per step at most.
  DraftModelProposer(StepRunner& runner, int32_t max_batch_tokens);

  // Drafts up to ks[i] tokens for seqs[i] into seqs[i]->draft (fewer when its catch-up does not
  // fit this step or the draft pool is full).
  void propose(std::span<Sequence* const> seqs, std::span<const int32_t> ks);
  // After the target's verification: the draft KV past the target's kept tokens is stale.
  void accepted(Sequence& seq) { seq.draft_computed = std::min(seq.draft_computed, seq.num_computed); }
  void release(Sequence& seq);
  const PagePool& pool() const { return pool_; }

 private:
  // Samples one draft token per row of `logits` ([rows.size(), vocab]) for `seqs` (output
  // positions `positions`) and appends it to each sequence's draft.
  void draw(const Tensor& logits, std::span<Sequence* const> seqs);

  StepRunner& runner_;
  PagePool pool_;
  int32_t max_batch_tokens_;
  int32_t vocab_;
  Buffer ids_device_, ids_host_;
  Buffer dist_device_, dist_host_;  // sampled draws: every row's distribution q
  std::vector<SamplingRow> rows_;
};

}  // namespace fg
