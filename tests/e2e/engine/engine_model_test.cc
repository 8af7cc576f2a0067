// The engine over a real model (the tiny fixture checkpoints, CPU backend): every request's tokens
// equal what the model layer's single-sequence generate() gives for it alone — with 64 requests in
// flight, with a KV pool small enough to force preemption, with chunk budgets of 1, 5 and 512
// tokens, and for seeded sampling amid other requests. Cancelling half the requests mid-flight
// leaves the page pool exactly full.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kvcache/kv_sizing.h"
#include "model/generate.h"
#include "support/engine_test_util.h"

namespace fg {
namespace {

using test::EngineRun;
using test::run_engine;

// The llama fixture on the CPU, pages of page_size tokens.
std::unique_ptr<ModelRunner> make_runner(int64_t kv_bytes, int page_size = 4) {
  return test::make_cpu_runner("llama", kv_bytes, page_size);
}

// KV bytes one token takes in the fixture (all layers, K and V), from a probe runner.
int64_t kv_bytes_per_token() {
  static const int64_t bytes = [] {
    auto r = make_runner(1 << 20);
    return r ? r->kv_cache_bytes() / (int64_t(r->kv_num_pages()) * r->kv_page_size()) : int64_t(1);
  }();
  return bytes;
}

std::vector<Request> mixed(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = 1 + int(rng() % 48);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(3 + rng() % uint32_t(vocab - 3)));
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 1 + int(rng() % 24);
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

void expect_matches(const EngineRun& run, const std::vector<std::vector<int32_t>>& want) {
  ASSERT_EQ(run.outputs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(run.outputs[i].output_ids, want[i]) << "request " << i;
    EXPECT_EQ(run.outputs[i].finish_reason, FinishReason::kLength) << "request " << i;
  }
}

class EngineModel : public ::testing::Test {
 protected:
  void SetUp() override {
    runner_ = make_runner(4096 * kv_bytes_per_token());  // roomy: no preemption
    ASSERT_NE(runner_, nullptr);
    requests_ = mixed(64, 17, runner_->vocab_size());
    want_ = test::reference_tokens(runner_->model(), requests_);
  }
  std::unique_ptr<ModelRunner> runner_;
  std::vector<Request> requests_;
  std::vector<std::vector<int32_t>> want_;
};

TEST_F(EngineModel, SixtyFourConcurrentGreedyRequestsMatchEachAlone) {
  EngineConfig config;
  config.scheduler.max_batch_tokens = 512;
  const EngineRun run = run_engine(*runner_, config, requests_);
  expect_matches(run, want_);
  EXPECT_EQ(run.stats.preemptions, 0);
  EXPECT_LT(run.stats.steps, 40) << "the requests were not batched together";
}

TEST_F(EngineModel, PreemptionUnderASmallPoolKeepsTheTokens) {
  // 64 pages of 4 tokens.
  auto small = make_runner(64 * 4 * kv_bytes_per_token());
  ASSERT_NE(small, nullptr);
  ASSERT_EQ(small->kv_num_pages(), 64);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 128;
  const EngineRun run = run_engine(*small, config, requests_);
  expect_matches(run, want_);
  EXPECT_GT(run.stats.preemptions, 0) << "the pool was meant to be small enough to force preemption";
}

TEST_F(EngineModel, ChunkBudgetsOf1And5And512GiveTheSameTokens) {
  // A third of the requests keeps the budget-1 run (one token per step) short.
  std::vector<Request> some;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < requests_.size(); i += 3) {
    some.push_back(requests_[i]);
    want.push_back(want_[i]);
  }
  for (int budget : {1, 5, 512}) {
    SCOPED_TRACE("max_batch_tokens " + std::to_string(budget));
    EngineConfig config;
    config.scheduler.max_batch_tokens = budget;
    expect_matches(run_engine(*runner_, config, some), want);
  }
}

TEST_F(EngineModel, SeededSamplingIsReproducibleInAnyCompany) {
  Request probe;
  probe.prompt_ids = {5, 17, 99, 3, 250, 42};
  probe.params.temperature = 1.0f;
  probe.params.top_k = 40;
  probe.params.top_p = 0.9f;
  probe.params.seed = 1234;
  probe.params.max_new_tokens = 20;
  probe.params.ignore_eos = true;
  const auto alone = test::reference_tokens(runner_->model(), {probe})[0];
  std::vector<Request> crowd = requests_;
  for (size_t i = 0; i < crowd.size(); i += 3) {
    crowd[i].params.temperature = 0.7f;
    crowd[i].params.seed = 77 + i;
  }
  crowd.insert(crowd.begin() + 30, probe);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 96;
  auto small = make_runner(96 * 4 * kv_bytes_per_token());
  const EngineRun run = run_engine(*small, config, crowd);
  EXPECT_EQ(run.outputs[30].output_ids, alone);
  EXPECT_GT(run.stats.preemptions, 0);
}

TEST_F(EngineModel, CancellingHalfMidFlightLeavesThePoolFull) {
  auto runner = make_runner(4096 * kv_bytes_per_token());
  ASSERT_NE(runner, nullptr);
  const int32_t pages = runner->kv_num_pages();
  Engine engine(EngineConfig{}, std::move(runner));
  std::vector<RequestHandle> handles;
  for (Request r : requests_) {
    r.params.max_new_tokens = 24;
    auto h = engine.submit(r);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    handles.push_back(*h);
  }
  // Every request has produced its first token: all are mid-flight.
  for (auto& h : handles) ASSERT_TRUE(h.events->next().has_value());
  for (size_t i = 1; i < handles.size(); i += 2) engine.cancel(handles[i].id);
  int cancelled = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const RequestOutput out = handles[i].wait();
    if (i % 2 == 0) {
      EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    }
    cancelled += out.finish_reason == FinishReason::kCancelled;
  }
  EXPECT_GT(cancelled, 0);
  engine.shutdown();
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.pages.free + s.pages.cached, pages);
  EXPECT_EQ(s.pages.held, 0);
  EXPECT_EQ(s.finished, 64);
}

}  // namespace
}  // namespace fg

