// Stop strings over streamed text: split stops are caught, nothing after a stop is sent,
// possible stop prefixes are held back and released when resolved.
#include "tokenizer/stop_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace fg {
namespace {

TEST(StopStringMatcher, CatchesStopSplitAcrossDeltas) {
  StopStringMatcher m({"###"});
  auto o = m.push("ab#");
  EXPECT_EQ(o.text, "ab");
  EXPECT_FALSE(o.stopped);
  o = m.push("#");
  EXPECT_EQ(o.text, "");
  EXPECT_FALSE(o.stopped);
  o = m.push("#tail");
  EXPECT_EQ(o.text, "");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.stop_index, 0);
  EXPECT_TRUE(m.stopped());
  o = m.push("more");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringMatcher, ReleasesHeldTextWhenResolved) {
  StopStringMatcher m({"</end>"});
  EXPECT_EQ(m.push("x </e").text, "x ");
  EXPECT_EQ(m.push("nd").text, "");
  EXPECT_EQ(m.push("!").text, "</end!");
  EXPECT_EQ(m.push("</").text, "");
  EXPECT_EQ(m.flush(), "</");
}

TEST(StopStringMatcher, EarliestStopWinsAndTextBeforeItIsSent) {
  StopStringMatcher m({"world", "lo w", "\n\n"});
  auto o = m.push("hello world");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "hel");
  EXPECT_EQ(o.stop_index, 1);
}

TEST(StopStringMatcher, UnicodeStopAndNoStops) {
  StopStringMatcher m({"\u3002\u3002"});  // "。。"
  EXPECT_EQ(m.push("\u4e2d\u3002").text, "\u4e2d");
  auto o = m.push("\u3002x");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");

  StopStringMatcher none({"", ""});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.push("abc").text, "abc");
  EXPECT_EQ(none.flush(), "");
}

TEST(StopStringMatcher, RandomizedAgainstReference) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab#\n";
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    const int n_stops = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_stops; ++k) {
      std::string s(1 + rng() % 4, 'a');
      for (char& c : s) c = alphabet[rng() % alphabet.size()];
      stops.push_back(s);
    }
    std::string text(rng() % 40, 'a');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    std::vector<size_t> cuts;  // delta boundaries
    for (size_t pos = 0; pos < text.size();) {
      pos = std::min(text.size(), pos + 1 + rng() % 5);
      cuts.push_back(pos);
    }
    // Reference: after each delta, if the text so far contains a stop string, the answer is the
    // text before its first occurrence; otherwise everything.
    std::string expected = text;
    bool expect_stop = false;
    for (size_t end : cuts) {
      size_t first = std::string::npos;
      for (const auto& s : stops) first = std::min(first, text.substr(0, end).find(s));
      if (first != std::string::npos) {
        expected = text.substr(0, first);
        expect_stop = true;
        break;
      }
    }

    StopStringMatcher m(stops);
    std::string sent;
    bool stopped = false;
    size_t prev = 0;
    for (size_t end : cuts) {
      auto o = m.push(std::string_view(text).substr(prev, end - prev));
      prev = end;
      sent += o.text;
      // What was sent is always a prefix of the final answer.
      ASSERT_EQ(expected.compare(0, sent.size(), sent), 0) << "trial " << trial;
      if ((stopped = o.stopped)) break;
    }
    if (!stopped) sent += m.flush();
    EXPECT_EQ(sent, expected) << "trial " << trial << " text '" << text << "'";
    EXPECT_EQ(stopped, expect_stop) << "trial " << trial;
  }
}

}  // namespace
}  // namespace fg
