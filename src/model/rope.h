// Rotary-embedding frequency tables from a RopeConfig, computed on the host once (static scalings)
// or once per step (dynamic NTK). The backend's rope op only ever sees inv_freq or a per-token base.
//
// Dynamic NTK semantics (documented in docs/architecture.md): for each sequence of a step, the
// effective length is L = seqlens_kv (the kv length including this step's tokens, i.e. the largest
// position of the step + 1); when L > max_position_embeddings every new token of that sequence is
// rotated with base' = base * (factor * L / max_pos - (factor - 1)) ^ (rot / (rot - 2)), else with
// base. Keys already in the cache keep the rotation they were written with. For one sequence this
// is exactly what transformers does (it recomputes the base from the largest position of each
// forward call); consequently a prompt prefilled in chunks past max_pos gets different keys than one
// prefilled at once, in transformers as here.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace fg {

// inv_freq[i] for i in [0, rotary_dim / 2): base^(-2i / rotary_dim), with linear and llama3
// scalings folded in, then divided by rope.freq_divisors[i] when given. For dynamic NTK this is the table at lengths <=
// max_position_embeddings; for LongRoPE the short table (sequences of at most original_max_position tokens).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int rotary_dim);

// LongRoPE's long table, for sequences longer than original_max_position: 1 / (long_factor[i] *
// base^(2i / rotary_dim)) in f32, as transformers computes it. Like dynamic NTK, the table is
// chosen per sequence per step by its kv length after the step: new tokens of a sequence that
// crosses the threshold use the long table, keys already cached keep theirs (transformers does the
// same for one sequence: it picks the table from the largest position of each forward call).
std::vector<float> rope_long_inv_freq(const RopeConfig& rope, int rotary_dim);

// The factor cos and sin are multiplied by: LongRoPE's attention factor, 1 for the others.
float rope_attention_scaling(const RopeConfig& rope);

// The dynamic-NTK base for a sequence whose kv length after this step is `seq_len`.
double rope_dynamic_base(const RopeConfig& rope, int rotary_dim, int64_t max_position_embeddings, int64_t seq_len);

}  // namespace fg
