// Speculative decoding through the engine (engine/spec_decoder.h) on the fake model, whose paging
// checks catch any KV-length or page bookkeeping error of the rollback:
//  - greedy outputs with n-gram or draft-model speculation are token for token those without, for
//    many concurrent requests, under preemption, with stop ids and stop strings inside accepted
//    runs, with the prefix cache on;
//  - no page of the target's or the draft's pool is left held, also after cancellations in the
//    middle of speculation;
//  - back-off: no speculation while more decodes run than SpecConfig::max_batch;
//  - sampled requests: the joint distribution of the first three output tokens over many seeds
//    is the target model's exact one (Pearson's chi-square over the 125 outcomes of a 5-token
//    vocabulary, 124 degrees of freedom, against 213.7, its 1e-6 quantile: a correct engine fails
//    it once in a million seed sets; the seeds are fixed, so the test is deterministic), and a
//    seeded request gives the same tokens alone and in a crowd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "engine_test_util.h"

namespace fg::test {
namespace {

// Loops quickly under greedy decoding: logits depend on the last token only, so the greedy output
// is a walk of a random map over the vocabulary that enters a cycle within about sqrt(vocab) steps.
FakeModelShape looping_shape() {
  FakeModelShape s;
  s.context = 1;
  s.eos_bias = 0.3f;
  return s;
}

EngineConfig spec_config(SpecMethod method, int k = 4) {
  EngineConfig c;
  c.scheduler.max_batch_tokens = 256;
  c.spec.method = method;
  c.spec.num_tokens = k;
  c.spec.ngram = {1, 3};
  c.spec.max_batch = 1024;
  return c;
}

// Repeats a few tokens so n-gram lookup has something to find from the first decode on.
std::vector<Request> looping_requests(int n, int vocab, uint32_t seed, int max_new = 60) {
  auto requests = mixed_requests(n, vocab, 12, max_new, seed);
  for (Request& r : requests) {
    const std::vector<int32_t> head = r.prompt_ids;
    r.prompt_ids.insert(r.prompt_ids.end(), head.begin(), head.end());
  }
  return requests;
}

TEST(SpecEngine, NgramGreedyMatchesPlainDecoding) {
  const FakeModelShape shape = looping_shape();
  const auto requests = looping_requests(48, shape.vocab, 5);
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  const RunResult spec = run_all(shape, spec_config(SpecMethod::kNgram), requests);
  expect_same_tokens(spec.outputs, plain.outputs);
  EXPECT_GT(spec.stats.spec.draft_tokens, 0);
  EXPECT_GT(spec.stats.spec.accepted_tokens, spec.stats.spec.draft_tokens / 2) << "loops should be drafted well";
  EXPECT_LT(spec.stats.steps, plain.stats.steps) << "accepted drafts should save steps";
  EXPECT_EQ(spec.stats.generated_tokens, plain.stats.generated_tokens) << "usage counts emitted tokens";
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < spec.stats.spec.drafted_at.size(); ++i) {
    drafted += spec.stats.spec.drafted_at[i];
    accepted += spec.stats.spec.accepted_at[i];
    EXPECT_LE(spec.stats.spec.accepted_at[i], spec.stats.spec.drafted_at[i]);
    if (i > 0) {
      EXPECT_LE(spec.stats.spec.drafted_at[i], spec.stats.spec.drafted_at[i - 1]);
    }
  }
  EXPECT_EQ(drafted, spec.stats.spec.draft_tokens);
  EXPECT_EQ(accepted, spec.stats.spec.accepted_tokens);
}

TEST(SpecEngine, NgramUnderPreemptionAndTightBudgets) {
  FakeModelShape shape = looping_shape();
  shape.num_pages = 30;  // 120 slots for 32 requests of up to ~64 tokens: preemption
  const auto requests = looping_requests(32, shape.vocab, 9);
  const auto alone = run_each_alone(shape, requests);
  int64_t preemptions = 0;
  for (int budget : {64, 7}) {
    EngineConfig c = spec_config(SpecMethod::kNgram, 6);
    c.scheduler.max_batch_tokens = budget;
    const RunResult spec = run_all(shape, c, requests);
    expect_same_tokens(spec.outputs, alone);
    preemptions += spec.stats.preemptions;
    EXPECT_GT(spec.stats.spec.accepted_tokens, 0) << "budget " << budget;
  }
  EXPECT_GT(preemptions, 0) << "the pool was meant to be too small to avoid preemption";
}

TEST(SpecEngine, StopIdsInsideAcceptedRunsDropWhatFollows) {
  const FakeModelShape shape = looping_shape();
  auto requests = looping_requests(24, shape.vocab, 13, 48);
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  // Stop at the 6th output token of each plain run: a token inside the loops n-gram drafts.
  int with_stop = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plain.outputs[i].output_ids.size() > 6 && plain.outputs[i].finish_reason == FinishReason::kLength) {
      requests[i].params.stop_token_ids = {plain.outputs[i].output_ids[5]};
      ++with_stop;
    }
  }
  ASSERT_GT(with_stop, 5);
  const RunResult want = run_all(shape, spec_config(SpecMethod::kOff), requests);
  const RunResult spec = run_all(shape, spec_config(SpecMethod::kNgram), requests);
  expect_same_tokens(spec.outputs, want.outputs);
  int stopped = 0;
  for (const auto& o : spec.outputs) stopped += o.finish_reason == FinishReason::kStopToken;
  EXPECT_EQ(stopped, with_stop);
}

