// Helpers shared by the engine tests: mixed workloads and running them to completion on an
// EngineCore driven step by step (deterministic, single-threaded).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "fake_runner.h"

namespace fg::test {

// `n` requests with prompts of 1..max_prompt tokens and 1..max_new outputs, greedy by default.
inline std::vector<Request> mixed_requests(int n, int vocab, int max_prompt, int max_new, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = 1 + int(rng() % uint32_t(max_prompt));
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(1 + int32_t(rng() % uint32_t(vocab - 1)));
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 1 + int(rng() % uint32_t(max_new));
    out.push_back(r);
  }
  return out;
}

// log(sum of exp(x)) over a logits row, in double.
inline double log_sum_exp(const std::vector<float>& logits) {
  double mx = -INFINITY, sum = 0.0;
  for (float x : logits) mx = std::max(mx, double(x));
  for (float x : logits) sum += std::exp(double(x) - mx);
  return mx + std::log(sum);
}

struct RunResult {
  std::vector<RequestOutput> outputs;  // in request order
  EngineStats stats;
};

// Submits everything at once and steps until done (with a fake draft model of `draft_shape`).
inline RunResult run_all(const FakeModelShape& shape, const EngineConfig& config, const std::vector<Request>& requests,
                         const FakeModelShape* draft_shape = nullptr) {
  FakeRunner runner(shape);
  if (draft_shape != nullptr) runner.set_draft(std::make_unique<FakeRunner>(*draft_shape));
  EngineCore core(config, runner);
  std::vector<RequestHandle> handles;
  for (const Request& r : requests) {
    auto h = core.submit(r);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    handles.push_back(*h);
  }
  int guard = 0;
  while (core.has_work()) {
    Status st = core.step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok() || ++guard > 1000000) break;
  }
  RunResult res;
  for (const RequestHandle& h : handles) res.outputs.push_back(h.wait());
  res.stats = core.stats();
  // Pages a prefix cache keeps (refcount 0, evictable) count as returned.
  EXPECT_EQ(res.stats.pages.free + res.stats.pages.cached, shape.num_pages) << "pages leaked";
  EXPECT_EQ(res.stats.pages.held, 0) << "pages leaked";
  return res;
}

// Each request alone on a fresh engine with a roomy pool.
inline std::vector<RequestOutput> run_each_alone(const FakeModelShape& shape, const std::vector<Request>& requests) {
  FakeModelShape roomy = shape;
  roomy.num_pages = std::max(shape.num_pages, 1024);
  std::vector<RequestOutput> out;
  for (const Request& r : requests) out.push_back(run_all(roomy, EngineConfig{}, {r}).outputs[0]);
  return out;
}

inline void expect_same_tokens(const std::vector<RequestOutput>& got, const std::vector<RequestOutput>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].output_ids, want[i].output_ids) << "request " << i;
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
  }
}

}  // namespace fg::test
