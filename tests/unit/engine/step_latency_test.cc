// The step-time model and the prefill chunk choice on synthetic step times: the fit recovers the
// costs it was fed, the chunk fits the budget, respects its floor, grows back step by step, and the
// policy off (or with no running decodes) leaves the token budget alone.
#include "engine/step_latency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>

namespace fg {
namespace {

constexpr double kMs = 1e-3;

StepLatencyConfig adaptive(int32_t floor = 16) {
  StepLatencyConfig c;
  c.adaptive = true;
  c.min_prefill_tokens = floor;
  c.decode_factor = 2.0;  // round numbers (the default is 1.8)
  return c;
}

TEST(StepTimeModel, DecodeBaseIsTheMedianOfTheLatestDecodeOnlySteps) {
  StepTimeModel m;
  EXPECT_FALSE(m.knows_decode());
  EXPECT_EQ(m.decode_seconds(), 0.0);
  m.observe(/*decodes=*/0, /*prefill_tokens=*/0, 9.0);  // no decodes: ignored
  m.observe(0, 500, 9.0);
  EXPECT_FALSE(m.knows_decode());
  m.observe(4, 500, 9.0);  // prefill before any base: nothing to measure it against
  EXPECT_FALSE(m.knows_prefill());
  for (double t : {7.0, 5.0, 6.0, 100.0, 5.5}) m.observe(8, 0, t * kMs);  // one slow outlier
  EXPECT_TRUE(m.knows_decode());
  EXPECT_DOUBLE_EQ(m.decode_seconds(), 6.0 * kMs);
  m.observe(8, 0, 6.5 * kMs);  // even count: the mean of the two middle ones
  EXPECT_DOUBLE_EQ(m.decode_seconds(), 6.25 * kMs);
  // Only the latest kDecodeWindow steps count: a slower regime takes over.
  for (size_t i = 0; i < StepTimeModel::kDecodeWindow; ++i) m.observe(64, 0, 9.0 * kMs);
  EXPECT_DOUBLE_EQ(m.decode_seconds(), 9.0 * kMs);
  // Bad measurements are ignored.
  m.observe(8, 0, -1.0);
  m.observe(8, 0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(m.decode_seconds(), 9.0 * kMs);
}

TEST(StepTimeModel, PrefillSlopeIsRecoveredAndFollowsAChange) {
  StepTimeModel m;
  m.observe(8, 0, 5.0 * kMs);
  for (int32_t p : {100, 300, 50, 700, 256}) m.observe(8, p, 5.0 * kMs + p * 20e-6);
  EXPECT_TRUE(m.knows_prefill());
  EXPECT_NEAR(m.prefill_token_seconds(), 20e-6, 1e-12);
  EXPECT_NEAR(m.predict(400), 13.0 * kMs, 1e-9);
  EXPECT_EQ(m.last_prefill_tokens(), 256);
  // The device gets twice as slow at prefill: older steps are forgotten.
  for (int i = 0; i < 100; ++i) m.observe(8, 200, 5.0 * kMs + 200 * 40e-6);
  EXPECT_NEAR(m.prefill_token_seconds(), 40e-6, 1e-9);
}

TEST(PrefillChunk, OffOrUnmeasuredLeavesTheTokenBudgetOrTimesTheBase) {
  StepTimeModel m;
  StepLatencyConfig off;
  off.adaptive = false;
  EXPECT_EQ(prefill_chunk_limit(off, m, 2000), 2000);
  EXPECT_EQ(step_latency_budget(off, m), 0.0);
  // On, with no decode-only step timed yet: this step carries none, so its time is the base.
  EXPECT_EQ(prefill_chunk_limit(adaptive(), m, 2000), 0);
  m.observe(8, 0, 5.0 * kMs);
  EXPECT_EQ(prefill_chunk_limit(off, m, 2000), 2000);
  // Base known, prefill cost not yet: the floor (and never more than is left).
  EXPECT_EQ(prefill_chunk_limit(adaptive(64), m, 2000), 64);
  EXPECT_EQ(prefill_chunk_limit(adaptive(64), m, 40), 40);
  EXPECT_DOUBLE_EQ(step_latency_budget(adaptive(), m), 10.0 * kMs);                          // twice the base
  EXPECT_DOUBLE_EQ(step_latency_budget(StepLatencyConfig{.adaptive = true}, m), 9.0 * kMs);  // the default 1.8
}

TEST(PrefillChunk, FitsTheBudgetWithAFloorAndGrowsStepByStep) {
  StepTimeModel m;
  m.observe(8, 0, 5.0 * kMs);
  m.observe(8, 200, 5.0 * kMs + 200 * 20e-6);  // 20 us per prefill token
  // Auto budget 10 ms: 5 ms of room = 250 tokens.
  EXPECT_EQ(prefill_chunk_limit(adaptive(), m, 2000), 250);
  // A fixed budget of 7 ms: 100 tokens; one of 4 ms (below the base): the floor.
  StepLatencyConfig fixed = adaptive(32);
  fixed.max_step_seconds = 7.0 * kMs;
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 100);
  fixed.max_step_seconds = 4.0 * kMs;
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 32);
  fixed.min_prefill_tokens = 300;  // the floor beats the budget
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 300);
  // A slack budget allows at most twice the latest chunk: growth is step by step.
  fixed.max_step_seconds = 1.0;
  fixed.min_prefill_tokens = 16;
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 400);
  m.observe(8, 400, 5.0 * kMs + 400 * 20e-6);
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 800);
  m.observe(8, 800, 5.0 * kMs + 800 * 20e-6);
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 1600);
  m.observe(8, 1600, 5.0 * kMs + 1600 * 20e-6);
  EXPECT_EQ(prefill_chunk_limit(fixed, m, 2000), 2000);
  // Prefill that looked free: still at most twice the latest chunk.
  StepTimeModel free_prefill;
  free_prefill.observe(8, 0, 5.0 * kMs);
  free_prefill.observe(8, 100, 4.9 * kMs);
  EXPECT_LE(free_prefill.prefill_token_seconds(), 0.0);
  EXPECT_EQ(prefill_chunk_limit(adaptive(), free_prefill, 2000), 200);
  // ... unless the budget leaves no room at all beyond a decode-only step: then the floor.
  StepLatencyConfig tight = adaptive(16);
  tight.max_step_seconds = 4.0 * kMs;
  EXPECT_EQ(prefill_chunk_limit(tight, free_prefill, 2000), 16);
}

