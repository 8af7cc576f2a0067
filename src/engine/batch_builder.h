// BatchBuilder: turns a StepPlan into a StepBatch in pinned host memory, once per step.
// The pinned block is allocated once for the largest step the scheduler can plan and reused.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "engine/step_batch.h"

namespace fg {

class BatchBuilder {
 public:
  // Capacity: up to max_tokens new tokens, max_seqs sequences, max_pages_per_seq pages each.
  BatchBuilder(Backend& backend, int32_t max_tokens, int32_t max_seqs, int32_t max_pages_per_seq,
               int32_t page_size);

  // The returned batch views this builder's pinned memory; valid until the next build().
  // Sequences appear in plan order; logits rows in the same order (only those that sample).
  const StepBatch& build(const StepPlan& plan);

 private:
  int32_t max_tokens_;
  int32_t max_seqs_;
  int32_t max_pages_per_seq_;
  int32_t page_size_;
  Buffer pinned_;  // i32 block sized for the largest batch
  StepBatch batch_;
};

}  // namespace fg
