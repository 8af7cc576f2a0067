// gtest wrappers over random_walk.h for the grammar tests, and a byte vocabulary.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "random_walk.h"

namespace fg::grammar::test {

// A vocabulary of the 256 single bytes plus EOS (id 256): every text is reachable, masks are cheap.
inline std::shared_ptr<const GrammarVocab> byte_vocab() {
  static const auto v = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    tokens.push_back("<eos>");
    return GrammarVocab::from_tokens(tokens, {256}, {256});
  }();
  return v;
}

inline ::testing::AssertionResult mask_matches_brute_force(GrammarMatcher& m) {
  const std::string bad = mask_mismatch(m);
  if (bad.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad;
}

}  // namespace fg::grammar::test
