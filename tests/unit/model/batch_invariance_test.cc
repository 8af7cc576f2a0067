// Batch invariance of the model on the CPU reference backend: the fixture prompts run alone, all
// together in one ragged batch, split into prefill chunks of 1, 7 and 64 tokens (decodes of
// finished prompts sharing steps with prefill chunks of others), and with KV page sizes 1, 3, 16
// and 256 (pages of different sequences interleaved in one cache) must give the same prompt logits
// within 1e-5 relative and the same greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

constexpr int kNewTokens = 12;

using test::argmax;
using test::model_fixture;

std::vector<std::vector<int32_t>> load_prompts(const std::string& dir) {
  auto text = read_text_file(dir + "/reference.json");
  EXPECT_TRUE(text.is_ok());
  return nlohmann::json::parse(text.value())["prompts"].get<std::vector<std::vector<int32_t>>>();
}

struct SeqResult {
  std::vector<float> prompt_logits;  // [prompt_len, vocab]
  std::vector<int32_t> generated;    // kNewTokens greedy ids
};

// Runs every prompt to its end and then kNewTokens greedy decode steps. together: all sequences
// share each step; otherwise one sequence at a time. chunk: prefill tokens per step (0 = all).
std::vector<SeqResult> run(Model& model, const std::vector<std::vector<int32_t>>& prompts, int page_size, int chunk,
                           bool together) {
  const int S = int(prompts.size());
  const int64_t vocab = model.config().vocab_size;
  int max_pages = 0;
  for (const auto& p : prompts)
    max_pages = std::max(max_pages, int((p.size() + kNewTokens + page_size - 1) / page_size));
  auto cache = model.make_kv_cache(S * max_pages, page_size);
  EXPECT_TRUE(cache.is_ok());
  std::vector<std::vector<int32_t>> tokens(prompts.begin(), prompts.end()), pages(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s)  // interleaved: sequence s owns pages s, s + S, s + 2S, ...
    for (int i = 0; i < max_pages; ++i) pages[size_t(s)].push_back(s + i * S);
  std::vector<int> cached(size_t(S), 0);
  std::vector<SeqResult> out(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) out[size_t(s)].prompt_logits.resize(prompts[size_t(s)].size() * size_t(vocab));
  std::vector<float> host;
  while (true) {
    std::vector<SequenceChunk> chunks;
    std::vector<int> members;
    for (int s = 0; s < S; ++s) {
      if (int(out[size_t(s)].generated.size()) == kNewTokens) continue;
      const int plen = int(prompts[size_t(s)].size());
      SequenceChunk c;
      c.num_cached = cached[size_t(s)];
      c.pages = pages[size_t(s)];
      int n = cached[size_t(s)] < plen ? std::min(plen - cached[size_t(s)], chunk > 0 ? chunk : plen) : 1;
      c.new_tokens = std::span<const int32_t>(tokens[size_t(s)]).subspan(size_t(cached[size_t(s)]), size_t(n));
      c.logits = LogitsWanted::kAll;
      chunks.push_back(c);
      members.push_back(s);
      if (!together) break;
    }
    if (chunks.empty()) break;
    auto logits = model.forward(chunks, *cache);
    EXPECT_TRUE(logits.is_ok()) << logits.status().message();
    if (!logits.is_ok()) return out;
    host.resize(size_t(logits->shape[0]) * size_t(vocab));
    model.backend().copy_to_host(host.data(), logits->data, host.size() * sizeof(float));
    model.backend().synchronize();
    size_t row = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      const int s = members[k];
      const int plen = int(prompts[size_t(s)].size());
      const int n = int(chunks[k].new_tokens.size());
      for (int i = 0; i < n; ++i, ++row) {
        int pos = cached[size_t(s)] + i;
        const float* r = host.data() + row * size_t(vocab);
        if (pos < plen) std::copy(r, r + vocab, out[size_t(s)].prompt_logits.begin() + std::ptrdiff_t(pos) * vocab);
        if (pos == int(tokens[size_t(s)].size()) - 1) {  // the last known token: its argmax is the next one
          int next = argmax(r, vocab);
          out[size_t(s)].generated.push_back(next);
          tokens[size_t(s)].push_back(next);
        }
      }
      cached[size_t(s)] += n;
    }
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return diff / ref;
}

