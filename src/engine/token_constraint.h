// The seam through which constrained generation (JSON schemas, regexes, grammars, tool calls)
// reaches the engine: one object per request that says which tokens may come next and which
// tokens the constraint forces. The grammar layer implements it; the engine only asks.
//
// Per step of a constrained sequence: fill_mask (on the host, while the GPU runs the step's
// layers), the sampler sets the disallowed logits to -inf, accept() the sampled token, then
// forced_tokens(): tokens that are the only continuation the constraint allows are appended at
// once and run through the model as one multi-token query in the next step (jump-forward) instead
// of one step each. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fg {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit t of words[t / 32] (bit t % 32) set = token t may come next. words: [ceil(vocab / 32)].
  // The model's end-of-sequence tokens are allowed exactly when the constraint is complete.
  virtual void fill_mask(std::span<uint32_t> words) = 0;
  // The token chosen next (sampled, or forced by this constraint). False when the constraint
  // does not allow it, which ends the request with an error.
  virtual bool accept(int32_t token) = 0;
  // Appends the tokens the constraint admits as the only continuation from here (the ones a
  // sampler would have to pick, one step each); they are accepted as they are appended.
  virtual void forced_tokens(std::vector<int32_t>& out) = 0;
};

}  // namespace fg
