// N-gram prompt lookup: a draft proposer that needs no model. The longest recent suffix of a
// sequence (between min_n and max_n tokens) is looked up earlier in the same sequence (prompt and
// output); the tokens that followed its most recent earlier occurrence are the draft. Outputs that
// copy spans of their prompt (summaries, code edits, quoting) and outputs that loop are drafted
// well; anything else finds no match and costs nothing.
// Pure host code on token ids; never touches a model, a backend or the engine's state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fg::spec {

struct NgramOptions {
  int min_n = 2;  // shortest suffix looked up (--ngram-min)
  int max_n = 4;  // longest suffix looked up first (--ngram-max)
};

// Appends up to max_draft proposed tokens to `out` and returns how many. tokens: [n] i32, the
// sequence so far (its last token is the newest). 0 when no suffix of min_n..max_n tokens occurs
// earlier, or max_draft <= 0.
int ngram_propose(std::span<const int32_t> tokens, const NgramOptions& options, int max_draft,
                  std::vector<int32_t>& out);

}  // namespace fg::spec
