// ngram_propose: longest suffix first, most recent occurrence first, drafts cut at the end of the
// sequence and at max_draft, nothing when no suffix recurs.
#include "spec/ngram.h"

#include <gtest/gtest.h>

namespace fg::spec {
namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& tokens, int min_n, int max_n, int max_draft) {
  std::vector<int32_t> out = {-1};  // appended to, never cleared
  const int n = ngram_propose(tokens, NgramOptions{min_n, max_n}, max_draft, out);
  EXPECT_EQ(size_t(n) + 1, out.size());
  return {out.begin() + 1, out.end()};
}

TEST(Ngram, CopiesWhatFollowedTheSuffix) {
  // "... 5 6 7 8 9 ... 5 6" -> 7 8 9
  EXPECT_EQ(propose({1, 5, 6, 7, 8, 9, 2, 3, 5, 6}, 2, 4, 3), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(propose({1, 5, 6, 7, 8, 9, 2, 3, 5, 6}, 2, 4, 2), (std::vector<int32_t>{7, 8}));
}

TEST(Ngram, LongestSuffixWins) {
  // Suffix "4 5": the 2-gram occurs at the start (followed by 9), the 3-gram "3 4 5" later (followed
  // by 7); the longer match is taken even though the shorter one is also there.
  EXPECT_EQ(propose({4, 5, 9, 3, 4, 5, 7, 7, 3, 4, 5}, 2, 3, 2), (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(propose({4, 5, 9, 3, 4, 5, 7, 7, 3, 4, 5}, 2, 2, 2), (std::vector<int32_t>{7, 7}))
      << "with only 2-grams the most recent occurrence wins";
}

TEST(Ngram, MostRecentOccurrenceWins) {
  EXPECT_EQ(propose({8, 1, 2, 8, 1, 3, 8, 1}, 2, 2, 1), (std::vector<int32_t>{3}));
}

TEST(Ngram, LoopsAreDraftedUpToTheEnd) {
  // A period-3 loop: the previous cycle proposes the next one, cut where the sequence ends.
  EXPECT_EQ(propose({1, 2, 3, 1, 2, 3, 1, 2}, 2, 3, 8), (std::vector<int32_t>{3, 1, 2}));
}

TEST(Ngram, NothingWithoutARecurringSuffix) {
  EXPECT_TRUE(propose({1, 2, 3, 4, 5, 6}, 1, 3, 4).empty());
  EXPECT_TRUE(propose({7, 1, 2, 7}, 2, 3, 4).empty()) << "a 1-gram match is below min_n";
  EXPECT_EQ(propose({7, 1, 2, 7}, 1, 3, 4), (std::vector<int32_t>{1, 2, 7}));
  EXPECT_TRUE(propose({1, 2, 1, 2}, 2, 2, 0).empty()) << "max_draft 0";
  EXPECT_TRUE(propose({}, 1, 2, 4).empty());
  EXPECT_TRUE(propose({3}, 1, 2, 4).empty());
}

}  // namespace
}  // namespace fg::spec