void expect_same(const std::vector<SeqResult>& got, const std::vector<SeqResult>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    ASSERT_EQ(got[s].prompt_logits.size(), want[s].prompt_logits.size());
    EXPECT_LE(max_rel_diff(got[s].prompt_logits, want[s].prompt_logits), 1e-5) << what << ", sequence " << s;
    EXPECT_EQ(got[s].generated, want[s].generated) << what << ", sequence " << s;
  }
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend();
    auto m = Model::load(model_fixture(GetParam()), *backend_);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(m).value();
    prompts_ = load_prompts(model_fixture(GetParam()));
    baseline_ = run(*model_, prompts_, /*page_size=*/16, /*chunk=*/0, /*together=*/false);
    ASSERT_EQ(baseline_.size(), prompts_.size());
    for (const SeqResult& r : baseline_) ASSERT_EQ(int(r.generated.size()), kNewTokens);
  }
  // Dynamic NTK recomputes the rotary base from each step's length, as transformers does, so
  // prefilling past max_position_embeddings in chunks legitimately changes the keys.
  bool chunking_invariant() const { return model_->config().rope.type != RopeScaling::kDynamic; }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<SeqResult> baseline_;
};

TEST_P(BatchInvariance, TogetherInOneRaggedBatch) {
  expect_same(run(*model_, prompts_, 16, 0, true), baseline_, "together");
}

TEST_P(BatchInvariance, PageSizes) {
  for (int page_size : {1, 3, 16, 256}) {
    expect_same(run(*model_, prompts_, page_size, 0, false), baseline_,
                "alone, page size " + std::to_string(page_size));
    expect_same(run(*model_, prompts_, page_size, 0, true), baseline_,
                "together, page size " + std::to_string(page_size));
  }
}

TEST_P(BatchInvariance, PrefillChunks) {
  std::vector<std::vector<int32_t>> prompts = prompts_;
  std::vector<SeqResult> baseline = baseline_;
  if (!chunking_invariant()) {
    // Only prompts that fit in max_position_embeddings prefill with the base rotary table.
    for (size_t i = prompts.size(); i-- > 0;)
      if (int64_t(prompts[i].size()) > model_->config().max_position_embeddings) {
        prompts.erase(prompts.begin() + std::ptrdiff_t(i));
        baseline.erase(baseline.begin() + std::ptrdiff_t(i));
      }
    ASSERT_FALSE(prompts.empty());
  }
  for (int chunk : {1, 7, 64}) {
    expect_same(run(*model_, prompts, 16, chunk, false), baseline, "alone, chunk " + std::to_string(chunk));
    expect_same(run(*model_, prompts, 3, chunk, true), baseline,
                "together, page size 3, chunk " + std::to_string(chunk));
  }
}

// A prompt longer than max_position_embeddings, prefilled in chunks, must differ from one
// prefilled at once: transformers rescales the dynamic-NTK base from each call's largest position.
TEST(DynamicRope, FollowsEachStepsLength) {
  auto backend = make_cpu_backend();
  auto model = Model::load(model_fixture("llama_dynamic"), *backend);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  std::vector<std::vector<int32_t>> longest = {load_prompts(model_fixture("llama_dynamic")).back()};
  ASSERT_GT(int64_t(longest[0].size()), (*model)->config().max_position_embeddings);
  std::vector<SeqResult> whole = run(**model, longest, 16, 0, false);
  std::vector<SeqResult> chunked = run(**model, longest, 16, 7, false);
  EXPECT_GT(max_rel_diff(chunked[0].prompt_logits, whole[0].prompt_logits), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance,
                         ::testing::Values("llama", "llama3_tied", "llama_dynamic", "mistral", "qwen2", "qwen3"));

}  // namespace
}  // namespace fg
