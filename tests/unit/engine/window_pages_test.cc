// Sliding-window page release (engine/scheduler.h, 6.) on the fake paged model with a window on
// every layer: it reads back every position inside the window of each row (a released page reused
// by another sequence would hold other positions and fail the step), and nothing before it.
//  - a generation far longer than the KV pool runs in a bounded number of pages;
//  - crowds under a pool small enough to preempt, with the prefix cache on and off, and with
//    speculative decoding, give every request the greedy tokens of a direct reference loop, and
//    return every page;
//  - without a window on every layer nothing is released before the sequence ends.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace fg::test {
namespace {

// Greedy tokens of the fake model for `r`, computed directly (no engine, no KV pages).
std::vector<int32_t> greedy_reference(const FakeModelShape& shape, const Request& r) {
  std::vector<int32_t> tokens = r.prompt_ids, out;
  std::vector<float> logits(static_cast<size_t>(shape.vocab));
  const int max_new = r.params.max_new_tokens.value_or(0);
  while (int(out.size()) < max_new) {
    fake_logits(shape, tokens, logits.data());
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    tokens.push_back(t);
    if (!r.params.ignore_eos && std::find(shape.eos.begin(), shape.eos.end(), t) != shape.eos.end()) break;
  }
  return out;
}

void expect_reference_tokens(const FakeModelShape& shape, const std::vector<Request>& requests, const RunResult& run) {
  ASSERT_EQ(run.outputs.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(run.outputs[i].output_ids, greedy_reference(shape, requests[i])) << "request " << i;
}

Request long_request(int prompt_len, int max_new, int32_t first) {
  Request r;
  for (int i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(1 + (first + 7 * i) % 60);
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = max_new;
  r.params.ignore_eos = true;
  return r;
}

TEST(WindowPages, GenerationLongerThanThePoolRunsInBoundedPages) {
  FakeModelShape shape;
  shape.window = 12;
  shape.page_size = 4;
  shape.num_pages = 12;  // 48 token slots for a sequence of 330 tokens
  EngineConfig config;
  config.scheduler.max_batch_tokens = 8;  // the 30-token prompt is prefilled in chunks
  const std::vector<Request> requests = {long_request(30, 300, 3)};
  const RunResult run = run_all(shape, config, requests);
  expect_reference_tokens(shape, requests, run);
  // Window + one step's tokens + the stand-in and partial pages: (12 + 8) / 4 + 3.
  EXPECT_LE(run.stats.pages.peak_held, 8);
  EXPECT_EQ(run.stats.preemptions, 0);
}

TEST(WindowPages, UnsetLimitUsesTheContextNotThePool) {
  // Without max_new_tokens a windowed request may run to the model's context, not the pool's size.
  FakeModelShape shape;
  shape.window = 8;
  shape.num_pages = 10;
  shape.max_model_len = 200;
  EngineConfig config;
  config.scheduler.max_batch_tokens = 8;
  FakeRunner runner(shape);
  EngineCore core(config, runner);
  Request r = long_request(10, 0, 5);
  r.params.max_new_tokens.reset();
  auto h = core.submit(r);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
  const RequestOutput out = h->wait();
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(int(out.output_ids.size()), 190);
}

TEST(WindowPages, CrowdsUnderPreemptionKeepTheirTokens) {
  FakeModelShape shape;
  shape.window = 10;
  shape.num_pages = 48;
  for (bool prefix_cache : {true, false}) {
    SCOPED_TRACE(prefix_cache ? "prefix cache on" : "prefix cache off");
    auto requests = mixed_requests(40, shape.vocab, 40, 80, 11);
    // Shared system prompts, so the prefix cache hits pages that windows later release.
    for (size_t i = 0; i < requests.size(); i += 2) {
      const std::vector<int32_t> head = long_request(17, 1, int32_t(i % 3)).prompt_ids;
      requests[i].prompt_ids.insert(requests[i].prompt_ids.begin(), head.begin(), head.end());
    }
    for (Request& r : requests) r.params.ignore_eos = true;
    EngineConfig config;
    config.enable_prefix_cache = prefix_cache;
    config.scheduler.max_batch_tokens = 24;
    const RunResult run = run_all(shape, config, requests);
    expect_reference_tokens(shape, requests, run);
    EXPECT_GT(run.stats.preemptions, 0) << "the pool was meant to be small enough to preempt";
    if (prefix_cache) {
      EXPECT_GT(run.stats.prefix_cache_hit_tokens, 0);
    }
  }
}

TEST(WindowPages, SpeculativeDecodingRollsBackInsideTheWindow) {
  FakeModelShape shape;
  shape.window = 6;
  shape.context = 1;  // greedy outputs loop, so n-gram drafts get accepted (and some rejected)
  shape.num_pages = 64;
  auto requests = mixed_requests(24, shape.vocab, 12, 60, 5);
  for (Request& r : requests) {
    const std::vector<int32_t> head = r.prompt_ids;
    r.prompt_ids.insert(r.prompt_ids.end(), head.begin(), head.end());
    r.params.ignore_eos = true;
  }
  EngineConfig config;
  config.scheduler.max_batch_tokens = 64;
  config.spec.method = SpecMethod::kNgram;
  config.spec.num_tokens = 4;
  config.spec.ngram = {1, 3};
  config.spec.max_batch = 1024;
  const RunResult run = run_all(shape, config, requests);
  expect_reference_tokens(shape, requests, run);
  EXPECT_GT(run.stats.spec.accepted_tokens, 0);
  EXPECT_LT(run.stats.spec.accepted_tokens, run.stats.spec.draft_tokens);
}

TEST(WindowPages, NothingIsReleasedWithoutAWindowOnEveryLayer) {
  FakeModelShape shape;
  shape.num_pages = 256;
  EngineConfig config;
  config.scheduler.max_batch_tokens = 8;
  const std::vector<Request> requests = {long_request(30, 300, 3)};
  const RunResult run = run_all(shape, config, requests);
  expect_reference_tokens(shape, requests, run);
  EXPECT_EQ(run.stats.pages.peak_held, (30 + 300 - 1 + 3) / 4);  // every page of the sequence at once
}

}  // namespace
}  // namespace fg::test
