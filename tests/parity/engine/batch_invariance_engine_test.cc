// Batch-invariant mode (BackendOptions::batch_invariant, --batch-invariant) end to end: a set of
// probe requests run alone and the same requests inside a much larger batch must give bitwise the
// same tokens and the same logprobs (the sampled token's and the top 5 of every step: the
// log-softmax of the logits rows, compared as f32 bits), whatever else their steps held.
//
//  - BatchInvariantCpu.*: the fixtures llama and qwen3_moe on the CPU backend (CI). The probes run
//    alone with a large step budget and inside 64 requests with a 48-token budget, so their
//    prompts are cut into other chunks and their decodes share steps with prefill chunks and with
//    30 and more others (the CPU GEMM changes paths at 2 to 24 rows, and each expert's rows depend
//    on the step: docs/architecture.md).
//  - BatchInvariantCuda.*: on a GPU, 32 probes alone vs inside a 256-request batch, with dummy
//    weights at Llama-3.2-1B's shapes (bench/configs), CUDA graphs on, prompts chunked by a
//    1024-token budget. Skipped when no GPU is found.
// Each case also runs without the flag and REPORTS (never asserts) whether the probes then differ,
// which shows whether the case could fail at all on this machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "support/engine_test_util.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

constexpr const char* kNoGpu =
    "no usable CUDA GPU (make_cuda_backend failed): batch invariance on CUDA is checked on the GPU machine only";

// n requests with prompts of [min_prompt, max_prompt] tokens and [min_out, max_out] output tokens;
// every fourth one samples (seeded, temperature 0.8), the others are greedy; all ask for logprobs.
std::vector<Request> make_requests(int n, int vocab, uint32_t seed, int min_prompt, int max_prompt, int min_out,
                                   int max_out) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = min_prompt + int(rng() % uint32_t(max_prompt - min_prompt + 1));
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(3 + rng() % uint32_t(vocab - 3)));
    r.params.temperature = i % 4 == 3 ? 0.8f : 0.0f;
    r.params.seed = uint64_t(1000 + i);
    r.params.max_new_tokens = min_out + int(rng() % uint32_t(max_out - min_out + 1));
    r.params.ignore_eos = true;
    r.params.logprobs = 5;
    out.push_back(r);
  }
  return out;
}

struct Run {
  std::vector<RequestOutput> outputs;
  int32_t widest_step = 0;  // sequences in the largest step
  int64_t mixed_steps = 0;  // steps that were not decode-only
};

