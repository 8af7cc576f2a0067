// Random walks through a GrammarMatcher, shared by the grammar tests and the corpus walker: choose
// allowed tokens at random until the grammar terminates, optionally checking every mask against
// trying each token on its own. Header-only, no test framework: failures come back as text.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace fg::grammar::test {

inline bool mask_bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[size_t(id) >> 5] >> (id & 31)) & 1;
}

// "" when every bit of fill_mask agrees with trying the token on its own (EOS: accepted()).
inline std::string mask_mismatch(GrammarMatcher& m) {
  const GrammarVocab& v = m.vocab();
  std::vector<uint32_t> mask(size_t(v.mask_words()));
  m.fill_mask(mask);
  for (int32_t id = 0; id < v.size(); ++id) {
    bool want = false;
    if (v.is_eos(id))
      want = m.accepted();
    else if (id < v.num_tokens() && v.is_text(id))
      want = m.can_accept_bytes(v.token(id));
    if (mask_bit(mask, id) != want)
      return "token " + std::to_string(id) + " '" + std::string(v.token(id)) + "': mask says " +
             std::to_string(mask_bit(mask, id)) + ", the matcher says " + std::to_string(want);
  }
  return "";
}

struct WalkOptions {
  int max_tokens = 400;
  int steer_after = 40;          // from this many tokens on, prefer tokens that bring the end closer
  int candidates = 24;           // allowed tokens compared when steering
  double check_probability = 0;  // chance of a brute-force mask check before each token
};

struct WalkResult {
  std::string text;
  std::vector<int32_t> ids;
  bool ended = false;  // EOS accepted, or nothing can follow
  std::string error;   // first failure, if any
};

// The k-th set bit of mask (0-based), or -1.
inline int32_t nth_allowed(const std::vector<uint32_t>& mask, int64_t k) {
  for (size_t w = 0; w < mask.size(); ++w) {
    const int c = __builtin_popcount(mask[w]);
    if (k >= c) {
      k -= c;
      continue;
    }
    uint32_t bits = mask[w];
    while (k-- > 0) bits &= bits - 1;
    return int32_t(w * 32 + size_t(__builtin_ctz(bits)));
  }
  return -1;
}

// Early tokens are uniform among the allowed; later the walk keeps, among a few random allowed
// tokens, the one after which the fewest bytes complete the grammar, so walks end.
inline WalkResult random_walk(GrammarMatcher& m, std::mt19937& rng, const WalkOptions& o = {}) {
  const GrammarVocab& v = m.vocab();
  WalkResult r;
  std::vector<uint32_t> mask(size_t(v.mask_words()));
  std::uniform_real_distribution<double> coin(0, 1);
  for (int step = 0; step < o.max_tokens && !m.is_terminated(); ++step) {
    if (o.check_probability > 0 && coin(rng) < o.check_probability) {
      const std::string bad = mask_mismatch(m);
      if (!bad.empty()) {
        r.error = "mask differs from the matcher after '" + r.text + "': " + bad;
        return r;
      }
    }
    m.fill_mask(mask);
    int64_t count = 0;
    for (uint32_t w : mask) count += __builtin_popcount(w);
    if (count == 0) {
      r.error = "no token allowed after '" + r.text + "'";
      return r;
    }
    auto random_allowed = [&] { return nth_allowed(mask, std::uniform_int_distribution<int64_t>(0, count - 1)(rng)); };
    int32_t pick = random_allowed();
    const bool steer = step >= o.steer_after;
    const bool eos_ok = m.accepted() && !v.eos_ids().empty();
    if (eos_ok && (steer || coin(rng) < 0.1)) {
      pick = v.eos_ids()[0];
    } else if (steer) {
      int64_t best = INT64_MAX;
      const int n = step >= 3 * o.steer_after ? 8 * o.candidates : o.candidates;
      for (int c = 0; c < n; ++c) {
        const int32_t id = random_allowed();
        if (v.is_eos(id)) continue;
        if (!m.accept_token(id)) {
          r.error = "mask allowed token " + std::to_string(id) + " that accept_token refused after '" + r.text + "'";
          return r;
        }
        const int64_t left = m.min_bytes_to_end();
        m.rollback(1);
        if (left < best) best = left, pick = id;
      }
    }
    if (!m.accept_token(pick)) {
      r.error = "mask allowed token " + std::to_string(pick) + " '" + std::string(v.token(pick)) +
                "' that accept_token refused after '" + r.text + "'";
      return r;
    }
    r.ids.push_back(pick);
    if (!v.is_eos(pick)) r.text += v.token(pick);
  }
  r.ended = m.is_terminated();
  return r;
}

}  // namespace fg::grammar::test