// A stand-in for the tokenizer's stop-string matcher: "stops" once the output holds `a` right
// after `b`.
class PairStop final : public StopMatcher {
 public:
  PairStop(int32_t b, int32_t a) : b_(b), a_(a) {}
  bool feed(int32_t token) override {
    const bool hit = prev_ == b_ && token == a_;
    prev_ = token;
    done_ |= hit;
    return done_;
  }

 private:
  int32_t b_, a_, prev_ = -1;
  bool done_ = false;
};

TEST(SpecEngine, StopStringsInsideAcceptedRuns) {
  const FakeModelShape shape = looping_shape();
  auto requests = looping_requests(24, shape.vocab, 17, 48);
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& out = plain.outputs[i].output_ids;
    if (out.size() > 8) requests[i].params.stop = {std::to_string(out[6]) + "," + std::to_string(out[7])};
  }
  auto with_matcher = [](SpecMethod m) {
    EngineConfig c = spec_config(m);
    c.stop_matcher_factory = [](const std::vector<std::string>& stops) -> Result<std::unique_ptr<StopMatcher>> {
      const std::string& s = stops.front();
      const size_t comma = s.find(',');
      return std::unique_ptr<StopMatcher>(
          std::make_unique<PairStop>(std::stoi(s.substr(0, comma)), std::stoi(s.substr(comma + 1))));
    };
    return c;
  };
  const RunResult want = run_all(shape, with_matcher(SpecMethod::kOff), requests);
  const RunResult spec = run_all(shape, with_matcher(SpecMethod::kNgram), requests);
  expect_same_tokens(spec.outputs, want.outputs);
  int stopped = 0;
  for (const auto& o : spec.outputs) stopped += o.finish_reason == FinishReason::kStopString;
  EXPECT_GT(stopped, 10);
}