Run run_engine(const ModelRunnerOptions& options, int max_batch_tokens, const std::vector<Request>& requests) {
  Run run;
  auto runner = ModelRunner::create(options);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  if (!runner.is_ok()) return run;
  EngineConfig config;
  config.scheduler.max_batch_tokens = max_batch_tokens;
  config.scheduler.max_running = 256;
  config.on_step = [&run](const StepSummary& s) { run.widest_step = std::max(run.widest_step, s.num_seqs); };
  test::EngineRun done = test::run_engine(**runner, config, requests);
  run.outputs = std::move(done.outputs);
  run.mixed_steps = done.stats.steps - done.stats.decode_only_steps;
  return run;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Where the two outputs of one request first differ (tokens, the token's logprob, or its top-5
// ids and logprobs, all bit for bit); empty when they are identical.
std::string first_difference(const RequestOutput& a, const RequestOutput& b) {
  if (a.output_ids.size() != b.output_ids.size()) return "output lengths differ";
  for (size_t t = 0; t < a.output_ids.size(); ++t) {
    const std::string at = " at output token " + std::to_string(t);
    if (a.output_ids[t] != b.output_ids[t]) return "token" + at;
    if (t >= a.logprobs.size() || t >= b.logprobs.size()) return "logprobs missing" + at;
    if (!same_bits(a.logprobs[t], b.logprobs[t])) return "logprob" + at;
    if (t >= a.top_logprobs.size() || t >= b.top_logprobs.size()) return "top logprobs missing" + at;
    const auto &ta = a.top_logprobs[t], &tb = b.top_logprobs[t];
    if (ta.size() != tb.size()) return "top-logprob count" + at;
    for (size_t j = 0; j < ta.size(); ++j)
      if (ta[j].id != tb[j].id || !same_bits(ta[j].logprob, tb[j].logprob))
        return "top logprob " + std::to_string(j) + at;
  }
  return "";
}

// The probes' outputs alone vs inside the batch (probe i is request probe_index[i] of the batch).
// With `expect_equal` every difference fails the test; otherwise the count is returned to report.
int compare(const Run& alone, const Run& batch, const std::vector<size_t>& probe_index, bool expect_equal) {
  EXPECT_EQ(alone.outputs.size(), probe_index.size());
  int differing = 0;
  for (size_t i = 0; i < alone.outputs.size() && i < probe_index.size(); ++i) {
    const RequestOutput& a = alone.outputs[i];
    const RequestOutput& b = batch.outputs.at(probe_index[i]);
    EXPECT_EQ(a.finish_reason, FinishReason::kLength) << "probe " << i << ": " << a.status.to_string();
    EXPECT_EQ(b.finish_reason, FinishReason::kLength) << "probe " << i << ": " << b.status.to_string();
    const std::string diff = first_difference(a, b);
    if (diff.empty()) continue;
    ++differing;
    if (expect_equal) ADD_FAILURE() << "probe " << i << " (request " << probe_index[i] << "): " << diff;
  }
  return differing;
}

// Runs `probes` alone (budget alone_budget) and inside `batch` (budget batch_budget) with and
// without batch-invariant mode; asserts equality with it, reports the count without it.
void check_invariance(ModelRunnerOptions options, const std::vector<Request>& batch,
                      const std::vector<size_t>& probe_index, int alone_budget, int batch_budget,
                      int32_t min_widest_step) {
  std::vector<Request> probes;
  for (size_t i : probe_index) probes.push_back(batch[i]);
  for (bool invariant : {true, false}) {
    SCOPED_TRACE(invariant ? "batch-invariant" : "default mode");
    options.batch_invariant = invariant;
    const Run alone = run_engine(options, alone_budget, probes);
    const Run together = run_engine(options, batch_budget, batch);
    ASSERT_EQ(together.outputs.size(), batch.size());
    // The batch run must really have mixed the probes with many others and with prefill chunks.
    EXPECT_GE(together.widest_step, min_widest_step);
    EXPECT_GT(together.mixed_steps, 0);
    const int differing = compare(alone, together, probe_index, invariant);
    if (!invariant) {
      std::printf("[ report   ] without --batch-invariant, %d of %zu probes differ alone vs in the batch of %zu\n",
                  differing, probe_index.size(), batch.size());
    }
  }
}

// The dense llama fixture and a mixture of experts (whose experts get other rows in other steps).
TEST(BatchInvariantCpu, ProbesAloneEqualProbesInsideABatchOf64) {
  for (const char* fixture : {"llama", "qwen3_moe"}) {
    SCOPED_TRACE(fixture);
    ModelRunnerOptions o;
    o.model_dir = test::model_fixture(fixture);
    o.backend = "cpu";
    o.page_size = 4;
    o.kv_cache_bytes = int64_t(64) << 20;
    const std::vector<Request> batch = make_requests(64, 256, 23, 1, 60, 16, 64);
    std::vector<size_t> probes;
    for (size_t i = 0; i < batch.size(); i += 8) probes.push_back(i);
    check_invariance(o, batch, probes, 4096, 48, 30);
  }
}

TEST(BatchInvariantCuda, ThirtyTwoRequestsAloneEqualThemInsideA256RequestBatch) {
  if (const auto cuda = make_cuda_backend(0); !cuda.is_ok())
    GTEST_SKIP() << kNoGpu << " (" << cuda.status().message() << ")";
  ModelRunnerOptions o;
  o.model_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.2-1b";
  o.dummy_weights = true;
  o.dummy_seed = 5;
  o.backend = "cuda";
  o.page_size = 16;
  o.kv_cache_bytes = int64_t(8) << 30;
  o.max_model_len = 2048;
  o.max_step_tokens = 1024;
  o.max_graph_batch = 256;
  const std::vector<Request> batch = make_requests(256, 32000, 29, 16, 700, 24, 64);
  std::vector<size_t> probes;
  for (size_t i = 0; i < batch.size(); i += 8) probes.push_back(i);
  // Requests finish (24-64 tokens) while later prompts still prefill, so the 256 are never all in
  // one step: the widest step held 122 sequences on an H200; ask for 96.
  check_invariance(o, batch, probes, 1024, 1024, 96);
}

}  // namespace
}  // namespace fg