// Steps run with the chosen chunk on a device whose step time is convex in the prefill tokens
// (a decode step leaves compute idle, prefill is compute-bound): the chunk settles where the
// measured step time meets the budget, from below, and a long step early on does not recur.
TEST(PrefillChunk, ConvergesToTheBudgetOnAConvexDevice) {
  const std::function<double(int32_t)> device = [](int32_t p) { return std::max(7.0 * kMs, (p + 64) * 20e-6); };
  StepTimeModel m;
  const StepLatencyConfig c = adaptive(64);
  int32_t chunk = prefill_chunk_limit(c, m, 2000);
  EXPECT_EQ(chunk, 0);
  double worst_late = 0.0;
  for (int step = 0; step < 200; ++step) {
    m.observe(64, chunk, device(chunk));
    if (step >= 20) worst_late = std::max(worst_late, device(chunk));
    chunk = prefill_chunk_limit(c, m, 2000);
  }
  EXPECT_DOUBLE_EQ(m.decode_seconds(), 7.0 * kMs);
  // The budget is 14 ms: 636 tokens fit (700 tokens of the step's 20 us each).
  EXPECT_NEAR(chunk, 636, 4);
  EXPECT_LE(worst_late, 14.0 * kMs * 1.01);
  EXPECT_GE(worst_late, 14.0 * kMs * 0.97);
}

}  // namespace
}  // namespace fg