// min_new_tokens inside verification: each draft row is masked by its own output position, so the
// greedy tokens are those of plain decoding with the same minimum.
TEST(SpecEngine, MinNewTokensMatchesPlainDecoding) {
  FakeModelShape shape = looping_shape();
  shape.eos_bias = 1.5f;  // eos often: the minimum changes outputs
  auto requests = looping_requests(32, shape.vocab, 29, 40);
  const RunResult free_run = run_all(shape, spec_config(SpecMethod::kOff), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    r.params.min_new_tokens = std::min<int32_t>(*r.params.max_new_tokens, 1 + int32_t(i % 12));
  }
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  const RunResult spec = run_all(shape, spec_config(SpecMethod::kNgram), requests);
  expect_same_tokens(spec.outputs, plain.outputs);
  EXPECT_GT(spec.stats.spec.accepted_tokens, 0);
  int changed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& out = plain.outputs[i].output_ids;
    const size_t min = size_t(requests[i].params.min_new_tokens);
    ASSERT_GE(out.size(), min) << i;
    for (size_t j = 0; j < min; ++j) EXPECT_NE(out[j], 0) << i << " " << j;
    changed += out != free_run.outputs[i].output_ids;
  }
  EXPECT_GT(changed, 4) << "eos should have ended some requests early without the minimum";
}

TEST(SpecEngine, PrefixCacheSharedPromptsNeverWritePublishedPages) {
  const FakeModelShape shape = looping_shape();
  auto requests = looping_requests(8, shape.vocab, 21);
  // 40 requests over 8 prompts: later ones hit pages published by earlier ones.
  std::vector<Request> all;
  for (int rep = 0; rep < 5; ++rep)
    for (const Request& r : requests) all.push_back(r);
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), all);
  FakeRunner runner(shape);
  EngineConfig c = spec_config(SpecMethod::kNgram);
  EngineCore core(c, runner);
  const PrefixCache* cache = core.prefix_cache();
  ASSERT_NE(cache, nullptr);
  runner.set_write_guard([&](int32_t page) { return core.pool().refcount(page) == 1 && !cache->contains_page(page); });
  std::vector<RequestHandle> handles;
  for (const Request& r : all) handles.push_back(*core.submit(r));
  while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
  std::vector<RequestOutput> outs;
  for (const auto& h : handles) outs.push_back(h.wait());
  expect_same_tokens(outs, plain.outputs);
  const EngineStats st = core.stats();
  EXPECT_GT(st.prefix_cache_hit_tokens, 0);
  EXPECT_GT(st.spec.accepted_tokens, 0);
  EXPECT_EQ(st.pages.held, 0);
}

TEST(SpecEngine, DraftModelGreedyMatchesWhateverTheDraftSays) {
  const FakeModelShape shape = looping_shape();
  const auto requests = looping_requests(32, shape.vocab, 25);
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  // A draft that is the target itself (every draft accepted) and one that disagrees.
  FakeModelShape same = shape;
  FakeModelShape other = shape;
  other.salt = 0x9999;
  other.num_pages = 64;  // a small draft pool: some sequences go without drafts
  const RunResult agree = run_all(shape, spec_config(SpecMethod::kDraft, 3), requests, &same);
  const RunResult disagree = run_all(shape, spec_config(SpecMethod::kDraft, 3), requests, &other);
  expect_same_tokens(agree.outputs, plain.outputs);
  expect_same_tokens(disagree.outputs, plain.outputs);
  EXPECT_EQ(agree.stats.spec.accepted_tokens, agree.stats.spec.draft_tokens) << "the draft is the target";
  EXPECT_GT(agree.stats.spec.draft_tokens, 0);
  EXPECT_LT(agree.stats.steps, plain.stats.steps);
  EXPECT_LT(disagree.stats.spec.acceptance_rate(), 0.5);
  // Low acceptance backs off: far fewer verifications than decode steps.
  EXPECT_LT(disagree.stats.spec.verify_steps, plain.stats.generated_tokens / 2);
  EXPECT_EQ(agree.stats.spec.draft_pages_held, 0);
  EXPECT_EQ(disagree.stats.spec.draft_pages_held, 0);
}

