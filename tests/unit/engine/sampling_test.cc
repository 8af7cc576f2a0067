// Seeded sampling is a function of (seed, output position, logits) only; penalties, logit biases
// and logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "engine_test_util.h"

namespace fg::test {
namespace {

Request sampled_request(uint64_t seed) {
  Request r;
  r.prompt_ids = {3, 1, 4, 1, 5, 9, 2, 6};
  r.params.temperature = 0.9f;
  r.params.top_k = 20;
  r.params.top_p = 0.95f;
  r.params.min_p = 0.01f;
  r.params.seed = seed;
  r.params.max_new_tokens = 24;
  r.params.ignore_eos = true;
  return r;
}

TEST(EngineSampling, SeededSamplingIgnoresBatchComposition) {
  FakeModelShape shape;
  const Request probe = sampled_request(42);
  const RequestOutput alone = run_all(shape, EngineConfig{}, {probe}).outputs[0];
  ASSERT_EQ(alone.output_ids.size(), 24u);

  // The same request among other sampled and greedy requests, with chunking and a small pool.
  auto crowd = mixed_requests(30, shape.vocab, 30, 20, 5);
  for (size_t i = 0; i < crowd.size(); i += 2) crowd[i] = sampled_request(1000 + i);
  crowd.insert(crowd.begin() + 13, probe);
  FakeModelShape tight = shape;
  tight.num_pages = 20;
  EngineConfig config;
  config.scheduler.max_batch_tokens = 24;
  const RunResult together = run_all(tight, config, crowd);
  EXPECT_EQ(together.outputs[13].output_ids, alone.output_ids);
  EXPECT_GT(together.stats.preemptions, 0);

  // Another seed gives another continuation; no seed picks one per request.
  const RequestOutput other = run_all(shape, EngineConfig{}, {sampled_request(43)}).outputs[0];
  EXPECT_NE(other.output_ids, alone.output_ids);
}

TEST(EngineSampling, FrequencyPenaltyForbidsRepeats) {
  FakeModelShape shape;
  Request r;
  r.prompt_ids = {7};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 40;
  r.params.ignore_eos = true;
  const RequestOutput plain = run_all(shape, EngineConfig{}, {r}).outputs[0];
  std::set<int32_t> distinct(plain.output_ids.begin(), plain.output_ids.end());
  ASSERT_LT(distinct.size(), plain.output_ids.size()) << "the fake model should repeat itself unpenalised";
  r.params.frequency_penalty = 100.0f;
  const RequestOutput penalised = run_all(shape, EngineConfig{}, {r}).outputs[0];
  distinct = std::set<int32_t>(penalised.output_ids.begin(), penalised.output_ids.end());
  EXPECT_EQ(distinct.size(), penalised.output_ids.size());
}

TEST(EngineSampling, RepetitionPenaltyAvoidsPromptTokens) {
  FakeModelShape shape;
  Request r;
  for (int32_t t = 1; t < 40; ++t) r.prompt_ids.push_back(t);  // most of the vocabulary
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 1;
  r.params.ignore_eos = true;
  r.params.repetition_penalty = 1000.0f;  // logits are positive: divided down to ~0
  const RequestOutput out = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(out.output_ids.size(), 1u);
  EXPECT_TRUE(out.output_ids[0] == 0 || out.output_ids[0] >= 40) << out.output_ids[0];
}

TEST(EngineSampling, LogitBiasForcesAndBansTokens) {
  FakeModelShape shape;
  Request r;
  r.prompt_ids = {7, 2, 9};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 12;
  r.params.ignore_eos = true;
  const RequestOutput plain = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(plain.output_ids.size(), 12u);
  // A token greedy decoding never picks, forced by +100 (the fake logits span 6): every token.
  int32_t absent = 1;
  while (std::find(plain.output_ids.begin(), plain.output_ids.end(), absent) != plain.output_ids.end()) ++absent;
  r.params.logit_bias = {{absent, 100.0f}};
  const RequestOutput forced = run_all(shape, EngineConfig{}, {r}).outputs[0];
  EXPECT_EQ(forced.output_ids, std::vector<int32_t>(12, absent));
  // Every token greedy decoding picked, banned by -100: none of them appears again.
  r.params.logit_bias.clear();
  const std::set<int32_t> picked(plain.output_ids.begin(), plain.output_ids.end());
  for (int32_t t : picked) r.params.logit_bias.emplace_back(t, -100.0f);
  const RequestOutput banned = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(banned.output_ids.size(), 12u);
  for (int32_t t : banned.output_ids) EXPECT_EQ(picked.count(t), 0u) << t;
  // Sampled requests see the bias too.
  Request s = sampled_request(7);
  s.params.logit_bias = {{absent, 100.0f}};
  EXPECT_EQ(run_all(shape, EngineConfig{}, {s}).outputs[0].output_ids, std::vector<int32_t>(24, absent));
}

// min_new_tokens: the model's eos and the request's stop ids are masked out of the first tokens'
// rows (eos only without ignore_eos), so nothing but the length ends the request before them.
TEST(EngineSampling, MinNewTokensMasksEndsUntilReached) {
  FakeModelShape shape;
  shape.eos_bias = 100.0f;  // eos wins every row it is allowed in
  Request r;
  r.prompt_ids = {7, 2, 9};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 12;
  const RequestOutput plain = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(plain.output_ids, std::vector<int32_t>{0});
  r.params.min_new_tokens = 5;
  const RequestOutput held = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(held.output_ids.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NE(held.output_ids[i], 0) << i;
  EXPECT_EQ(held.output_ids[5], 0);
  EXPECT_EQ(held.finish_reason, FinishReason::kEos);
  // Sampled rows too, with a seed.
  Request s = sampled_request(11);
  s.params.ignore_eos = false;
  s.params.min_new_tokens = 7;
  const RequestOutput sampled = run_all(shape, EngineConfig{}, {s}).outputs[0];
  ASSERT_EQ(sampled.output_ids.size(), 8u);
  EXPECT_EQ(std::count(sampled.output_ids.begin(), sampled.output_ids.end(), 0), 1);
  // With ignore_eos the eos token is an ordinary one and stays allowed.
  r.params.ignore_eos = true;
  r.params.min_new_tokens = 3;
  r.params.max_new_tokens = 4;
  EXPECT_EQ(run_all(shape, EngineConfig{}, {r}).outputs[0].output_ids, std::vector<int32_t>(4, 0));
  // Stop ids are masked the same way: the first greedy token (without eos) as a stop id.
  shape.eos_bias = 0.0f;
  r.params.ignore_eos = true;
  r.params.min_new_tokens = 0;
  r.params.max_new_tokens = 12;
  const RequestOutput free_run = run_all(shape, EngineConfig{}, {r}).outputs[0];
  r.params.stop_token_ids = {free_run.output_ids[0]};
  EXPECT_EQ(run_all(shape, EngineConfig{}, {r}).outputs[0].output_ids.size(), 1u);
  r.params.min_new_tokens = 4;
  const RequestOutput later = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_GE(later.output_ids.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(later.output_ids[i], free_run.output_ids[0]) << i;
  if (later.finish_reason == FinishReason::kStopToken) {
    EXPECT_EQ(later.output_ids.back(), free_run.output_ids[0]);
  }
}

TEST(EngineSampling, LogprobsAreANormalisedTopList) {
  FakeModelShape shape;
  Request r;
  r.prompt_ids = {2, 7, 1};
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = 6;
  r.params.ignore_eos = true;
  r.params.logprobs = 5;
  const RequestOutput out = run_all(shape, EngineConfig{}, {r}).outputs[0];
  ASSERT_EQ(out.logprobs.size(), 6u);
  ASSERT_EQ(out.top_logprobs.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const auto& top = out.top_logprobs[i];
    ASSERT_EQ(top.size(), 5u);
    EXPECT_EQ(top[0].id, out.output_ids[i]) << "greedy picks the most likely token";
    EXPECT_FLOAT_EQ(top[0].logprob, out.logprobs[i]);
    for (size_t j = 1; j < top.size(); ++j) EXPECT_GE(top[j - 1].logprob, top[j].logprob);
    EXPECT_LT(out.logprobs[i], 0.0f);
    // The fake logits are 6 * U[0, 1): the top token's probability is at least 1/vocab.
    EXPECT_GT(out.logprobs[i], std::log(1.0f / float(shape.vocab)));
  }
  r.params.logprobs = -1;
  const RequestOutput none = run_all(shape, EngineConfig{}, {r}).outputs[0];
  EXPECT_TRUE(none.logprobs.empty());
  EXPECT_EQ(none.output_ids, out.output_ids);
}

// Every prompt token's logprob (from the second on) is the model's log-softmax at it, with the top
// n, whatever the chunking (a prompt's chunks are at most kPromptLogprobsChunk tokens), the prefix
// cache (whose pages such a request must not reuse), preemption or max_new_tokens 0; the outputs
// are those without prompt logprobs.
TEST(EngineSampling, PromptLogprobsAreTheModelsOwn) {
  FakeModelShape shape;
  std::vector<Request> requests = mixed_requests(10, shape.vocab, 400, 6, 21);
  requests[0].prompt_ids.resize(std::max<size_t>(requests[0].prompt_ids.size(), 300), 5);
  requests[5].prompt_ids = requests[0].prompt_ids;  // the prefix cache would serve these
  requests[5].prompt_ids.push_back(3);
  requests[7].prompt_ids = requests[0].prompt_ids;
  const RunResult plain = run_all(shape, EngineConfig{}, requests);
  EXPECT_GT(plain.stats.prefix_cache_hit_tokens, 0);
  EXPECT_TRUE(plain.outputs[0].prompt_logprobs.empty());
  for (Request& r : requests) r.params.prompt_logprobs = 2;
  requests[3].params.max_new_tokens = 0;
  std::vector<float> logits(static_cast<size_t>(shape.vocab));
  for (const int pages : {256, 120}) {  // 120 pages of 4 tokens: preemption
    SCOPED_TRACE("pages " + std::to_string(pages));
    FakeModelShape s = shape;
    s.num_pages = pages;
    EngineConfig config;
    config.scheduler.max_batch_tokens = 300;
    const RunResult run = run_all(s, config, requests);
    if (pages == 120) {
      EXPECT_GT(run.stats.preemptions, 0);
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const RequestOutput& o = run.outputs[i];
      const std::vector<int32_t>& prompt = requests[i].prompt_ids;
      if (i == 3) {
        EXPECT_TRUE(o.output_ids.empty());
        EXPECT_EQ(o.finish_reason, FinishReason::kLength);
      } else {
        EXPECT_EQ(o.output_ids, plain.outputs[i].output_ids) << "request " << i;
      }
      ASSERT_EQ(o.prompt_logprobs.size(), prompt.size() - 1) << "request " << i;
      for (size_t p = 1; p < prompt.size(); ++p) {
        fake_logits(shape, std::vector<int32_t>(prompt.begin(), prompt.begin() + ptrdiff_t(p)), logits.data());
        const double lse = log_sum_exp(logits);
        const double mx = *std::max_element(logits.begin(), logits.end());
        const PromptLogprob& lp = o.prompt_logprobs[p - 1];
        EXPECT_EQ(lp.id, prompt[p]);
        EXPECT_NEAR(lp.logprob, double(logits[size_t(prompt[p])]) - lse, 1e-5) << "request " << i << " position " << p;
        ASSERT_EQ(lp.top.size(), 2u);
        EXPECT_EQ(lp.top[0].id, int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        EXPECT_NEAR(lp.top[0].logprob, mx - lse, 1e-5);
      }
    }
  }
}

TEST(EngineSampling, ParamsAreValidated) {
  FakeModelShape shape;
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  Request r;
  r.prompt_ids = {1};
  r.params.top_p = 0.0f;
  EXPECT_EQ(core.submit(r).status().code(), ErrorCode::kInvalidArgument);
  r.params.top_p = 1.0f;
  r.params.temperature = -1.0f;
  EXPECT_EQ(core.submit(r).status().code(), ErrorCode::kInvalidArgument);
  r.params.temperature = 1.0f;
  r.params.stop_token_ids = {shape.vocab};
  EXPECT_NE(core.submit(r).status().message().find("stop token id"), std::string::npos);
  r.params.stop_token_ids.clear();
  for (const auto& bias : std::vector<std::vector<std::pair<int32_t, float>>>{
           {{shape.vocab, 1.0f}}, {{-1, 1.0f}}, {{3, 100.5f}}, {{3, -101.0f}}, {{3, NAN}}, {{3, 1.0f}, {3, 2.0f}}}) {
    r.params.logit_bias = bias;
    const Status st = core.submit(r).status();
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("logit_bias"), std::string::npos) << st.message();
  }
  r.params.logit_bias = {{0, -100.0f}, {shape.vocab - 1, 100.0f}};
  EXPECT_TRUE(core.submit(r).is_ok());
  r.params.max_new_tokens = 4;
  r.params.min_new_tokens = 5;
  EXPECT_NE(core.submit(r).status().message().find("min_new_tokens (5) is more than max_new_tokens (4)"),
            std::string::npos);
  r.params.min_new_tokens = -1;
  EXPECT_EQ(core.submit(r).status().code(), ErrorCode::kInvalidArgument);
  r.params.min_new_tokens = 4;
  EXPECT_TRUE(core.submit(r).is_ok());
}

TEST(SamplingParams, TokenIdKeys) {
  EXPECT_EQ(token_id_from_key("0"), 0);
  EXPECT_EQ(token_id_from_key("50256"), 50256);
  EXPECT_EQ(token_id_from_key("2147483647"), 2147483647);
  for (const char* bad : {"", "-1", "+1", "01", " 1", "1 ", "1.0", "1e3", "2147483648", "99999999999", "abc"})
    EXPECT_FALSE(token_id_from_key(bad).has_value()) << bad;
}

}  // namespace
}  // namespace fg::test
