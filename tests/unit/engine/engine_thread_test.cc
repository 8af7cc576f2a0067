// The threaded Engine: concurrent submit from several threads, cancellation mid-flight, stats.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine_test_util.h"

namespace fg::test {
namespace {

// A fake runner that holds the engine thread inside its forward number `hold_at` + 1 until the
// test releases it, so the test can act while requests are certainly mid-flight (the fake model
// is fast enough to finish everything before a loaded test thread gets to run otherwise).
class GatedRunner : public FakeRunner {
 public:
  GatedRunner(const FakeModelShape& shape, int64_t hold_at) : FakeRunner(shape), hold_at_(hold_at) {}
  Result<Tensor> forward(const StepMetadata& b) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++calls_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return calls_ <= hold_at_ || released_; });
    }
    return FakeRunner::forward(b);
  }
  void wait_until_held() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return calls_ > hold_at_; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  const int64_t hold_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t calls_ = 0;
  bool released_ = false;
};

TEST(Engine, CancellingHalfMidFlightLeavesThePoolFull) {
  FakeModelShape shape;
  shape.num_pages = 64;
  EngineConfig config;
  config.scheduler.max_batch_tokens = 32;
  auto owned = std::make_unique<GatedRunner>(shape, /*hold_at=*/4);
  GatedRunner* runner = owned.get();
  Engine engine(config, std::move(owned));
  auto requests = mixed_requests(64, shape.vocab, 30, 40, 21);
  std::vector<RequestHandle> handles;
  for (auto& r : requests) {
    r.params.max_new_tokens = 40;
    r.params.ignore_eos = true;
    auto h = engine.submit(r);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    handles.push_back(*h);
  }
  // After 4 steps nothing can have produced 40 tokens, and the first requests have started: the
  // engine is held inside step 5 while the odd requests are cancelled.
  runner->wait_until_held();
  EXPECT_GT(engine.stats().pages.held + engine.stats().waiting, 0);
  for (size_t i = 1; i < handles.size(); i += 2) engine.cancel(handles[i].id);
  runner->release();
  for (size_t i = 0; i < handles.size(); ++i) {
    RequestOutput out = handles[i].wait();
    if (i % 2 == 1) {
      EXPECT_EQ(out.finish_reason, FinishReason::kCancelled) << "request " << i;
    } else {
      EXPECT_EQ(out.finish_reason, FinishReason::kLength);
      EXPECT_EQ(out.output_ids.size(), 40u);
    }
  }
  // Stats are published after each step; the last one follows the last finish.
  EngineStats s;
  for (int i = 0; i < 200; ++i) {
    s = engine.stats();
    if (s.finished == 64) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.finished, 64);
  EXPECT_GT(s.cancelled, 0);
  EXPECT_EQ(s.pages.free + s.pages.cached, shape.num_pages);  // cached: prefix-cache pages
  EXPECT_EQ(s.pages.held, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_GT(s.tokens_per_second(), 0.0);
  EXPECT_GT(s.mean_step_seconds(), 0.0);
}

TEST(Engine, SubmitFromManyThreadsMatchesAlone) {
  FakeModelShape shape;
  auto requests = mixed_requests(32, shape.vocab, 20, 16, 99);
  const auto alone = run_each_alone(shape, requests);
  Engine engine(EngineConfig{}, std::make_unique<FakeRunner>(shape));
  std::vector<RequestOutput> got(requests.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < requests.size(); i += 4) {
        auto h = engine.submit(requests[i]);
        ASSERT_TRUE(h.is_ok());
        got[i] = h->wait();
      }
    });
  }
  for (auto& th : threads) th.join();
  expect_same_tokens(got, alone);
}

TEST(Engine, ShutdownCancelsWhatIsLeft) {
  FakeModelShape shape;
  auto engine = std::make_unique<Engine>(EngineConfig{}, std::make_unique<FakeRunner>(shape));
  Request r;
  r.prompt_ids = {1, 2, 3};
  r.params.max_new_tokens = 400;
  r.params.ignore_eos = true;
  auto h = engine->submit(r);
  ASSERT_TRUE(h.is_ok());
  engine.reset();
  const RequestOutput out = h->wait();
  EXPECT_TRUE(out.finish_reason == FinishReason::kCancelled || out.finish_reason == FinishReason::kLength);
}

}  // namespace
}  // namespace fg::test
