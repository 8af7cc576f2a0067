// Predicted outputs' proposer (spec/prediction.h): drafts follow the prediction while the output
// is a prefix of it, re-synchronize on the output's longest recent suffix after an edit (forward
// from the last match first), stop at the prediction's end, and propose nothing without a match.
#include "spec/prediction.h"

#include <gtest/gtest.h>

#include <vector>

namespace fg::spec {
namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& output, const std::vector<int32_t>& prediction, int k,
                             PredictionState& state, NgramOptions o = {2, 3}) {
  std::vector<int32_t> out = {-1};  // appended to, never replaced
  const int n = prediction_propose(output, prediction, o, k, state, out);
  EXPECT_EQ(size_t(n) + 1, out.size());
  return std::vector<int32_t>(out.begin() + 1, out.end());
}

TEST(Prediction, FollowsThePredictionWhileTheOutputIsItsPrefix) {
  const std::vector<int32_t> p = {10, 11, 12, 13, 14, 15};
  PredictionState st;
  EXPECT_EQ(propose({}, p, 3, st), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(propose({10, 11}, p, 3, st), (std::vector<int32_t>{12, 13, 14}));
  EXPECT_EQ(st.aligned, 2);
  EXPECT_EQ(propose({10, 11, 12, 13, 14}, p, 3, st), (std::vector<int32_t>{15}));  // the end
  EXPECT_EQ(propose({10, 11, 12, 13, 14, 15}, p, 3, st), std::vector<int32_t>{});
  EXPECT_FALSE(st.diverged);
  EXPECT_EQ(propose({10, 11}, p, 0, st), std::vector<int32_t>{});  // no room
  PredictionState none;
  EXPECT_EQ(propose({10}, {}, 3, none), std::vector<int32_t>{});
}

TEST(Prediction, ResynchronizesAfterAnEdit) {
  //                               0   1   2   3   4   5   6   7   8   9
  const std::vector<int32_t> p = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  PredictionState st;
  // The output replaced 12 13 by 50: no suffix of 2..3 tokens matches yet.
  EXPECT_EQ(propose({10, 11, 50}, p, 4, st), std::vector<int32_t>{});
  EXPECT_TRUE(st.diverged);
  // ... then rejoins at 14 15: the draft continues after them.
  EXPECT_EQ(propose({10, 11, 50, 14, 15}, p, 4, st), (std::vector<int32_t>{16, 17, 18, 19}));
  EXPECT_EQ(st.cursor, 6);
  // Once diverged, it never goes back to the prefix rule.
  EXPECT_EQ(propose({10, 11, 50, 14, 15, 16}, p, 2, st), (std::vector<int32_t>{17, 18}));
  // Longest suffix first: 5 6 7 (drafting 1) beats the nearer 6 7 (which would draft 2).
  const std::vector<int32_t> q = {6, 7, 2, 5, 6, 7, 1};
  PredictionState s2;
  s2.diverged = true;
  EXPECT_EQ(propose({9, 5, 6, 7}, q, 1, s2), std::vector<int32_t>{1});
}

TEST(Prediction, SearchesForwardFromTheCursorFirst) {
  // A repeated line: "1 2 3 A" then "1 2 3 B".
  const std::vector<int32_t> p = {1, 2, 3, 7, 1, 2, 3, 8};
  PredictionState st;
  st.diverged = true;
  st.cursor = 4;  // the last draft came from the second line
  EXPECT_EQ(propose({0, 1, 2, 3}, p, 1, st), std::vector<int32_t>{8});
  EXPECT_EQ(st.cursor, 7);
  // Nothing after the cursor: the first line, before it.
  st.cursor = 8;
  EXPECT_EQ(propose({0, 1, 2, 3}, p, 1, st), std::vector<int32_t>{7});
  EXPECT_EQ(st.cursor, 3);
  // An occurrence at the very end has nothing after it to draft.
  PredictionState end;
  end.diverged = true;
  EXPECT_EQ(propose({0, 3, 8}, p, 2, end), std::vector<int32_t>{});
}

}  // namespace
}  // namespace fg::spec
