// EngineBackend (the engine behind `flashgen serve`) on the fixture Llama with the fixture
// tokenizer, on the CPU: its event pump sleeps while nothing happens and wakes per engine event
// (never polls), the /metrics batch-size histogram records each engine step's batch once, a stop
// string's final event carries the last token (and min_new_tokens holds stop strings back), and
// max_new_tokens 0 finishes at once.
#include "server/engine_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace fg::server {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EngineBackend> make_backend() {
  EngineBackendOptions o;
  o.runner.model_dir = std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/llama";
  o.runner.backend = "cpu";
  o.runner.kv_cache_bytes = 4 << 20;
  o.tokenizer_dir = std::string(FG_SOURCE_DIR) + "/tests/fixtures/server_tokenizer";
  auto b = EngineBackend::create(o);
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(b).value() : nullptr;
}

// The events of several requests, gathered from the backend's callbacks.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<GenerationEvent>> events;
  int finished = 0;

  EventCallback callback(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (events.size() <= i) events.resize(i + 1);
    return [this, i](GenerationEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      finished += ev.finished();
      events[i].push_back(std::move(ev));
      cv.notify_all();
    };
  }
  bool wait_finished(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 60s, [&] { return finished >= n; });
  }
  std::string text(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    std::string t;
    for (const GenerationEvent& e : events[i]) t += e.text_delta;
    return t;
  }
};

GenerationRequest request(std::vector<int32_t> prompt, int32_t max_new_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.max_new_tokens = max_new_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// Waits until the engine has nothing running or waiting (its stats are taken after each step).
void wait_engine_idle(EngineBackend& b) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    const BackendStats s = b.stats();
    if (s.running == 0 && s.waiting == 0) return;
    std::this_thread::sleep_for(5ms);
  }
  FAIL() << "the engine did not go idle";
}

TEST(EngineBackend, PumpSleepsWhenIdleAndWakesPerEvent) {
  auto b = make_backend();
  ASSERT_NE(b, nullptr);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(b->pump_wakeups(), 0u) << "the pump woke up with no request";

  Collector c;
  const int32_t lengths[] = {6, 9, 12};
  int32_t total = 0;
  for (size_t i = 0; i < 3; ++i) {
    auto h = b->submit(request({1, 20 + int32_t(i), 30, 40}, lengths[i]), c.callback(i));
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    total += lengths[i];
  }
  ASSERT_TRUE(c.wait_finished(3));
  // A mark that lands while the pump is already draining costs one more (empty) wake-up after the
  // last delivery; let it settle before counting.
  std::this_thread::sleep_for(50ms);
  // One engine event per token (the last one carries the finish); each marks the ready queue at
  // most once, so a pump that never polls wakes at most that often.
  const uint64_t woken = b->pump_wakeups();
  EXPECT_GE(woken, 1u);
  EXPECT_LE(woken, uint64_t(total));
  int64_t tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    for (const GenerationEvent& e : c.events[i]) tokens += int64_t(e.tokens.size());
    EXPECT_EQ(c.events[i].back().finish, FinishReason::kLength);
    EXPECT_FALSE(c.events[i].back().tokens.empty()) << "the last token and the finish arrive together";
  }
  EXPECT_EQ(tokens, total);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(b->pump_wakeups(), woken) << "the pump kept waking with nothing to deliver";
}

TEST(EngineBackend, BatchSizeHistogramCountsEachStepOnce) {
  auto b = make_backend();
  ASSERT_NE(b, nullptr);
  Collector c;
  const int32_t lengths[] = {5, 8, 11, 3};
  int32_t total = 0;
  for (size_t i = 0; i < 4; ++i) {
    auto h = b->submit(request({1, 50 + int32_t(i), 60}, lengths[i]), c.callback(i));
    ASSERT_TRUE(h.is_ok());
    total += lengths[i];
  }
  ASSERT_TRUE(c.wait_finished(4));
  wait_engine_idle(*b);
  BackendStats s = b->stats();
  // Short prompts, a roomy pool: every request is in exactly one step per output token, so the
  // step batch sizes add up to the tokens generated, over exactly `steps` observations.
  EXPECT_EQ(int64_t(s.batch_size.count), s.steps);
  EXPECT_DOUBLE_EQ(s.batch_size.sum, double(total));

  // One request alone: one more observation of batch size 1 per token.
  const uint64_t ones = s.batch_size.counts[0];
  ASSERT_TRUE(b->submit(request({1, 2, 3}, 7), c.callback(4)).is_ok());
  ASSERT_TRUE(c.wait_finished(5));
  wait_engine_idle(*b);
  const BackendStats s2 = b->stats();
  EXPECT_EQ(s2.batch_size.upper_bounds[0], 1.0);
  EXPECT_EQ(s2.batch_size.counts[0], ones + 7);
  EXPECT_EQ(int64_t(s2.batch_size.count), s2.steps);
  EXPECT_EQ(s2.steps, s.steps + 7);
}

TEST(EngineBackend, StopStringEndsWithTheLastTokenAndFreesPages) {
  auto b = make_backend();
  ASSERT_NE(b, nullptr);
  Collector c;
  const std::vector<int32_t> prompt = {1, 70, 71, 72};
  ASSERT_TRUE(b->submit(request(prompt, 16), c.callback(0)).is_ok());
  ASSERT_TRUE(c.wait_finished(1));
  const std::string full = c.text(0);
  ASSERT_GE(full.size(), 6u) << "the fixture model should say something in 16 tokens";
  // A stop string from the middle of that text (greedy, so the same text comes again).
  const std::string stop = full.substr(full.size() / 2, 2);
  const std::string before = full.substr(0, full.find(stop));
  GenerationRequest r = request(prompt, 16);
  r.sampling.stop = {stop};
  ASSERT_TRUE(b->submit(std::move(r), c.callback(1)).is_ok());
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.text(1), before);
  const GenerationEvent& last = c.events[1].back();
  EXPECT_EQ(last.finish, FinishReason::kStopString);
  EXPECT_EQ(last.stop_string, stop);
  EXPECT_FALSE(last.tokens.empty()) << "the token that completed the stop string arrives with the finish";
  wait_engine_idle(*b);
  EXPECT_EQ(b->stats().kv_pages_used, 0);
  // With min_new_tokens stop strings are looked for only in the text after those tokens: all 16.
  GenerationRequest held = request(prompt, 16);
  held.sampling.stop = {stop};
  held.sampling.min_new_tokens = 16;
  ASSERT_TRUE(b->submit(std::move(held), c.callback(2)).is_ok());
  ASSERT_TRUE(c.wait_finished(3));
  EXPECT_EQ(c.text(2), full);
  EXPECT_EQ(c.events[2].back().finish, FinishReason::kLength);
  EXPECT_EQ(c.events[2].back().generated_tokens, 16);
}

TEST(EngineBackend, ZeroMaxNewTokensFinishesAtOnce) {
  auto b = make_backend();
  ASSERT_NE(b, nullptr);
  Collector c;
  ASSERT_TRUE(b->submit(request({1, 2, 3}, 0), c.callback(0)).is_ok());
  ASSERT_TRUE(c.wait_finished(1));
  ASSERT_EQ(c.events[0].size(), 1u);
  EXPECT_EQ(c.events[0][0].finish, FinishReason::kLength);
  EXPECT_TRUE(c.events[0][0].tokens.empty());
  EXPECT_EQ(c.events[0][0].prompt_tokens, 3);
  EXPECT_EQ(b->stats().steps, 0);
}

}  // namespace
}  // namespace fg::server
