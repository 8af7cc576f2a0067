// build_step: writes a StepPlan's metadata (model/batch.h), once per step, straight into the block
// the runner uploads (StepRunner::begin_step: the model's pinned staging). No other copy of a
// step's metadata exists on the host.
#pragma once

#include "engine/scheduler.h"
#include "engine/step_runner.h"
#include "model/batch.h"

namespace fg {

// Sequences appear in plan order; logits rows in the same order (only those that sample: one row,
// or 1 + num_draft rows of a verification query, whose inputs go to seq->verify_input). The
// returned view is valid until the runner's next begin_step.
StepMetadata build_step(const StepPlan& plan, StepRunner& runner);

}  // namespace fg
