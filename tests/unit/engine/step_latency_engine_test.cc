// The prefill chunk under a latency budget, end to end on an EngineCore with a simulated clock:
// the fake model's steps "take" a time convex in their tokens (a decode step leaves compute idle,
// prefill is compute-bound), the engine times them on EngineConfig::step_clock, and requests
// arrive while others decode. With the policy on, steps that carry decodes stay within twice the
// decode-only step once the model has learned; off, they do not; greedy tokens are the same. A
// runner whose first decode step at each batch size records a graph (a one-time cost) does not
// teach the model that decode steps are slow.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine_test_util.h"

namespace fg::test {
namespace {

constexpr double kDecodeSeconds = 5e-3;  // any step of at most 125 tokens
constexpr double kTokenSeconds = 40e-6;  // each token beyond: compute-bound

struct TimedStep {
  int32_t decodes = 0;  // single-token queries
  int32_t prefill = 0;  // the other tokens
  double seconds = 0.0;
};

// A FakeRunner whose forward advances a simulated clock by the step's cost and records it.
class TimedRunner : public FakeRunner {
 public:
  explicit TimedRunner(const FakeModelShape& shape) : FakeRunner(shape) {}
  double now = 0.0;
  std::vector<TimedStep> steps;
  double setup_seconds = 0.0;  // added to the first decode-only step of each batch size (power of 2)
  std::set<int32_t> buckets;   // ... already seen
  int64_t setups = 0;

  int64_t setup_steps() const override { return setups; }