namespace fg {
namespace {

// --kv-cache-dtype fp8 on the CPU: the same KV memory holds 4x the tokens of the f32 cache (2x
// those of a bf16 one), and every request's greedy tokens equal the single-sequence reference run
// with an fp8 cache (quantization is per value, so batching does not change it), also when the
// pool is small enough to preempt. Batch-invariant mode: by default a step of many rows sums its
// products through OpenBLAS in an order that depends on the rows and on the CPU's kernel, and an
// fp8 cache turns a last-bit difference in a k value into another e4m3 code (on an AVX-512 EPYC
// that flipped a token of request 8); there a row's sums never depend on the batch.
TEST(EngineModelFp8Kv, ServesRequestsWithTwiceTheTokensOfBf16) {
  const int64_t kv_bytes = int64_t(1) << 20;
  auto f32 = test::make_cpu_runner("llama", kv_bytes, 4);
  ModelRunnerOptions o;
  o.model_dir = test::model_fixture("llama");
  o.backend = "cpu";
  o.page_size = 4;
  o.kv_cache_bytes = kv_bytes;
  o.kv_cache_dtype = "fp8";
  o.batch_invariant = true;
  auto fp8 = ModelRunner::create(o);
  ASSERT_TRUE(f32 && fp8.is_ok()) << fp8.status().to_string();
  EXPECT_EQ((*fp8)->kv_cache_dtype(), DType::kF8E4M3);
  EXPECT_EQ((*fp8)->kv_num_pages(), 4 * f32->kv_num_pages());
  const ModelConfig& c = (*fp8)->config();
  KvCacheShape bf16{c.num_layers, c.num_kv_heads, c.head_dim, DType::kBF16, 4};
  KvMemoryRequest req;
  req.kv_cache_bytes = kv_bytes;
  EXPECT_EQ((*fp8)->kv_num_pages(), 2 * *kv_num_pages(bf16, req));

  std::vector<Request> requests = mixed(24, 5, (*fp8)->vocab_size());
  std::vector<std::vector<int32_t>> want;
  for (const Request& r : requests) {
    GenerateOptions g;
    g.max_new_tokens = *r.params.max_new_tokens;
    g.kv_dtype = DType::kF8E4M3;
    auto ids = generate((*fp8)->model(), r.prompt_ids, g);
    ASSERT_TRUE(ids.is_ok());
    want.push_back(*ids);
  }
  EngineConfig config;
  config.scheduler.max_batch_tokens = 64;
  expect_matches(run_engine(**fp8, config, requests), want);

  // A pool of a few sequences' worth: preemption recomputes into fp8 pages again.
  o.kv_cache_bytes = int64_t(160) * ((*fp8)->kv_cache_bytes() / ((*fp8)->kv_num_pages() * 4));
  auto small = ModelRunner::create(o);
  ASSERT_TRUE(small.is_ok());
  const EngineRun run = run_engine(**small, config, requests);
  expect_matches(run, want);
  EXPECT_GT(run.stats.preemptions, 0);
}

}  // namespace
}  // namespace fg