TEST(SpecEngine, CancellingMidSpeculationLeaksNoPage) {
  const FakeModelShape shape = looping_shape();
  const auto requests = looping_requests(24, shape.vocab, 29, 60);
  for (SpecMethod m : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    FakeRunner runner(shape);
    runner.set_draft(std::make_unique<FakeRunner>(shape));
    EngineCore core(spec_config(m), runner);
    std::vector<RequestHandle> handles;
    for (const Request& r : requests) handles.push_back(*core.submit(r));
    for (int i = 0; i < 6 && core.has_work(); ++i) ASSERT_TRUE(core.step().is_ok());
    EXPECT_GT(core.stats().spec.draft_tokens, 0) << spec_method_name(m);
    for (size_t i = 0; i < handles.size(); i += 2) core.cancel(handles[i].id);
    for (int i = 0; i < 3 && core.has_work(); ++i) ASSERT_TRUE(core.step().is_ok());
    for (size_t i = 1; i < handles.size(); i += 4) core.cancel(handles[i].id);
    while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
    const EngineStats st = core.stats();
    EXPECT_EQ(st.pages.held, 0) << spec_method_name(m);
    EXPECT_EQ(st.spec.draft_pages_held, 0) << spec_method_name(m);
    EXPECT_GT(st.cancelled, 0);
  }
}

TEST(SpecEngine, BacksOffWhileTheBatchIsLarge) {
  const FakeModelShape shape = looping_shape();
  const auto requests = looping_requests(16, shape.vocab, 33, 20);
  EngineConfig c = spec_config(SpecMethod::kNgram);
  c.spec.max_batch = 4;
  FakeRunner runner(shape);
  EngineCore core(c, runner);
  for (const Request& r : requests) ASSERT_TRUE(core.submit(r).is_ok());
  int64_t while_large = 0;
  while (core.has_work()) {
    const int64_t running = core.stats().running;
    const int64_t before = core.stats().spec.draft_tokens;
    ASSERT_TRUE(core.step().is_ok());
    if (running > 4) while_large += core.stats().spec.draft_tokens - before;
  }
  EXPECT_EQ(while_large, 0) << "drafted while more than max_batch sequences decoded";
  EXPECT_GT(core.stats().spec.draft_tokens, 0) << "drafted once the batch shrank";
}

// The exact probability of each 3-token output of `prompt` under temperature 1 (no eos in vocab).
std::map<std::vector<int32_t>, double> exact_joint(const FakeModelShape& shape, const std::vector<int32_t>& prompt) {
  std::map<std::vector<int32_t>, double> out;
  std::vector<float> logits(static_cast<size_t>(shape.vocab));
  auto softmax = [&](std::vector<int32_t> ctx) {
    fake_logits(shape, ctx, logits.data());
    std::vector<double> p(logits.size());
    double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp(double(logits[i]) - mx));
    for (double& x : p) x /= sum;
    return p;
  };
  const auto p1 = softmax(prompt);
  for (int a = 0; a < shape.vocab; ++a) {
    auto ctx = prompt;
    ctx.push_back(a);
    const auto p2 = softmax(ctx);
    for (int b = 0; b < shape.vocab; ++b) {
      auto ctx2 = ctx;
      ctx2.push_back(b);
      const auto p3 = softmax(ctx2);
      for (int c = 0; c < shape.vocab; ++c) out[{a, b, c}] = p1[size_t(a)] * p2[size_t(b)] * p3[size_t(c)];
    }
  }
  return out;
}