  Result<Tensor> forward(const StepMetadata& b) override {
    TimedStep s;
    for (int32_t i = 0; i < b.num_seqs(); ++i) {
      const int32_t q = b.cu_seqlens_q[size_t(i) + 1] - b.cu_seqlens_q[size_t(i)];
      if (q == 1) {
        ++s.decodes;
      } else {
        s.prefill += q;
      }
    }
    s.seconds = std::max(kDecodeSeconds, kTokenSeconds * double(b.total_q()));
    if (setup_seconds > 0.0 && s.prefill == 0) {
      int32_t bucket = 1;
      while (bucket < s.decodes) bucket *= 2;
      if (buckets.insert(bucket).second) {
        s.seconds += setup_seconds;
        ++setups;
      }
    }
    now += s.seconds;
    steps.push_back(s);
    return FakeRunner::forward(b);
  }
};

struct TimedRun {
  std::vector<RequestOutput> outputs;
  std::vector<TimedStep> steps;
  double seconds = 0.0;  // simulated, all steps
  EngineStats stats;
};

// 48 requests arriving four at a time every twelfth step, prompts of 1..max_prompt tokens, up to
// 40 greedy tokens.
TimedRun run_timed(bool adaptive, double setup_seconds = 0.0, int32_t max_batch_tokens = 512,
                   int32_t max_prompt = 300) {
  FakeModelShape shape;
  shape.num_pages = 4096;
  shape.max_model_len = std::max(shape.max_model_len, max_prompt + 64);
  TimedRunner runner(shape);
  runner.setup_seconds = setup_seconds;
  EngineConfig config;
  config.scheduler.max_batch_tokens = max_batch_tokens;
  config.scheduler.latency.adaptive = adaptive;
  config.scheduler.latency.min_prefill_tokens = 16;
  config.scheduler.latency.decode_factor = 2.0;
  config.step_clock = [&runner] { return runner.now; };
  EngineCore core(config, runner);
  const std::vector<Request> requests = mixed_requests(48, shape.vocab, max_prompt, 40, 5);
  std::vector<RequestHandle> handles;
  for (int step = 0; handles.size() < requests.size() || core.has_work(); ++step) {
    for (int i = 0; i < 4 && step % 12 == 0 && handles.size() < requests.size(); ++i) {
      auto h = core.submit(requests[handles.size()]);
      EXPECT_TRUE(h.is_ok()) << h.status().to_string();
      handles.push_back(*h);
    }
    if (core.has_work()) {
      EXPECT_TRUE(core.step().is_ok());
    }
    if (step > 100000) break;
  }
  TimedRun r;
  for (const RequestHandle& h : handles) r.outputs.push_back(h.wait());
  r.steps = runner.steps;
  r.seconds = runner.now;
  r.stats = core.stats();
  return r;
}

TEST(StepLatencyEngine, StepsWithDecodesKeepTheBudgetAndTokensDoNotChange) {
  const TimedRun off = run_timed(false);
  const TimedRun on = run_timed(true);
  expect_same_tokens(on.outputs, off.outputs);

  const double budget = 2.0 * kDecodeSeconds;
  EXPECT_NEAR(on.stats.step_latency.decode_seconds, kDecodeSeconds, 1e-9);
  EXPECT_NEAR(on.stats.step_latency.budget_seconds, budget, 1e-9);
  EXPECT_NEAR(on.stats.step_latency.prefill_token_seconds, kTokenSeconds, 0.5 * kTokenSeconds);
  EXPECT_GT(on.stats.step_latency.limited_steps, 0);
  EXPECT_EQ(off.stats.step_latency.budget_seconds, 0.0);

  // Off: steps that carry decodes take whatever prefill is waiting.
  double off_worst = 0.0;
  for (const TimedStep& s : off.steps)
    if (s.decodes > 0) off_worst = std::max(off_worst, s.seconds);
  EXPECT_GT(off_worst, 1.5 * budget);

  // On: once learned (a few steps that overshoot while chunks double), none exceeds the budget.
  int with_decodes = 0, over = 0, late_over = 0;
  double on_worst = 0.0;
  for (const TimedStep& s : on.steps) {
    if (s.decodes == 0) continue;
    ++with_decodes;
    on_worst = std::max(on_worst, s.seconds);
    if (s.seconds > budget * 1.02) {
      ++over;
      if (with_decodes > 30) ++late_over;
    }
  }
  EXPECT_GT(with_decodes, 100);
  EXPECT_LE(over, 3);
  EXPECT_EQ(late_over, 0);
  EXPECT_LE(on_worst, 1.25 * budget);
  // The cost: a few more steps than without the budget, and little more simulated time.
  EXPECT_LE(on.steps.size(), off.steps.size() * 12 / 10);
  EXPECT_LE(on.seconds, off.seconds * 1.1);
}

TEST(StepLatencyEngine, StepsThatRecordAGraphDoNotTeachTheModel) {
  // Steps of up to 2,048 tokens (82 ms of prefill) and prompts of up to 1,500 tokens: a model
  // that took a 30 ms setup step for the decode base would let prefill chunks grow far past the
  // budget.
  const TimedRun on = run_timed(true, 25e-3, 2048, 1500);
  const double budget = 2.0 * kDecodeSeconds;
  EXPECT_NEAR(on.stats.step_latency.decode_seconds, kDecodeSeconds, 1e-9);
  // The setup steps themselves are slow (decode-only, so they carry no prefill); the steps that
  // carry prefill beside decodes keep the budget once learned, as without setup.
  int mixed = 0, late_over = 0, slow_decode_only = 0;
  double worst = 0.0;
  for (const TimedStep& s : on.steps) {
    if (s.decodes == 0) continue;
    if (s.prefill == 0) {
      slow_decode_only += s.seconds > 2 * kDecodeSeconds ? 1 : 0;
      continue;
    }
    ++mixed;
    worst = std::max(worst, s.seconds);
    if (mixed > 10 && s.seconds > budget * 1.02) ++late_over;
  }
  EXPECT_GE(slow_decode_only, 3);  // graphs for 4, 8, 16, ... sequences
  EXPECT_GT(mixed, 30);
  EXPECT_EQ(late_over, 0);
  EXPECT_LE(worst, 1.25 * budget);
}

}  // namespace
}  // namespace fg::test
