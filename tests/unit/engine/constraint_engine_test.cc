// Constrained generation through the engine (engine/token_constraint.h) on the fake model, with a
// constraint that is a small state machine: any even token (never eos) while free; after a token
// divisible by 6 the next two tokens are forced (the next two even tokens, wrapping to 2); after 12 tokens
// only eos. Checks that every output obeys it, that jump-forward gives exactly the tokens that
// sampling the forced ones one step at a time gives (greedy and seeded), in fewer steps, that
// masks reach the logits both on the device path and on the host path (penalties, logprobs), and
// that a constrained request never speculates.
#include <gtest/gtest.h>

#include <deque>

#include "engine_test_util.h"

namespace fg::test {
namespace {

class EvenConstraint final : public TokenConstraint {
 public:
  explicit EvenConstraint(int vocab) : vocab_(vocab) {}
  void fill_mask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    auto allow = [&](int t) { words[size_t(t) >> 5] |= 1u << (t & 31); };
    if (count_ >= kLength) {
      allow(0);  // eos
    } else if (!queue_.empty()) {
      allow(queue_.front());
    } else {
      for (int t = 2; t < vocab_; t += 2) allow(t);
    }
  }
  bool accept(int32_t token) override {
    if (count_ >= kLength) return token == 0;
    if (!queue_.empty()) {
      if (token != queue_.front()) return false;
      queue_.pop_front();
    } else if (token == 0 || token % 2 != 0) {
      return false;
    }
    ++count_;
    if (queue_.empty() && token % 6 == 0 && count_ < kLength - 2) {
      auto next_even = [&](int t) { return t + 2 < vocab_ ? t + 2 : 2; };
      queue_.push_back(next_even(token));
      queue_.push_back(next_even(queue_.back()));
    }
    return true;
  }
  void forced_tokens(std::vector<int32_t>& out) override {
    while (!queue_.empty() && count_ < kLength) {
      const int32_t t = queue_.front();
      EXPECT_TRUE(accept(t));
      out.push_back(t);
    }
  }
  static constexpr int kLength = 12;

 private:
  int vocab_;
  int count_ = 0;
  std::deque<int32_t> queue_;
};

std::vector<Request> constrained_requests(int n, int vocab, bool jump_forward, float temperature) {
  auto requests = mixed_requests(n, vocab, 20, 1, 3);
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    r.params.max_new_tokens = 40;
    r.params.temperature = temperature;
    r.params.seed = 7 + i;
    r.constraint = std::make_shared<EvenConstraint>(vocab);
    r.jump_forward = jump_forward;
  }
  return requests;
}

void expect_obeys(const std::vector<RequestOutput>& outs) {
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& ids = outs[i].output_ids;
    ASSERT_EQ(outs[i].finish_reason, FinishReason::kEos) << "request " << i;
    ASSERT_EQ(int(ids.size()), EvenConstraint::kLength + 1) << "request " << i;
    for (size_t j = 0; j + 1 < ids.size(); ++j) EXPECT_TRUE(ids[j] > 0 && ids[j] % 2 == 0) << i << ":" << j;
    EXPECT_EQ(ids.back(), 0);
  }
}

TEST(ConstraintEngine, JumpForwardGivesTheSameTokensInFewerSteps) {
  FakeModelShape shape;
  for (float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const RunResult plain = run_all(shape, EngineConfig{}, constrained_requests(16, shape.vocab, false, temperature));
    const RunResult jump = run_all(shape, EngineConfig{}, constrained_requests(16, shape.vocab, true, temperature));
    expect_obeys(plain.outputs);
    expect_same_tokens(jump.outputs, plain.outputs);
    EXPECT_EQ(plain.stats.jump_forward_tokens, 0);
    EXPECT_GT(jump.stats.jump_forward_tokens, 0);
    EXPECT_EQ(jump.stats.generated_tokens, plain.stats.generated_tokens);
    // Each request alone: forced tokens run as one query, so it needs fewer steps.
    int64_t steps_plain = 0, steps_jump = 0;
    const auto alone_plain = constrained_requests(16, shape.vocab, false, temperature);
    const auto alone_jump = constrained_requests(16, shape.vocab, true, temperature);
    for (size_t i = 0; i < alone_plain.size(); ++i) {
      steps_plain += run_all(shape, EngineConfig{}, {alone_plain[i]}).stats.steps;
      steps_jump += run_all(shape, EngineConfig{}, {alone_jump[i]}).stats.steps;
    }
    EXPECT_EQ(steps_plain - steps_jump, jump.stats.jump_forward_tokens) << "one step saved per forced token";
  }
}

TEST(ConstraintEngine, MasksApplyOnTheHostPathToo) {
  FakeModelShape shape;
  auto requests = constrained_requests(8, shape.vocab, true, 0.0f);
  auto with_host = requests;
  for (size_t i = 0; i < with_host.size(); ++i) {
    with_host[i].constraint = std::make_shared<EvenConstraint>(shape.vocab);
    with_host[i].params.logprobs = 2;  // forces the host copy of the logits
  }
  const RunResult device = run_all(shape, EngineConfig{}, requests);
  const RunResult host = run_all(shape, EngineConfig{}, with_host);
  expect_same_tokens(host.outputs, device.outputs);
  for (const auto& o : host.outputs) {
    ASSERT_FALSE(o.logprobs.empty());
    for (const auto& top : o.top_logprobs)
      for (const auto& c : top) EXPECT_TRUE(c.id == 0 || c.id % 2 == 0) << "a masked token in the top logprobs";
  }
  // With penalties as well (penalised rows are rewritten on the host, then masked).
  for (auto& r : with_host) {
    r.constraint = std::make_shared<EvenConstraint>(shape.vocab);
    r.params.repetition_penalty = 1.3f;
  }
  expect_obeys(run_all(shape, EngineConfig{}, with_host).outputs);
}

TEST(ConstraintEngine, ConstrainedRequestsNeverSpeculate) {
  FakeModelShape shape;
  EngineConfig c;
  c.spec.method = SpecMethod::kNgram;
  c.spec.ngram = {1, 3};
  const RunResult run = run_all(shape, c, constrained_requests(8, shape.vocab, true, 0.0f));
  expect_obeys(run.outputs);
  EXPECT_EQ(run.stats.spec.draft_tokens, 0);
}

}  // namespace
}  // namespace fg::test