void check_sampled_distribution(SpecMethod method) {
  FakeModelShape shape;
  shape.vocab = 5;
  shape.eos = {};
  shape.context = 2;
  shape.scale = 2.5f;
  shape.num_pages = 4096;
  FakeModelShape draft = shape;
  draft.salt = 0x4321;  // a draft whose q differs from the target's p
  const std::vector<int32_t> prompt = {1, 2, 1, 2, 1};
  const int n = 30000;
  std::vector<Request> requests(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Request& r = requests[size_t(i)];
    r.prompt_ids = prompt;
    r.params.temperature = 1.0f;
    r.params.seed = uint64_t(i) * 2654435761u + 17u;
    r.params.max_new_tokens = 3;
  }
  EngineConfig c = spec_config(method, 2);
  c.scheduler.max_batch_tokens = 4096;
  c.scheduler.max_running = 1024;
  const RunResult run = run_all(shape, c, requests, method == SpecMethod::kDraft ? &draft : nullptr);
  EXPECT_GT(run.stats.spec.draft_tokens, 1000) << spec_method_name(method);
  EXPECT_GT(run.stats.spec.accepted_tokens, 100);
  EXPECT_LT(run.stats.spec.accepted_tokens, run.stats.spec.draft_tokens) << "the test needs rejections";
  std::map<std::vector<int32_t>, int64_t> counts;
  for (const auto& o : run.outputs) {
    ASSERT_EQ(o.output_ids.size(), 3u);
    ++counts[o.output_ids];
  }
  double chi2 = 0.0;
  for (const auto& [seq, p] : exact_joint(shape, prompt)) {
    const double e = p * n, got = double(counts.count(seq) ? counts[seq] : 0);
    chi2 += (got - e) * (got - e) / e;
  }
  EXPECT_LT(chi2, 213.7) << spec_method_name(method) << ": outputs do not follow the target's distribution";
}

TEST(SpecEngine, SampledOutputsFollowTheTargetWithADraftModel) {
  check_sampled_distribution(SpecMethod::kDraft);
}
TEST(SpecEngine, SampledOutputsFollowTheTargetWithNgramDrafts) {
  check_sampled_distribution(SpecMethod::kNgram);
}

// Logprobs of speculated tokens: every emitted token's logprob and top list are the target's
// log-softmax after the tokens before it (the fake model's logits, recomputed here), whether the
// token was the sampled id (read on the backend) or a draft kept by sampled verification (read
// from the host rows), greedy or sampled, n-gram or draft model.
TEST(SpecEngine, LogprobsOfAcceptedTokensAreTheTargets) {
  const FakeModelShape shape = looping_shape();
  FakeModelShape draft = shape;
  draft.salt = 0x99;
  std::vector<float> logits(static_cast<size_t>(shape.vocab));
  for (SpecMethod m : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    for (const float temperature : {0.0f, 0.9f}) {
      SCOPED_TRACE(std::string(spec_method_name(m)) + " temperature " + std::to_string(temperature));
      auto requests = looping_requests(12, shape.vocab, 41, 24);
      for (size_t i = 0; i < requests.size(); ++i) {
        requests[i].params.temperature = temperature;
        requests[i].params.seed = 500 + i;
        requests[i].params.logprobs = 3;
      }
      const RunResult run = run_all(shape, spec_config(m), requests, &draft);
      EXPECT_GT(run.stats.spec.accepted_tokens, 0);
      for (size_t i = 0; i < requests.size(); ++i) {
        const RequestOutput& o = run.outputs[i];
        ASSERT_EQ(o.logprobs.size(), o.output_ids.size());
        std::vector<int32_t> ctx = requests[i].prompt_ids;
        for (size_t t = 0; t < o.output_ids.size(); ++t) {
          fake_logits(shape, ctx, logits.data());
          const double lse = log_sum_exp(logits);
          EXPECT_NEAR(o.logprobs[t], double(logits[size_t(o.output_ids[t])]) - lse, 1e-5) << "request " << i;
          ASSERT_EQ(o.top_logprobs[t].size(), 3u);
          EXPECT_NEAR(o.top_logprobs[t][0].logprob, *std::max_element(logits.begin(), logits.end()) - lse, 1e-5);
          for (const TokenLogprob& tl : o.top_logprobs[t])
            EXPECT_NEAR(tl.logprob, double(logits[size_t(tl.id)]) - lse, 1e-5);
          ctx.push_back(o.output_ids[t]);
        }
      }
    }
  }
}

