// The prefix cache over a real model (the tiny Llama fixture, CPU backend): randomized workloads
// of shared prefixes of random lengths, duplicated prompts, staggered arrivals and a few
// cancellations, under a KV pool small enough to force eviction and preemption, give exactly the
// greedy tokens of the cache-off engine and of the model layer's generate() for each request
// alone. Every page the pool evicts from the cache is overwritten with NaN in the real KV memory,
// so a stale page ever served again would change the tokens. Page sizes 1, 4 and 16.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/generate.h"
#include "support/engine_test_util.h"

namespace fg {
namespace {

// Fills one page of every layer's K and V with NaN (all-ones bytes are a NaN in f32, f16, bf16).
void poison_page(KvCache& cache, int32_t page) {
  for (int l = 0; l < cache.num_layers(); ++l) {
    for (const Tensor* t : {&cache.layer(l).k, &cache.layer(l).v}) {
      ASSERT_EQ(t->device, Device::kCpu);
      const size_t page_bytes = t->nbytes() / size_t(cache.num_pages());
      std::memset(static_cast<char*>(t->data) + size_t(page) * page_bytes, 0xFF, page_bytes);
    }
  }
}

struct Workload {
  std::vector<Request> requests;
  std::vector<int> submit_step;
  std::vector<int> cancel_step;  // -1: never
};

Workload shared_prefix_workload(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  auto rnd = [&](int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo + 1)); };
  auto token = [&] { return int32_t(3 + rng() % uint32_t(vocab - 3)); };
  std::vector<std::vector<int32_t>> systems(3);
  for (auto& s : systems) {
    s.resize(size_t(rnd(8, 40)));
    for (int32_t& t : s) t = token();
  }
  Workload w;
  for (int i = 0; i < n; ++i) {
    Request r;
    if (i > 0 && rnd(0, 3) == 0) {
      r = w.requests[size_t(rnd(0, i - 1))];  // the same prompt again (n > 1)
    } else {
      const auto& sys = systems[size_t(rnd(0, 2))];
      const int take = rnd(0, 2) == 0 ? rnd(1, int(sys.size())) : int(sys.size());
      r.prompt_ids.assign(sys.begin(), sys.begin() + take);
      const int suffix = rnd(0, 3) == 0 ? 0 : rnd(1, 12);
      for (int j = 0; j < suffix; ++j) r.prompt_ids.push_back(token());
      r.params.temperature = 0.0f;
      r.params.max_new_tokens = rnd(1, 12);
      r.params.ignore_eos = true;
    }
    w.requests.push_back(r);
    w.submit_step.push_back(rnd(0, 24));
    w.cancel_step.push_back(rnd(0, 11) == 0 ? w.submit_step.back() + rnd(1, 4) : -1);
  }
  return w;
}

struct CacheRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
  int64_t poisoned = 0;
};

CacheRun drive(ModelRunner& runner, const EngineConfig& config, const Workload& w) {
  EngineCore core(config, runner);
  CacheRun run;
  if (PrefixCache* cache = core.prefix_cache()) {
    cache->set_eviction_hook([&](int32_t page) {
      poison_page(runner.kv_cache(), page);
      ++run.poisoned;
    });
  }
  std::vector<std::optional<RequestHandle>> handles(w.requests.size());
  size_t submitted = 0;
  for (int step = 0; step < 100000; ++step) {
    for (size_t i = 0; i < w.requests.size(); ++i) {
      if (w.submit_step[i] == step) {
        auto h = core.submit(w.requests[i]);
        EXPECT_TRUE(h.is_ok()) << h.status().to_string();
        if (h.is_ok()) handles[i] = *h;
        ++submitted;
      }
      if (w.cancel_step[i] == step && handles[i]) core.cancel(handles[i]->id);
    }
    if (!core.has_work()) {
      if (submitted == w.requests.size()) break;
      continue;
    }
    const Status st = core.step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
  }
  for (auto& h : handles) run.outputs.push_back(h ? h->wait() : RequestOutput{});
  run.stats = core.stats();
  EXPECT_EQ(run.stats.pages.held, 0) << "pages leaked";
  EXPECT_EQ(run.stats.pages.free + run.stats.pages.cached, run.stats.pages.num_pages) << "pages leaked";
  return run;
}

class PrefixCacheModel : public ::testing::TestWithParam<int> {};

