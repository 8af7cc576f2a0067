// The engine over the newer families' fixture models (CPU backend): Gemma 2 and 3 (local/global
// layers, soft-capping), Phi-3 (LongRoPE switching past 32 tokens, a window on every layer),
// Mixtral and Qwen3-MoE (routed experts), and Mistral (a window on every layer). Crowds with
// shared prompt heads, chunked prefill, a pool small enough to preempt, and the prefix cache on:
// every request's tokens must equal the model layer's generate() for it alone. With a window on
// every layer the engine releases the pages behind it, so a long generation runs in a bounded
// number of pages.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "support/engine_test_util.h"

namespace fg {
namespace {

using test::EngineRun;
using test::run_engine;

// Prompts of 1..48 tokens (past Phi-3's LongRoPE switch at 32), every other one after a shared
// 20-token head, greedy, 1..20 new tokens.
std::vector<Request> crowd(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> head;
  for (int j = 0; j < 20; ++j) head.push_back(int32_t(3 + rng() % uint32_t(vocab - 3)));
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    if (i % 2 == 0) r.prompt_ids = head;
    const int len = 1 + int(rng() % 28);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(3 + rng() % uint32_t(vocab - 3)));
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 1 + int(rng() % 20);
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

class FamilyEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyEngine, CrowdsWithPrefixCacheAndPreemptionMatchEachAlone) {
  // Bytes of one token's K/V in every layer, from a probe runner.
  auto probe = test::make_cpu_runner(GetParam(), 1 << 20, 4);
  ASSERT_NE(probe, nullptr);
  const int64_t per_token = probe->kv_cache_bytes() / (int64_t(probe->kv_num_pages()) * probe->kv_page_size());
  auto runner = test::make_cpu_runner(GetParam(), 24 * 4 * per_token, 4);  // 24 pages of 4 tokens
  ASSERT_NE(runner, nullptr);
  const std::vector<Request> requests = crowd(24, runner->vocab_size(), 29);
  const auto want = test::reference_tokens(runner->model(), requests);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 16;  // prompts are prefilled in chunks
  const EngineRun run = run_engine(*runner, config, requests);
  ASSERT_EQ(run.outputs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(run.outputs[i].output_ids, want[i]) << "request " << i;
  EXPECT_GT(run.stats.prefix_cache_hit_tokens, 0);
  // Mistral's window of 8 on every layer keeps so few pages per sequence that this pool suffices.
  if (runner->kv_window() == 0 || runner->kv_window() > 8) {
    EXPECT_GT(run.stats.preemptions, 0) << "the pool was meant to be small enough to preempt";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyEngine,
                         ::testing::Values("gemma2", "gemma3", "phi3", "mixtral", "qwen3_moe", "mistral"));

TEST(FamilyEngineWindow, EveryLayerWindowedReleasesPagesBehindTheWindow) {
  // Mistral's fixture: window 8 on both layers. 120 tokens through a pool of 16 pages of 4.
  auto probe = test::make_cpu_runner("mistral", 1 << 20, 4);
  ASSERT_NE(probe, nullptr);
  ASSERT_EQ(probe->kv_window(), 8);
  const int64_t per_token = probe->kv_cache_bytes() / (int64_t(probe->kv_num_pages()) * probe->kv_page_size());
  auto runner = test::make_cpu_runner("mistral", 16 * 4 * per_token, 4);
  ASSERT_NE(runner, nullptr);
  Request r;
  for (int i = 0; i < 20; ++i) r.prompt_ids.push_back(3 + (i * 37) % 250);
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 100;
  r.params.ignore_eos = true;
  const auto want = test::reference_tokens(runner->model(), {r});
  EngineConfig config;
  config.scheduler.max_batch_tokens = 8;
  const EngineRun run = run_engine(*runner, config, {r});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].output_ids, want[0]);
  EXPECT_LE(run.stats.pages.peak_held, (8 + 8) / 4 + 3);
  // Gemma 2 has global layers: nothing may be released early.
  auto gemma = test::make_cpu_runner("gemma2", 1 << 20, 4);
  ASSERT_NE(gemma, nullptr);
  EXPECT_EQ(gemma->kv_window(), 0);
}

TEST(FamilyEngineLongRope, PromptsPastTheSwitchNeverSharePagesWithShortOnes) {
  // Phi-3's fixture switches to the long table past 32 tokens: a 40-token prompt rotates all its
  // keys with it, a 24-token prompt with the same first 20 tokens does not, so they must not share
  // cached pages (and each must match generate() alone).
  auto runner = test::make_cpu_runner("phi3", 1 << 22, 4);
  ASSERT_NE(runner, nullptr);
  EXPECT_EQ(runner->kv_variant(24), 0u);
  EXPECT_NE(runner->kv_variant(40), 0u);
  std::vector<Request> requests(3);
  for (int i = 0; i < 40; ++i) requests[0].prompt_ids.push_back(3 + (i * 11) % 250);
  requests[1].prompt_ids.assign(requests[0].prompt_ids.begin(), requests[0].prompt_ids.begin() + 24);
  requests[2].prompt_ids = requests[0].prompt_ids;
  requests[2].prompt_ids.push_back(9);
  for (Request& r : requests) {
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 12;
    r.params.ignore_eos = true;
  }
  const auto want = test::reference_tokens(runner->model(), requests);
  EngineCore core(EngineConfig{}, *runner);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto h = core.submit(requests[i]);
    ASSERT_TRUE(h.is_ok());
    while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
    const RequestOutput out = h->wait();
    EXPECT_EQ(out.output_ids, want[i]) << "request " << i;
    // The short prompt finds nothing of the long one's pages; the longer long one finds them all.
    if (i == 1) {
      EXPECT_EQ(out.cached_tokens, 0);
    } else if (i == 2) {
      EXPECT_EQ(out.cached_tokens, 40);
    }
  }
}

}  // namespace
}  // namespace fg