// Logit biases apply to every verified row: greedy outputs are the argmax of the biased logits and
// logprobs are the biased log-softmax, with either proposer (neither sees the bias).
TEST(SpecEngine, LogitBiasAppliesToEveryVerifiedRow) {
  const FakeModelShape shape = looping_shape();
  FakeModelShape draft = shape;
  draft.salt = 0x99;
  std::vector<float> logits(static_cast<size_t>(shape.vocab));
  for (SpecMethod m : {SpecMethod::kOff, SpecMethod::kNgram, SpecMethod::kDraft}) {
    SCOPED_TRACE(spec_method_name(m));
    auto requests = looping_requests(12, shape.vocab, 43, 24);
    for (size_t i = 0; i < requests.size(); ++i) {
      Request& r = requests[i];
      r.params.temperature = i % 3 == 2 ? 0.9f : 0.0f;
      r.params.seed = 700 + i;
      r.params.logprobs = 2;
      r.params.logit_bias = {{int32_t(i % 5), 1.5f}, {int32_t(5 + i % 7), -100.0f}, {int32_t(13 + i), -0.75f}};
    }
    const RunResult run = run_all(shape, spec_config(m), requests, &draft);
    if (m != SpecMethod::kOff) {
      EXPECT_GT(run.stats.spec.accepted_tokens, 0);
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const RequestOutput& o = run.outputs[i];
      ASSERT_EQ(o.logprobs.size(), o.output_ids.size());
      std::vector<int32_t> ctx = requests[i].prompt_ids;
      for (size_t t = 0; t < o.output_ids.size(); ++t) {
        fake_logits(shape, ctx, logits.data());
        for (const auto& [id, bias] : requests[i].params.logit_bias) logits[size_t(id)] += bias;
        const double lse = log_sum_exp(logits);
        EXPECT_NE(o.output_ids[t], int32_t(5 + i % 7)) << "a token biased by -100 was picked";
        if (requests[i].params.temperature == 0.0f) {
          EXPECT_EQ(o.output_ids[t], int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()))
              << "request " << i << " token " << t;
        }
        EXPECT_NEAR(o.logprobs[t], double(logits[size_t(o.output_ids[t])]) - lse, 1e-5) << "request " << i;
        ctx.push_back(o.output_ids[t]);
      }
    }
  }
}

TEST(SpecEngine, SeededSampledRequestsAreReproducibleInAnyBatch) {
  const FakeModelShape shape = looping_shape();
  auto requests = looping_requests(20, shape.vocab, 37, 30);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].params.temperature = 0.8f;
    requests[i].params.seed = 100 + i;
  }
  FakeModelShape draft = shape;
  draft.salt = 0x77;
  for (SpecMethod m : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    const RunResult together = run_all(shape, spec_config(m), requests, &draft);
    const RunResult again = run_all(shape, spec_config(m), requests, &draft);
    expect_same_tokens(again.outputs, together.outputs);
    for (size_t i = 0; i < requests.size(); i += 5) {
      const RunResult alone = run_all(shape, spec_config(m), {requests[i]}, &draft);
      EXPECT_EQ(alone.outputs[0].output_ids, together.outputs[i].output_ids) << spec_method_name(m) << " request " << i;
    }
  }
}

TEST(SpecEngine, OptedOutRequestsNeverSpeculate) {
  const FakeModelShape shape = looping_shape();
  auto requests = looping_requests(8, shape.vocab, 41);
  for (Request& r : requests) r.speculative = false;
  const RunResult run = run_all(shape, spec_config(SpecMethod::kNgram), requests);
  EXPECT_EQ(run.stats.spec.draft_tokens, 0);
}

