// Speculative decoding over real (tiny fixture) models on the CPU: greedy outputs with n-gram and
// draft-model speculation equal the model layer's single-sequence generate() for every request of
// a mixed batch (the verification query's logits are the decode's, row for row), a KV pool small
// enough to preempt still gives the same tokens, and a draft model of another vocabulary is
// refused by name.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "support/engine_test_util.h"

namespace fg {
namespace {

std::vector<Request> looping_requests(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = 2 + int(rng() % 12);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(3 + rng() % uint32_t(vocab - 3)));
    // The prompt twice: lookup has something to find before the model's own loops start.
    const std::vector<int32_t> head = r.prompt_ids;
    r.prompt_ids.insert(r.prompt_ids.end(), head.begin(), head.end());
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 8 + int(rng() % 40);
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

std::unique_ptr<ModelRunner> make_runner(const std::string& draft, int64_t kv_bytes) {
  ModelRunnerOptions o;
  o.model_dir = test::model_fixture("llama");
  o.backend = "cpu";
  o.page_size = 4;
  o.kv_cache_bytes = kv_bytes;
  if (!draft.empty()) o.draft_model_dir = test::model_fixture(draft);
  auto r = ModelRunner::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

EngineStats run(ModelRunner& runner, const EngineConfig& config, const std::vector<Request>& requests,
                std::vector<RequestOutput>& outputs) {
  EngineCore core(config, runner);
  std::vector<RequestHandle> handles;
  for (const Request& r : requests) handles.push_back(*core.submit(r));
  while (core.has_work()) {
    Status st = core.step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
  }
  for (const auto& h : handles) outputs.push_back(h.wait());
  const EngineStats s = core.stats();
  EXPECT_EQ(s.pages.held, 0) << "pages leaked";
  EXPECT_EQ(s.spec.draft_pages_held, 0) << "draft pages leaked";
  return s;
}

EngineConfig spec(SpecMethod m, int k) {
  EngineConfig c;
  c.scheduler.max_batch_tokens = 256;
  c.spec.method = m;
  c.spec.num_tokens = k;
  c.spec.ngram = {1, 3};
  return c;
}

TEST(SpecModel, GreedyOutputsEqualTheReference) {
  // The target as its own draft: every draft is what the target would pick.
  auto runner = make_runner("llama", int64_t(8) << 20);
  ASSERT_NE(runner, nullptr);
  ASSERT_NE(runner->draft(), nullptr);
  const auto requests = looping_requests(24, 3, runner->vocab_size());
  const auto want = test::reference_tokens(runner->model(), requests);
  for (auto [method, k] :
       {std::pair{SpecMethod::kNgram, 4}, std::pair{SpecMethod::kNgram, 2}, std::pair{SpecMethod::kDraft, 3}}) {
    SCOPED_TRACE(std::string(spec_method_name(method)) + " k " + std::to_string(k));
    std::vector<RequestOutput> out;
    const EngineStats s = run(*runner, spec(method, k), requests, out);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i].output_ids, want[i]) << "request " << i;
    EXPECT_GT(s.spec.draft_tokens, 0);
    if (method == SpecMethod::kDraft) {
      EXPECT_GT(s.spec.accepted_tokens, s.spec.draft_tokens * 9 / 10) << "the draft is the target";
    } else {
      EXPECT_GT(s.spec.accepted_tokens, 0) << "random-weight greedy outputs loop; lookup should catch some";
    }
  }
  // A draft of other random weights (another fixture): it rarely agrees, and the tokens are still
  // the target's.
  auto other = make_runner("llama3_tied", int64_t(8) << 20);
  ASSERT_NE(other, nullptr);
  std::vector<RequestOutput> out;
  const EngineStats s = run(*other, spec(SpecMethod::kDraft, 3), requests, out);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i].output_ids, want[i]) << "request " << i;
  EXPECT_GT(s.spec.draft_tokens, 0);
}

TEST(SpecModel, PreemptionKeepsTheTokens) {
  // A pool of 48 pages of 4 tokens for 24 requests of up to ~76 tokens.
  auto probe = make_runner("", int64_t(1) << 20);
  ASSERT_NE(probe, nullptr);
  const int64_t per_page = probe->kv_cache_bytes() / probe->kv_num_pages();
  auto runner = make_runner("", 48 * per_page);
  ASSERT_NE(runner, nullptr);
  const auto requests = looping_requests(24, 7, runner->vocab_size());
  const auto want = test::reference_tokens(runner->model(), requests);
  std::vector<RequestOutput> out;
  const EngineStats s = run(*runner, spec(SpecMethod::kNgram, 4), requests, out);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i].output_ids, want[i]) << "request " << i;
  EXPECT_GT(s.preemptions, 0);
  EXPECT_GT(s.spec.accepted_tokens, 0);
}

TEST(SpecModel, DraftOfAnotherVocabularyIsRefused) {
  ModelRunnerOptions o;
  o.model_dir = test::model_fixture("llama");
  o.backend = "cpu";
  o.kv_cache_bytes = int64_t(1) << 20;
  o.draft_model_dir = test::model_fixture("chat_llama");  // 512 ids, the target has 256
  auto r = ModelRunner::create(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--draft-model"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("vocabulary"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace fg
