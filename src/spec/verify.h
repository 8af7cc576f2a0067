// Verification of drafted tokens against the target model's distributions, the rule that makes
// speculative decoding exact:
//  - greedy (the target's choice is its argmax): accept drafts while each equals the target's
//    choice at its position; then emit the target's choice at the first mismatch (or after the
//    last draft). The output is token for token what plain greedy decoding gives.
//  - sampled (Leviathan et al. 2023, Chen et al. 2023): accept draft d_i with probability
//    min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a sample of the residual
//    norm(max(p_i - q_i, 0)); after k acceptances emit a sample of p_k. Each emitted token is then
//    distributed exactly as the target's p. A proposer without a distribution (n-gram lookup)
//    proposes with q = a point mass on its draft.
// Randomness is a pure function of (seed, output position), as the sampler's, so a seeded request
// is reproducible whatever shares its batch.
// Pure host code; never touches a model or a backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fg::spec {

struct Verdict {
  int accepted = 0;             // drafts accepted (a prefix of them)
  std::vector<int32_t> tokens;  // accepted drafts, then one token of the target's
};

// choices: [k + 1] the target's token at each verified position (its greedy choice).
Verdict verify_greedy(std::span<const int32_t> draft, std::span<const int32_t> choices);

// p: k + 1 rows of the target's sampling distribution (each [vocab], sums to 1 over the tokens
// the sampling rule keeps, 0 elsewhere); q: k rows of the proposer's distribution, or empty for a
// point-mass proposer. position: the output position of the first token this step emits (the
// draws for token j use position + j).
Verdict verify_sampled(std::span<const int32_t> draft, std::span<const float* const> p, std::span<const float* const> q,
                       int64_t vocab, uint64_t seed, uint64_t position);

}  // namespace fg::spec