TEST_P(PrefixCacheModel, SharedPrefixWorkloadMatchesCacheOffAndGenerate) {
  const int page_size = GetParam();
  // A 96-token pool, for requests of up to 52 prompt + 12 output tokens arriving together.
  auto probe = test::make_cpu_runner("llama", 1 << 20, page_size);
  ASSERT_NE(probe, nullptr);
  const int64_t bytes_per_token = probe->kv_cache_bytes() / (int64_t(probe->kv_num_pages()) * page_size);
  probe.reset();
  auto runner = test::make_cpu_runner("llama", 96 * bytes_per_token, page_size);
  ASSERT_NE(runner, nullptr);
  ASSERT_EQ(int64_t(runner->kv_num_pages()) * page_size, 96);
  const Workload w = shared_prefix_workload(32, runner->vocab_size(), 40 + uint32_t(page_size));
  const auto want = test::reference_tokens(runner->model(), w.requests);

  EngineConfig on;
  on.scheduler.max_batch_tokens = 64;
  EngineConfig off = on;
  off.enable_prefix_cache = false;
  const CacheRun with_cache = drive(*runner, on, w);
  const CacheRun without = drive(*runner, off, w);

  int compared = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestOutput& got = with_cache.outputs[i];
    if (got.finish_reason == FinishReason::kCancelled || without.outputs[i].finish_reason == FinishReason::kCancelled) {
      ASSERT_LE(got.output_ids.size(), want[i].size());
      EXPECT_TRUE(std::equal(got.output_ids.begin(), got.output_ids.end(), want[i].begin())) << "request " << i;
      continue;
    }
    EXPECT_EQ(got.output_ids, want[i]) << "request " << i << " (cache on, " << got.cached_tokens << " cached)";
    EXPECT_EQ(without.outputs[i].output_ids, want[i]) << "request " << i << " (cache off)";
    ++compared;
  }
  EXPECT_GT(compared, 20);
  const EngineStats& s = with_cache.stats;
  EXPECT_GT(s.prefix_cache_hit_tokens, 0) << "the workload was meant to share prefixes";
  EXPECT_GT(s.cached_prompt_tokens, 0);
  EXPECT_GT(s.preemptions, 0) << "the pool was meant to be small enough to force preemption";
  EXPECT_GT(with_cache.poisoned, 0) << "the pool was meant to be small enough to force eviction";
  EXPECT_LT(s.prefill_tokens, without.stats.prefill_tokens) << "the cache was meant to save prompt compute";
  EXPECT_EQ(without.stats.prefix_cache_lookups, 0);
}

// The control for the poisoning above: a poisoned page that IS served changes the output, so the
// workload test would notice a stale page.
TEST(PrefixCacheModelControl, ServingAPoisonedPageChangesTheTokens) {
  auto runner = test::make_cpu_runner("llama", 1 << 20, 4);
  ASSERT_NE(runner, nullptr);
  Request r;
  for (int i = 0; i < 21; ++i) r.prompt_ids.push_back(int32_t(3 + (i * 37) % 200));
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 8;
  r.params.ignore_eos = true;
  const auto want = test::reference_tokens(runner->model(), {r})[0];
  EngineCore core(EngineConfig{}, *runner);
  auto run = [&] {
    auto h = core.submit(r);
    EXPECT_TRUE(h.is_ok());
    while (core.has_work()) (void)core.step();
    return h->wait();
  };
  const RequestOutput first = run();
  EXPECT_EQ(first.output_ids, want);
  const RequestOutput second = run();
  EXPECT_EQ(second.cached_tokens, 20);
  EXPECT_EQ(second.output_ids, want) << "an intact cached page gives the same tokens";
  for (int32_t p = 0; p < runner->kv_num_pages(); ++p) {
    if (core.pool().is_cached(p)) poison_page(runner->kv_cache(), p);
  }
  const RequestOutput third = run();
  EXPECT_EQ(third.cached_tokens, 20);
  EXPECT_NE(third.output_ids, want) << "a poisoned page was served but the tokens did not change";
}

INSTANTIATE_TEST_SUITE_P(PageSizes, PrefixCacheModel, ::testing::Values(1, 4, 16),
                         [](const ::testing::TestParamInfo<int>& info) { return "page" + std::to_string(info.param); });

}  // namespace
}  // namespace fg