// Predicted outputs: a request's prediction is drafted and verified with the engine's own
// speculation off. A prediction equal to the output is accepted whole; one with an edit in the
// middle (five wrong tokens) has its drafts rejected at the edit and accepted again once the
// output meets the prediction after it; a wrong one changes nothing but the counts. Outputs are
// always the plain ones. (The fake model does not loop here: a loop would let any occurrence of
// the output's suffix in the prediction draft the right tokens.)
TEST(SpecEngine, PredictionsAreDraftedWithSpeculationOff) {
  FakeModelShape shape;
  shape.eos_bias = -100.0f;  // every request runs to its length: long predictions to follow
  auto requests = mixed_requests(16, shape.vocab, 12, 40, 45);
  for (Request& r : requests) r.params.max_new_tokens = 40;
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  auto with = [&](auto make_prediction) {
    std::vector<Request> rs = requests;
    for (size_t i = 0; i < rs.size(); ++i) rs[i].prediction = make_prediction(plain.outputs[i].output_ids);
    return rs;
  };
  // Exact.
  const RunResult exact =
      run_all(shape, spec_config(SpecMethod::kOff, 8), with([](const std::vector<int32_t>& out) { return out; }));
  expect_same_tokens(exact.outputs, plain.outputs);
  EXPECT_LT(exact.stats.steps * 3, plain.stats.steps) << "up to 9 tokens a step";
  for (const RequestOutput& o : exact.outputs) {
    EXPECT_GT(o.draft_tokens, 30);
    EXPECT_EQ(o.accepted_draft_tokens, o.draft_tokens) << "request " << o.id;
  }
  // Edited: tokens 15..19 replaced by other ids. With k = 3 a step emits 4 tokens, so the drafts
  // of the fourth decode step cover positions 13..15 and meet the edit.
  const RunResult edited = run_all(shape, spec_config(SpecMethod::kOff, 3), with([&](const std::vector<int32_t>& out) {
                                     std::vector<int32_t> p = out;
                                     for (size_t j = 15; j < 20; ++j) p[j] = (p[j] + 1) % shape.vocab;
                                     return p;
                                   }));
  expect_same_tokens(edited.outputs, plain.outputs);
  int resynced = 0;
  for (const RequestOutput& o : edited.outputs) {
    EXPECT_LT(o.accepted_draft_tokens, o.draft_tokens) << "request " << o.id;
    resynced += o.accepted_draft_tokens > 15;  // accepted past the edit as well
  }
  EXPECT_EQ(resynced, int(requests.size())) << "no pause on low acceptance: every request meets its prediction again";
  // Wrong throughout: the same tokens.
  const RunResult wrong = run_all(shape, spec_config(SpecMethod::kOff, 4), with([&](const std::vector<int32_t>& out) {
                                    std::vector<int32_t> p = out;
                                    for (int32_t& t : p) t = (t + 3) % shape.vocab;
                                    return p;
                                  }));
  expect_same_tokens(wrong.outputs, plain.outputs);
  EXPECT_EQ(wrong.stats.pages.held, 0);
  EXPECT_EQ(plain.stats.spec.draft_tokens, 0);
}

// A prediction wins over the engine's method for its request; opting out of speculation or a
// constraint leaves it unused.
TEST(SpecEngine, PredictionsTakePrecedenceAndRespectOptOut) {
  FakeModelShape shape;
  shape.eos_bias = -100.0f;
  auto requests = mixed_requests(6, shape.vocab, 12, 30, 47);
  for (Request& r : requests) r.params.max_new_tokens = 30;
  const RunResult plain = run_all(shape, spec_config(SpecMethod::kOff), requests);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].prediction = plain.outputs[i].output_ids;
  const RunResult ngram = run_all(shape, spec_config(SpecMethod::kNgram, 4), requests);
  expect_same_tokens(ngram.outputs, plain.outputs);
  for (const RequestOutput& o : ngram.outputs) EXPECT_EQ(o.accepted_draft_tokens, o.draft_tokens);
  for (Request& r : requests) r.speculative = false;
  const RunResult opted_out = run_all(shape, spec_config(SpecMethod::kOff, 4), requests);
  expect_same_tokens(opted_out.outputs, plain.outputs);
  EXPECT_EQ(opted_out.stats.spec.draft_tokens, 0);
}

}  // namespace
}  // namespace fg::test
