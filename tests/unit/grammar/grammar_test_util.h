// gtest wrappers over random_walk.h for the grammar tests.
#pragma once

#include <gtest/gtest.h>

#include "random_walk.h"

namespace fg::grammar::test {

inline ::testing::AssertionResult mask_matches_brute_force(GrammarMatcher& m) {
  const std::string bad = mask_mismatch(m);
  if (bad.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad;
}

}  // namespace fg::grammar::test
