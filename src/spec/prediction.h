// Predicted outputs (the OpenAI chat API's `prediction`): the client sends what it expects the
// output to be, typically a file it asks the model to edit, and the prediction's tokens are drafted
// and verified like any other draft (engine/spec_decoder.h), so the output is exactly (greedy) or
// in distribution (sampled) what it would be without it, only faster where it matches.
// Pure host code on token ids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/ngram.h"

namespace fg::spec {

// Where a sequence's output stands against its prediction, carried from one step to the next.
struct PredictionState {
  int32_t aligned = 0;    // output tokens equal to the prediction's first ones, while it follows it
  bool diverged = false;  // the output departed from the prediction's beginning
  int32_t cursor = 0;     // where in the prediction the last re-synchronized draft came from
};

// Appends up to max_draft tokens of the prediction to `out` and returns how many. While the output
// so far is a prefix of the prediction, the draft is what follows that prefix. Once the output
// departs (an edit), the draft follows the nearest occurrence of the output's longest recent suffix
// (options.max_n down to options.min_n tokens) in the prediction, searched from state.cursor on
// and then before it, so a run of edits walks the prediction forward. 0 when nothing matches.
int prediction_propose(std::span<const int32_t> output, std::span<const int32_t> prediction,
                       const NgramOptions& options, int max_draft, PredictionState& state, std::vector<int32_t>& out);

}  // namespace fg::spec
