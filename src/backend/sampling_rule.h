// The sampling rule every backend implements bit-for-bit in its choices (only float rounding in
// the softmax may differ), so a seeded request gives the same tokens on cpu and cuda and whatever
// else shares its batch:
//  1. temperature <= 0: argmax of the logits, the lowest id on ties.
//  2. else p = softmax(logits / temperature) (f32, max subtracted).
//  3. Order candidates by p descending, ties by lower id. Keep the first top_k (if top_k > 0);
//     keep the shortest prefix whose cumulative p reaches top_p (if top_p < 1; the first candidate
//     is always kept); drop candidates with p < min_p * p_max (if min_p > 0).
//  4. u = sample_uniform(seed, counter) in [0, 1); walk the kept candidates in order and return
//     the first whose cumulative p exceeds u * (sum of kept p); the last kept one if rounding
//     leaves none.
// Usable from host and device code.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fg {

// splitmix64 finalizer: a bijective 64-bit mix with good avalanche.
FG_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The settings of the rule above: one definition that the backend's per-row input (SamplingRow)
// and a request's SamplingParams both build on. The defaults are greedy with nothing truncated;
// each API sets its own default temperature (docs/api.md).
struct SamplingRule {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
};

// A uniform float in [0, 1) with 24 random bits, a pure function of (seed, counter).
FG_HOST_DEVICE inline float sample_uniform(uint64_t seed, uint64_t counter) {
  uint64_t r = mix64(mix64(seed) ^ (counter * 0xd1b54a32d192ed03ull));
  return float(r >> 40) * (1.0f / 16777216.0f);
}

}  // namespace fg
