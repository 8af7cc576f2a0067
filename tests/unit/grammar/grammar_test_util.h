// Helpers the grammar tests share: a mask checked token by token against the matcher itself, and
// random walks that choose allowed tokens until the grammar ends.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace fg::grammar::test {

inline bool mask_bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[size_t(id) >> 5] >> (id & 31)) & 1;
}

// Every bit of fill_mask agrees with trying the token on its own (EOS: accepted()).
inline ::testing::AssertionResult mask_matches_brute_force(GrammarMatcher& m) {
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
      return ::testing::AssertionFailure() << "token " << id << " '" << v.token(id) << "': mask says "
                                           << mask_bit(mask, id) << ", the matcher says " << want;
  }
  return ::testing::AssertionSuccess();
}

struct WalkOptions {
  int max_tokens = 400;
  int steer_after = 40;      // from this many tokens on, prefer tokens that bring the end closer
  int candidates = 24;       // allowed tokens compared when steering
  bool check_masks = false;  // brute-force check every mask (slow with large vocabularies)
};

struct WalkResult {
  std::string text;
  std::vector<int32_t> ids;
  bool ended = false;  // the matcher accepted EOS or cannot continue
};

// Chooses random allowed tokens until the grammar terminates (EOS chosen, or nothing can follow).
// Early on tokens are uniform among the allowed; later the walk keeps, among a few random allowed
// tokens, the one after which the fewest bytes complete the grammar, so every walk ends.
inline WalkResult random_walk(GrammarMatcher& m, std::mt19937& rng, const WalkOptions& o = {}) {
  const GrammarVocab& v = m.vocab();
  WalkResult r;
  std::vector<uint32_t> mask(size_t(v.mask_words()));
  std::vector<int32_t> allowed;
  for (int step = 0; step < o.max_tokens; ++step) {
    if (m.is_terminated()) {
      r.ended = true;
      break;
    }
    if (o.check_masks) {
      auto ok = mask_matches_brute_force(m);
      EXPECT_TRUE(ok) << "after '" << r.text << "'";
      if (!ok) break;
    }
    m.fill_mask(mask);
    allowed.clear();
    for (int32_t id = 0; id < v.size(); ++id)
      if (mask_bit(mask, id)) allowed.push_back(id);
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after '" << r.text << "'";
      break;
    }
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    const bool steer = step >= o.steer_after;
    if (m.accepted() && (steer || std::uniform_int_distribution<int>(0, 9)(rng) == 0) && !v.eos_ids().empty()) {
      pick = v.eos_ids()[0];
    } else if (steer) {
      int64_t best = INT64_MAX;
      for (int c = 0; c < o.candidates; ++c) {
        const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        if (v.is_eos(id)) continue;
        EXPECT_TRUE(m.accept_token(id));
        const int64_t left = m.min_bytes_to_end();
        m.rollback(1);
        if (left < best) best = left, pick = id;
      }
    }
    if (!m.accept_token(pick)) {
      ADD_FAILURE() << "mask allowed token " << pick << " '" << v.token(pick) << "' but accept_token refused it after '"
                    << r.text << "'";
      break;
    }
    r.ids.push_back(pick);
    if (!v.is_eos(pick)) r.text += v.token(pick);
  }
  if (m.is_terminated()) r.ended = true;
  return r;
}

}  // namespace fg::grammar::test
