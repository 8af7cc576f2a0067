// How the engine hands results to its consumers: a ReadyQueue wakes a consumer that serves many
// requests only when one of them has events (no polling), the last token travels in the
// finishing event, max_new_tokens 0 finishes at once, and on_step reports every step's batch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine_test_util.h"

namespace fg::test {
namespace {

using namespace std::chrono_literals;

TEST(ReadyQueue, WaitSleepsUntilMarkedAndCloseEndsIt) {
  ReadyQueue q;
  std::vector<uint64_t> got;
  std::atomic<bool> saw_last{false};
  std::thread consumer([&] {
    std::vector<uint64_t> ids;
    while (q.wait(ids)) {
      got.insert(got.end(), ids.begin(), ids.end());
      if (!got.empty() && got.back() == 9u) saw_last = true;
      ids.clear();
    }
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(q.wakeups(), 0u) << "the consumer woke up with nothing marked";
  q.mark(7);
  q.mark(9);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  // The consumer may wake between the two marks (it then takes 7, and 9 on its next wait).
  while (!saw_last && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  q.close();
  consumer.join();
  ASSERT_GE(got.size(), 1u);
  EXPECT_EQ(got.front(), 7u);
  EXPECT_EQ(got.back(), 9u);
}

// Every request of a thread-run engine reports to one queue; one consumer drains them.
TEST(Engine, ConsumerIsWokenPerEventAndSleepsWhenIdle) {
  FakeModelShape shape;
  EngineConfig config;
  std::atomic<int64_t> steps{0}, batch_sum{0};
  config.on_step = [&](const StepSummary& s) {
    EXPECT_EQ(s.step, steps.load() + 1);
    ++steps;
    batch_sum += s.num_seqs;
  };
  Engine engine(config, std::make_unique<FakeRunner>(shape));
  auto ready = std::make_shared<ReadyQueue>();
  auto requests = mixed_requests(6, shape.vocab, 20, 12, 3);
  int64_t want_tokens = 0;
  std::vector<RequestHandle> handles;
  for (Request& r : requests) {
    r.params.ignore_eos = true;
    want_tokens += *r.params.max_new_tokens;
    r.ready = ready;
    auto h = engine.submit(r);
    ASSERT_TRUE(h.is_ok());
    handles.push_back(*h);
  }
  int64_t events = 0, tokens = 0, finished = 0;
  std::vector<uint64_t> ids;
  while (finished < int64_t(handles.size()) && ready->wait(ids)) {
    for (uint64_t id : ids) {
      for (const RequestHandle& h : handles) {
        if (h.id != id) continue;
        while (auto e = h.events->try_next()) {
          ++events;
          tokens += e->token.has_value();
          if (e->finish) {
            ++finished;
            EXPECT_EQ(*e->finish, FinishReason::kLength);
            EXPECT_TRUE(e->token.has_value()) << "the last token travels in the finishing event";
          }
        }
      }
    }
    ids.clear();
  }
  EXPECT_EQ(finished, int64_t(handles.size()));
  EXPECT_EQ(tokens, want_tokens);
  EXPECT_EQ(events, want_tokens) << "one event per token, the finish included";
  EXPECT_LE(ready->wakeups(), uint64_t(events)) << "woken more often than there were events";
  // A stream marks the queue just after it pushes, so the consumer can take an event before the
  // mark for it lands: stale marks may remain. Stop the producer, then drain them with a mark of
  // our own before checking that an idle consumer sleeps.
  engine.shutdown();
  ready->mark(0);
  ASSERT_TRUE(ready->wait(ids));
  ids.clear();
  // Idle: nothing is marked, so nothing wakes a waiting consumer.
  const uint64_t before = ready->wakeups();
  std::thread idle([&] { ready->wait(ids); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ready->wakeups(), before);
  ready->close();
  idle.join();
  // on_step saw every step, each with its batch: without chunking or preemption a request is in
  // one step per output token.
  EXPECT_EQ(steps.load(), engine.stats().steps);
  EXPECT_EQ(batch_sum.load(), want_tokens);
}

TEST(EngineCore, ZeroMaxNewTokensFinishesAtOnceWithoutAStep) {
  FakeModelShape shape;
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  Request r;
  r.prompt_ids = {1, 2, 3};
  r.params.max_new_tokens = 0;
  auto h = core.submit(r);
  ASSERT_TRUE(h.is_ok());
  EXPECT_FALSE(core.has_work());
  const RequestOutput out = h->wait();
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(out.output_ids.empty());
  EXPECT_EQ(core.stats().steps, 0);
  EXPECT_EQ(core.stats().finished, 1);
}

TEST(EngineCore, MaxNewTokensCountsOutputTokensOnly) {
  FakeModelShape shape;
  Request r;
  r.prompt_ids = {1, 2, 3, 4, 5, 6, 7};
  r.params.max_new_tokens = 3;
  r.params.ignore_eos = true;
  const RunResult res = run_all(shape, EngineConfig{}, {r});
  EXPECT_EQ(res.outputs[0].output_ids.size(), 3u);
  // Over the context: refused at submit, naming max_new_tokens.
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  r.params.max_new_tokens = shape.max_model_len - 6;
  auto h = core.submit(r);
  ASSERT_FALSE(h.is_ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kContextTooLong);
  EXPECT_NE(h.status().message().find("max_new_tokens"), std::string::npos);
  r.params.max_new_tokens = shape.max_model_len - 7;
  EXPECT_TRUE(core.submit(r).is_ok());
}

}  // namespace
}  // namespace fg::test
