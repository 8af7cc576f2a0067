// The engine's batch-invariance contract on a fake model: the tokens a request gets do not depend
// on what else runs, on the chunk budget, or on preemption; the page pool ends exactly full.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace fg::test {
namespace {

FakeModelShape shape_with_eos() {
  FakeModelShape s;
  s.eos_bias = 1.5f;  // some requests end with eos before max_new_tokens
  return s;
}

TEST(EngineCore, SixtyFourConcurrentGreedyRequestsMatchEachAlone) {
  const FakeModelShape shape = shape_with_eos();
  auto requests = mixed_requests(64, shape.vocab, 40, 30, 7);
  const auto alone = run_each_alone(shape, requests);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 256;
  const RunResult together = run_all(shape, config, requests);
  expect_same_tokens(together.outputs, alone);
  int eos = 0, length = 0;
  for (const auto& o : together.outputs) {
    eos += o.finish_reason == FinishReason::kEos;
    length += o.finish_reason == FinishReason::kLength;
  }
  EXPECT_GT(eos, 0);
  EXPECT_GT(length, 0);
  EXPECT_EQ(together.stats.preemptions, 0);
  EXPECT_EQ(together.stats.finished, 64);
  EXPECT_GT(together.stats.steps, 0);
  EXPECT_LT(together.stats.steps, 200) << "requests were not batched";
}

TEST(EngineCore, SmallPoolPreemptsAndStillMatches) {
  FakeModelShape shape = shape_with_eos();
  shape.num_pages = 24;  // 96 token slots for 64 requests of up to 70 tokens
  auto requests = mixed_requests(64, shape.vocab, 40, 30, 11);
  const auto alone = run_each_alone(shape, requests);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 64;
  const RunResult together = run_all(shape, config, requests);
  expect_same_tokens(together.outputs, alone);
  EXPECT_GT(together.stats.preemptions, 0) << "the pool was meant to be too small to avoid preemption";
  EXPECT_EQ(together.stats.pages.held, 0);
  EXPECT_LE(together.stats.pages.peak_held, shape.num_pages);
}

TEST(EngineCore, ChunkBudgetsGiveTheSameTokens) {
  const FakeModelShape shape = shape_with_eos();
  auto requests = mixed_requests(24, shape.vocab, 60, 12, 3);
  std::vector<RequestOutput> reference;
  for (int budget : {512, 5, 1}) {
    EngineConfig config;
    config.scheduler.max_batch_tokens = budget;
    const RunResult r = run_all(shape, config, requests);
    if (reference.empty()) {
      reference = r.outputs;
    } else {
      expect_same_tokens(r.outputs, reference);
    }
  }
}

TEST(EngineCore, LongPromptIsChunkedWhileOthersDecode) {
  FakeModelShape shape;
  FakeRunner runner(shape);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 16;
  EngineCore core(config, runner);
  Request short_req;
  short_req.prompt_ids = {5, 6, 7};
  short_req.params.temperature = 0.0f;
  short_req.params.max_new_tokens = 20;
  short_req.params.ignore_eos = true;
  auto a = core.submit(short_req);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(core.step().is_ok());  // short prompt prefilled, first token sampled
  Request long_req;
  long_req.prompt_ids.assign(100, 9);
  long_req.params = short_req.params;
  auto b = core.submit(long_req);
  ASSERT_TRUE(b.is_ok());
  // While the long prompt is prefilled in chunks of <= 15 tokens, the short one gains a token
  // every step.
  int steps = 0;
  while (b->events->try_next() == std::nullopt && steps < 20) {
    ASSERT_TRUE(core.step().is_ok());
    ++steps;
  }
  EXPECT_EQ(steps, 7);  // ceil(100 / 15)
  EXPECT_EQ(runner.max_step_tokens(), 16);
  int short_tokens = 0;
  while (auto e = a->events->try_next()) short_tokens += e->token.has_value();
  EXPECT_EQ(short_tokens, 1 + steps);
}

TEST(EngineCore, RefusesRequestsThatCanNeverFit) {
  FakeModelShape shape;
  shape.num_pages = 8;  // 32 slots
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  Request r;
  r.prompt_ids.assign(30, 3);
  r.params.max_new_tokens = 10;
  auto h = core.submit(r);
  ASSERT_FALSE(h.is_ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kContextTooLong);
  EXPECT_NE(h.status().message().find("--kv-cache-memory"), std::string::npos) << h.status().message();
  r.params.max_new_tokens = 3;  // 33 tokens, the last never cached: fits exactly
  EXPECT_TRUE(core.submit(r).is_ok());
  Request too_long;
  too_long.prompt_ids.assign(600, 3);
  EXPECT_EQ(core.submit(too_long).status().code(), ErrorCode::kContextTooLong);
  Request bad;
  bad.prompt_ids = {1, 999};
  EXPECT_EQ(core.submit(bad).status().code(), ErrorCode::kInvalidArgument);
  Request stop_strings;
  stop_strings.prompt_ids = {1};
  stop_strings.params.stop = {"\n\n"};
  EXPECT_EQ(core.submit(stop_strings).status().code(), ErrorCode::kUnsupported);
  Request empty;
  EXPECT_EQ(core.submit(empty).status().code(), ErrorCode::kInvalidArgument);
}

TEST(EngineCore, UnboundedRequestEndsAtThePoolCapacity) {
  FakeModelShape shape;
  shape.num_pages = 8;
  Request r;
  r.prompt_ids = {4, 5};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = std::nullopt;  // no limit of its own
  r.params.ignore_eos = true;
  const RunResult res = run_all(shape, EngineConfig{}, {r});
  EXPECT_EQ(res.outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(res.outputs[0].output_ids.size(), 8u * 4u + 1u - 2u);
}

TEST(EngineCore, StopTokensEosAndIgnoreEos) {
  FakeModelShape shape;
  shape.eos_bias = 100.0f;  // eos always wins the argmax
  Request r;
  r.prompt_ids = {4, 5, 6};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 5;
  auto res = run_all(shape, EngineConfig{}, {r});
  EXPECT_EQ(res.outputs[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(res.outputs[0].output_ids, std::vector<int32_t>{0});
  r.params.ignore_eos = true;
  res = run_all(shape, EngineConfig{}, {r});
  EXPECT_EQ(res.outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(res.outputs[0].output_ids, std::vector<int32_t>(5, 0));
  r.params.stop_token_ids = {0};  // stop ids apply even with ignore_eos
  res = run_all(shape, EngineConfig{}, {r});
  EXPECT_EQ(res.outputs[0].finish_reason, FinishReason::kStopToken);
}

TEST(EngineCore, StopMatcherEndsTheRequest) {
  // A matcher that "sees" a stop string after the third token.
  class CountingMatcher : public StopMatcher {
   public:
    bool feed(int32_t) override { return ++n_ == 3; }

   private:
    int n_ = 0;
  };
  FakeModelShape shape;
  FakeRunner runner(shape);
  EngineConfig config;
  config.stop_matcher_factory = [](const std::vector<std::string>& stops) -> Result<std::unique_ptr<StopMatcher>> {
    EXPECT_EQ(stops, std::vector<std::string>{"END"});
    return std::unique_ptr<StopMatcher>(new CountingMatcher());
  };
  EngineCore core(config, runner);
  Request r;
  r.prompt_ids = {1, 2};
  r.params.max_new_tokens = 10;
  r.params.ignore_eos = true;
  r.params.stop = {"END"};
  // With min_new_tokens the matcher first sees the token after them: the 4 + 3rd ends it.
  for (int32_t min : {0, 4}) {
    r.params.min_new_tokens = min;
    auto h = core.submit(r);
    ASSERT_TRUE(h.is_ok());
    while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
    const RequestOutput out = h->wait();
    EXPECT_EQ(out.finish_reason, FinishReason::kStopString);
    EXPECT_EQ(out.output_ids.size(), size_t(3 + min));
  }
}

TEST(EngineCore, PriorityIsServedFirst) {
  FakeModelShape shape;
  FakeRunner runner(shape);
  EngineConfig config;
  config.scheduler.max_running = 1;
  EngineCore core(config, runner);
  Request r;
  r.prompt_ids = {1, 2};
  r.params.max_new_tokens = 3;
  r.params.ignore_eos = true;
  auto low = core.submit(r);
  r.priority = 5;
  auto high = core.submit(r);
  ASSERT_TRUE(low.is_ok() && high.is_ok());
  ASSERT_TRUE(core.step().is_ok());
  EXPECT_TRUE(high->events->try_next().has_value());
  EXPECT_FALSE(low->events->try_next().has_value());
}

TEST(EngineCore, ForwardFailureEndsOnlyThatStepsRequestsWithAnError) {
  class FailingRunner : public FakeRunner {
   public:
    using FakeRunner::FakeRunner;
    Result<Tensor> forward(const StepMetadata& b) override {
      if (++calls_ == 2) return internal_error("device fell over");
      return FakeRunner::forward(b);
    }

   private:
    int calls_ = 0;
  };
  FakeModelShape shape;
  FailingRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  Request r;
  r.prompt_ids = {1, 2};
  r.params.max_new_tokens = 4;
  r.params.ignore_eos = true;
  auto a = core.submit(r);
  ASSERT_TRUE(core.step().is_ok());
  EXPECT_FALSE(core.step().is_ok());
  auto b = core.submit(r);
  while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
  EXPECT_EQ(a->wait().finish_reason, FinishReason::kError);
  EXPECT_EQ(b->wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(core.stats().failed, 1);
  EXPECT_EQ(core.pool().num_free() + core.pool().num_cached(), shape.num_pages);
  EXPECT_EQ(core.pool().num_held(), 0);
}

}  // namespace
}  // namespace fg::test
