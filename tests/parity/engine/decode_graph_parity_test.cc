// Decode graphs vs eager steps (model.h, "Decode graphs"): the same fixture model run with
// Model::enable_decode_graphs and without must give the same logits and the same greedy tokens.
//
//  - DecodeGraphCpu.*: the CPU backend has no graphs, but runs the same padded fixed-buffer path
//    eagerly (DecodeGraphOptions::capture = false). Checks the padding: logits equal to the eager
//    ones (f32, 1e-4 of max|logit|), padded rows never write the KV cache (page 0, which no
//    sequence owns, keeps a sentinel), steps larger than the bucket cap stay eager. Runs in CI.
//  - DecodeGraphCuda.*: on a GPU, the real thing: graphs recorded per (batch, page) bucket and
//    replayed, logits within bf16 tolerance (2e-2 of max|logit|) of eager steps on the same
//    tokens, and the engine (ModelRunner with cuda_graphs on vs off) giving the same greedy tokens
//    for a mixed batch of requests. Skipped when no GPU is found.
//  - *Fp8Kv*: the same over an fp8 KV cache (--kv-cache-dtype fp8): its scales are read in place by
//    the recorded graphs.
//
// Greedy tokens are compared where they can be: a step whose two best logits are closer than the
// tolerance is a tie that rounding may break either way, so tokens must agree everywhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/generate.h"
#include "model/model.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

constexpr float kCpuTolerance = 1e-4f;
constexpr float kCudaTolerance = 2e-2f;
constexpr int kPageSize = 4;
constexpr uint8_t kSentinel = 0x3c;

using test::argmax;
using test::model_fixture;
using test::top2_margin;

std::unique_ptr<Backend> cuda_or_null() {
  auto cuda = make_cuda_backend(0);
  return cuda.is_ok() ? std::move(cuda).value() : nullptr;
}

constexpr const char* kNoGpu =
    "no usable CUDA GPU (make_cuda_backend failed): decode graphs are checked on the "
    "GPU machine only";

std::vector<float> to_host(Backend& backend, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  backend.copy_to_host(out.data(), t.data, out.size() * sizeof(float));
  backend.synchronize();
  return out;
}

// Prompts of min_len..min_len + 18 tokens (page size 4: several pages, some crossing a page during
// decode).
std::vector<std::vector<int32_t>> make_prompts(int n, int vocab, uint32_t seed, int min_len) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (auto& p : out) {
    p.resize(size_t(min_len + rng() % 19));
    for (int32_t& t : p) t = int32_t(1 + rng() % uint32_t(vocab - 1));
  }
  return out;
}

// One run: all prompts prefilled in one (eager) step, then `steps` decode steps of every sequence
// at once. Sequence s owns pages [1 + s * pages_per_seq, ...); page 0 belongs to nobody.
// With `forced` the decode inputs are those tokens (teacher forcing), else the greedy ones.
struct DecodeRun {
  std::vector<std::vector<float>> logits;  // per decode step: [num_seqs, vocab]
  std::vector<std::vector<int32_t>> fed;   // per decode step: the token fed to each sequence
};

DecodeRun run_decode(Model& model, KvCache& cache, const std::vector<std::vector<int32_t>>& prompts, int steps,
                     int pages_per_seq, const std::vector<std::vector<int32_t>>* forced) {
  Backend& backend = model.backend();
  const int64_t vocab = model.config().vocab_size;
  const int S = int(prompts.size());
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s)
    for (int p = 0; p < pages_per_seq; ++p) pages[size_t(s)].push_back(1 + s * pages_per_seq + p);
  std::vector<int> cached(static_cast<size_t>(S), 0);
  std::vector<int32_t> next(static_cast<size_t>(S));
  DecodeRun run;
  for (int step = 0; step <= steps; ++step) {
    std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(S));
    std::vector<SequenceChunk> chunks;
    for (int s = 0; s < S; ++s) {
      inputs[size_t(s)] = step == 0 ? prompts[size_t(s)] : std::vector<int32_t>{next[size_t(s)]};
      chunks.push_back({inputs[size_t(s)], cached[size_t(s)], pages[size_t(s)], LogitsWanted::kLast});
    }
    auto logits = model.forward(chunks, cache);
    EXPECT_TRUE(logits.is_ok()) << logits.status().to_string();
    if (!logits.is_ok()) return run;
    EXPECT_EQ(logits->shape[0], S) << "padded rows must not be returned";
    std::vector<float> host = to_host(backend, *logits);
    for (int s = 0; s < S; ++s) cached[size_t(s)] += int(inputs[size_t(s)].size());
    if (step > 0) {
      run.logits.push_back(host);
      run.fed.push_back(next);
    }
    for (int s = 0; s < S; ++s)
      next[size_t(s)] = forced && step < int(forced->size()) ? (*forced)[size_t(step)][size_t(s)]
                                                             : argmax(host.data() + size_t(s) * size_t(vocab), vocab);
  }
  return run;
}

// Fills page 0 of every layer with the sentinel byte.
void poison_page0(Backend& backend, KvCache& cache) {
  const size_t bytes = size_t(cache.layer(0).k.stride[0]) * dtype_size(cache.layer(0).k.dtype);
  std::vector<uint8_t> fill(bytes, kSentinel);
  for (int l = 0; l < cache.num_layers(); ++l) {
    backend.copy_from_host(cache.layer(l).k.data, fill.data(), bytes);
    backend.copy_from_host(cache.layer(l).v.data, fill.data(), bytes);
  }
  backend.synchronize();
}

// Whether page 0 of every layer still holds the sentinel.
bool page0_intact(Backend& backend, KvCache& cache) {
  const size_t bytes = size_t(cache.layer(0).k.stride[0]) * dtype_size(cache.layer(0).k.dtype);
  std::vector<uint8_t> got(bytes);
  for (int l = 0; l < cache.num_layers(); ++l) {
    for (const Tensor* t : {&cache.layer(l).k, &cache.layer(l).v}) {
      backend.copy_to_host(got.data(), t->data, bytes);
      backend.synchronize();
      if (std::any_of(got.begin(), got.end(), [](uint8_t b) { return b != kSentinel; })) return false;
    }
  }
  return true;
}

// Eager steps, then the same tokens through the decode graph path; compares every decode step.
void check_fixture(Backend& backend, const std::string& name, int num_seqs, const DecodeGraphOptions& options,
                   float tolerance, bool expect_padded, int min_prompt = 2,
                   std::optional<DType> kv_dtype = std::nullopt) {
  SCOPED_TRACE(name + ", " + std::to_string(num_seqs) + " sequences, graph batch cap " +
               std::to_string(options.max_batch_size) + (kv_dtype ? ", fp8 KV" : ""));
  const DType cache_dtype = kv_dtype.value_or(backend.act_dtype());
  auto loaded = Model::load(model_fixture(name), backend);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  Model& model = **loaded;
  const int64_t vocab = model.config().vocab_size;
  const int steps = 12;
  const auto prompts = make_prompts(num_seqs, int(vocab), 7u + uint32_t(num_seqs), min_prompt);
  const int pages_per_seq = kv_pages_for(min_prompt + 18 + steps + 1, kPageSize);
  const int num_pages = 1 + num_seqs * pages_per_seq;

  auto eager_cache = model.make_kv_cache(num_pages, kPageSize, cache_dtype);
  ASSERT_TRUE(eager_cache.is_ok());
  const DecodeRun eager = run_decode(model, *eager_cache, prompts, steps, pages_per_seq, nullptr);
  ASSERT_EQ(int(eager.logits.size()), steps);

  DecodeGraphOptions o = options;
  o.max_pages_per_seq = pages_per_seq;
  ASSERT_TRUE(model.enable_decode_graphs(o).is_ok());
  auto graph_cache = model.make_kv_cache(num_pages, kPageSize, cache_dtype);
  ASSERT_TRUE(graph_cache.is_ok());
  poison_page0(backend, *graph_cache);
  const DecodeRun graph = run_decode(model, *graph_cache, prompts, steps, pages_per_seq, &eager.fed);
  ASSERT_EQ(int(graph.logits.size()), steps);

  const DecodeGraphStats stats = model.decode_graph_stats();
  if (expect_padded) {
    EXPECT_EQ(stats.padded_steps, steps) << "every decode step should take the fixed-buffer path";
    if (o.capture) {
      EXPECT_EQ(stats.replays + stats.captures, steps) << "a step either records its bucket's graph or replays it";
      EXPECT_GE(stats.captures, 1);
      EXPECT_GT(stats.replays, stats.captures) << "most steps should replay";
      EXPECT_EQ(stats.captures, stats.num_graphs) << "no graph should be recorded twice";
    }
  } else {
    EXPECT_EQ(stats.padded_steps, 0) << "steps above the bucket cap must run eagerly";
  }
  EXPECT_TRUE(page0_intact(backend, *graph_cache)) << "a padded row wrote into the KV cache";

  for (int step = 0; step < steps; ++step) {
    const std::vector<float>& a = eager.logits[size_t(step)];
    const std::vector<float>& b = graph.logits[size_t(step)];
    ASSERT_EQ(a.size(), b.size());
    for (int s = 0; s < num_seqs; ++s) {
      const float* ra = a.data() + size_t(s) * size_t(vocab);
      const float* rb = b.data() + size_t(s) * size_t(vocab);
      float scale = 0.0f, diff = 0.0f;
      for (int64_t i = 0; i < vocab; ++i) {
        scale = std::max(scale, std::fabs(ra[i]));
        diff = std::max(diff, std::fabs(ra[i] - rb[i]));
      }
      const float tol = tolerance * std::max(scale, 1e-3f);
      EXPECT_LE(diff, tol) << "step " << step << " sequence " << s << ": logits differ by " << diff;
      if (top2_margin(ra, vocab) > 2 * tol) {
        EXPECT_EQ(argmax(ra, vocab), argmax(rb, vocab)) << "greedy token differs at step " << step << " sequence " << s;
      }
    }
  }
}

// Verification-width steps (DecodeGraphOptions::max_query_len > 1): after a prefill, every step
// feeds each sequence 1..width tokens (a random count, as speculative verification does) and asks
// for the logits of all of them. The same steps run eagerly and through the graph path (laid out
// at width tokens per sequence, the tail rows belonging to no sequence) must give the same logits,
// and padding must never write the KV cache.
void check_verify_steps(Backend& backend, const std::string& name, int num_seqs, int width, bool capture,
                        float tolerance) {
  SCOPED_TRACE(name + ", " + std::to_string(num_seqs) + " sequences, width " + std::to_string(width));
  auto loaded = Model::load(model_fixture(name), backend);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  Model& model = **loaded;
  const int64_t vocab = model.config().vocab_size;
  const int steps = 8;
  const auto prompts = make_prompts(num_seqs, int(vocab), 31u + uint32_t(num_seqs), 3);
  std::mt19937 rng(5);
  // lens[step][s] tokens fed at each step, drawn from stream[s].
  std::vector<std::vector<int>> lens(steps, std::vector<int>(size_t(num_seqs)));
  std::vector<std::vector<int32_t>> stream(static_cast<size_t>(num_seqs));
  for (auto& step : lens)
    for (int& n : step) n = 1 + int(rng() % uint32_t(width));
  for (auto& st : stream)
    for (int i = 0; i < steps * width; ++i) st.push_back(int32_t(1 + rng() % uint32_t(vocab - 1)));
  const int pages_per_seq = kv_pages_for(3 + 18 + steps * width + 1, kPageSize);
  const int num_pages = 1 + num_seqs * pages_per_seq;

  auto run = [&](KvCache& cache) {
    std::vector<std::vector<float>> out;
    std::vector<std::vector<int32_t>> pages(static_cast<size_t>(num_seqs));
    for (int s = 0; s < num_seqs; ++s)
      for (int p = 0; p < pages_per_seq; ++p) pages[size_t(s)].push_back(1 + s * pages_per_seq + p);
    std::vector<int> cached(static_cast<size_t>(num_seqs), 0), fed(static_cast<size_t>(num_seqs), 0);
    for (int step = -1; step < steps; ++step) {
      std::vector<SequenceChunk> chunks;
      for (int s = 0; s < num_seqs; ++s) {
        std::span<const int32_t> in = step < 0
                                          ? std::span<const int32_t>(prompts[size_t(s)])
                                          : std::span<const int32_t>(stream[size_t(s)])
                                                .subspan(size_t(fed[size_t(s)]), size_t(lens[size_t(step)][size_t(s)]));
        chunks.push_back(
            {in, cached[size_t(s)], pages[size_t(s)], step < 0 ? LogitsWanted::kLast : LogitsWanted::kAll});
      }
      auto logits = model.forward(chunks, cache);
      EXPECT_TRUE(logits.is_ok()) << logits.status().to_string();
      if (!logits.is_ok()) return out;
      for (int s = 0; s < num_seqs; ++s) {
        cached[size_t(s)] += int(chunks[size_t(s)].new_tokens.size());
        if (step >= 0) fed[size_t(s)] += lens[size_t(step)][size_t(s)];
      }
      if (step >= 0) out.push_back(to_host(backend, *logits));
    }
    return out;
  };
  auto eager_cache = model.make_kv_cache(num_pages, kPageSize);
  ASSERT_TRUE(eager_cache.is_ok());
  const auto eager = run(*eager_cache);
  ASSERT_EQ(int(eager.size()), steps);

  DecodeGraphOptions o;
  o.max_batch_size = 8;
  o.max_pages_per_seq = pages_per_seq;
  o.max_query_len = width;
  o.capture = capture;
  ASSERT_TRUE(model.enable_decode_graphs(o).is_ok());
  auto graph_cache = model.make_kv_cache(num_pages, kPageSize);
  ASSERT_TRUE(graph_cache.is_ok());
  poison_page0(backend, *graph_cache);
  const auto graph = run(*graph_cache);
  ASSERT_EQ(int(graph.size()), steps);
  const DecodeGraphStats stats = model.decode_graph_stats();
  EXPECT_EQ(stats.padded_steps, steps) << "every verification step should take the fixed-buffer path";
  if (capture) {
    EXPECT_GT(stats.replays, 0);
  }
  EXPECT_TRUE(page0_intact(backend, *graph_cache)) << "a padded row wrote into the KV cache";
  for (int step = 0; step < steps; ++step) {
    const std::vector<float>& a = eager[size_t(step)];
    const std::vector<float>& b = graph[size_t(step)];
    ASSERT_EQ(a.size(), b.size()) << "step " << step;
    float scale = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(a[i]));
      diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    EXPECT_LE(diff, tolerance * std::max(scale, 1e-3f)) << "step " << step;
  }
}

TEST(DecodeGraphCpu, VerificationWidthStepsMatchEager) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  check_verify_steps(*cpu, "llama", 3, 5, false, kCpuTolerance);
  check_verify_steps(*cpu, "llama_dynamic", 8, 3, false, kCpuTolerance);
  check_verify_steps(*cpu, "phi3", 8, 3, false, kCpuTolerance);
  check_verify_steps(*cpu, "qwen3_moe", 3, 5, false, kCpuTolerance);
}

TEST(DecodeGraphCuda, VerificationWidthReplaysMatchEager) {
  std::unique_ptr<Backend> cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << kNoGpu;
  check_verify_steps(*cuda, "llama", 3, 5, true, kCudaTolerance);
  check_verify_steps(*cuda, "qwen3", 8, 5, true, kCudaTolerance);
  check_verify_steps(*cuda, "llama_dynamic", 5, 3, true, kCudaTolerance);
  check_verify_steps(*cuda, "phi3", 5, 3, true, kCudaTolerance);
  check_verify_steps(*cuda, "mixtral", 3, 5, true, kCudaTolerance);
  check_verify_steps(*cuda, "gemma2", 3, 5, true, kCudaTolerance);
  check_verify_steps(*cuda, "gemma2_hd256", 3, 5, true, kCudaTolerance);
}

TEST(DecodeGraphBucket, LadderAndCap) {
  const std::vector<std::pair<int, int>> want = {{1, 1},   {2, 2},     {3, 4},     {5, 8},     {8, 8},
                                                 {9, 16},  {17, 24},   {25, 32},   {33, 48},   {49, 64},
                                                 {65, 96}, {100, 128}, {129, 160}, {250, 256}, {256, 256}};
  for (auto [n, bucket] : want) EXPECT_EQ(decode_graph_bucket(n, 256), bucket) << n << " sequences";
  EXPECT_EQ(decode_graph_bucket(20, 20), 20) << "the cap is itself a bucket";
  EXPECT_EQ(decode_graph_bucket(5, 6), 6);
}

TEST(DecodeGraphCpu, RejectsCaptureWithoutGraphs) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto model = Model::load(model_fixture("llama"), *cpu);
  ASSERT_TRUE(model.is_ok());
  DecodeGraphOptions o;
  o.max_pages_per_seq = 8;
  o.capture = true;
  EXPECT_FALSE((*model)->enable_decode_graphs(o).is_ok()) << "the CPU backend records no graphs";
  o.max_pages_per_seq = 0;
  o.capture = false;
  EXPECT_FALSE((*model)->enable_decode_graphs(o).is_ok()) << "max_pages_per_seq must be positive";
}

TEST(DecodeGraphCpu, PaddedStepsMatchEager) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  DecodeGraphOptions o;
  o.capture = false;
  o.max_batch_size = 8;
  for (const char* name : {"llama", "llama_dynamic", "mistral", "qwen2", "qwen3", "llama3_tied", "gemma2", "gemma3",
                           "phi3", "mixtral", "qwen3_moe"}) {
    check_fixture(*cpu, name, 3, o, kCpuTolerance, true);  // bucket 4
  }
  check_fixture(*cpu, "llama", 1, o, kCpuTolerance, true);    // bucket 1
  check_fixture(*cpu, "llama", 6, o, kCpuTolerance, true);    // bucket 8 (the cap)
  check_fixture(*cpu, "llama", 11, o, kCpuTolerance, false);  // above the cap: eager
}

TEST(DecodeGraphCuda, ReplaysMatchEager) {
  std::unique_ptr<Backend> cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << kNoGpu;
  DecodeGraphOptions o;
  o.capture = true;
  o.max_batch_size = 16;
  for (const char* name : {"llama", "llama_dynamic", "mistral", "qwen2", "qwen3", "llama3_tied", "chat_llama", "gemma2",
                           "gemma3", "gemma3_classic", "phi3", "mixtral", "qwen3_moe", "gemma2_hd256"}) {
    check_fixture(*cuda, name, 5, o, kCudaTolerance, true);  // bucket 8
  }
  check_fixture(*cuda, "llama", 1, o, kCudaTolerance, true);    // bucket 1
  check_fixture(*cuda, "llama", 13, o, kCudaTolerance, true);   // bucket 16 (the cap)
  check_fixture(*cuda, "llama", 17, o, kCudaTolerance, false);  // above the cap: eager
  // Short KV (above) records no split-KV merge in the graphs; long KV splits at small batches and
  // must record it.
  check_fixture(*cuda, "llama", 1, o, kCudaTolerance, true, 300);
  check_fixture(*cuda, "chat_llama", 3, o, kCudaTolerance, true, 400);
  check_fixture(*cuda, "gemma2_hd256", 1, o, kCudaTolerance, true, 300);  // head_dim 256's merge in a graph
}

TEST(DecodeGraphCpu, Fp8KvPaddedStepsMatchEager) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  DecodeGraphOptions o;
  o.capture = false;
  o.max_batch_size = 8;
  for (const char* name : {"llama", "gemma2", "qwen3_moe"})
    check_fixture(*cpu, name, 3, o, kCpuTolerance, true, 2, DType::kF8E4M3);
}

TEST(DecodeGraphCuda, Fp8KvReplaysMatchEager) {
  std::unique_ptr<Backend> cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << kNoGpu;
  DecodeGraphOptions o;
  o.capture = true;
  o.max_batch_size = 16;
  for (const char* name : {"llama", "qwen2", "gemma2", "mixtral"})
    check_fixture(*cuda, name, 5, o, kCudaTolerance, true, 2, DType::kF8E4M3);
  check_fixture(*cuda, "llama", 1, o, kCudaTolerance, true, 300, DType::kF8E4M3);  // split-KV in the graph
  check_fixture(*cuda, "chat_llama", 3, o, kCudaTolerance, true, 400, DType::kF8E4M3);
}

TEST(DecodeGraphCuda, GpuMemoryInfoIsReported) {
  std::unique_ptr<Backend> cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << kNoGpu;
  const Backend::MemoryInfo mem = cuda->memory_info();
  EXPECT_GT(mem.total_bytes, 0);
  EXPECT_GT(mem.free_bytes, 0);
  EXPECT_LE(mem.free_bytes, mem.total_bytes);
}

// The engine end to end: 24 greedy requests of mixed lengths through ModelRunner with CUDA graphs
// on and off. Where the outputs part, the eager model's logits on the common prefix must show a
// tie (top-2 margin within the bf16 tolerance); anywhere else the tokens must be equal.
// `spec`: the second run speculates (n-gram, k = 4) with verification graphs, the first does not.
// `kv_cache_dtype`: --kv-cache-dtype of both runs (the tie check reads logits with that cache too).
void check_engine_tokens(bool graphs_in_first, SpecMethod spec, const std::string& fixture = "llama",
                         const std::string& kv_cache_dtype = "auto") {
  SCOPED_TRACE(fixture + " " + kv_cache_dtype);
  if (!cuda_or_null()) GTEST_SKIP() << kNoGpu;
  std::mt19937 rng(11);
  std::vector<Request> requests;
  for (int i = 0; i < 24; ++i) {
    Request r;
    const int len = 1 + int(rng() % 40);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(3 + rng() % 250u));
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 4 + int(rng() % 28);
    r.params.ignore_eos = true;
    requests.push_back(r);
  }
  auto run = [&](bool graphs, SpecMethod method, DecodeGraphStats* stats, SpecStats* spec_stats) {
    ModelRunnerOptions o;
    o.model_dir = model_fixture(fixture);
    o.backend = "cuda";
    o.page_size = 8;
    o.kv_cache_bytes = int64_t(16) << 20;
    o.kv_cache_dtype = kv_cache_dtype;
    o.cuda_graphs = graphs;
    o.max_graph_batch = 32;
    o.graph_max_query_len = method == SpecMethod::kOff ? 1 : 5;
    auto runner = ModelRunner::create(o);
    EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
    std::vector<RequestOutput> outputs;
    if (!runner.is_ok()) return outputs;
    EXPECT_EQ((*runner)->model().decode_graphs_enabled(), graphs);
    EngineConfig config;
    config.scheduler.max_batch_tokens = 256;
    config.scheduler.max_running = 32;
    config.spec.method = method;
    config.spec.num_tokens = 4;
    config.spec.ngram = {1, 3};
    EngineCore core(config, **runner);
    std::vector<RequestHandle> handles;
    for (const Request& r : requests) {
      auto h = core.submit(r);
      EXPECT_TRUE(h.is_ok()) << h.status().to_string();
      if (h.is_ok()) handles.push_back(*h);
    }
    while (core.has_work()) {
      Status st = core.step();
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      if (!st.is_ok()) break;
    }
    for (const auto& h : handles) outputs.push_back(h.wait());
    *stats = (*runner)->model().decode_graph_stats();
    *spec_stats = core.stats().spec;
    return outputs;
  };
  DecodeGraphStats off_stats, on_stats;
  SpecStats off_spec, on_spec;
  const std::vector<RequestOutput> off = run(graphs_in_first, SpecMethod::kOff, &off_stats, &off_spec);
  const std::vector<RequestOutput> on = run(true, spec, &on_stats, &on_spec);
  ASSERT_EQ(off.size(), requests.size());
  ASSERT_EQ(on.size(), requests.size());
  if (!graphs_in_first) {
    EXPECT_EQ(off_stats.replays, 0);
  }
  EXPECT_GT(on_stats.replays, 0) << "the engine's decode steps should replay graphs";
  if (spec != SpecMethod::kOff) {
    EXPECT_GT(on_spec.accepted_tokens, 0) << "speculation should have verified drafts";
  }

  std::unique_ptr<Backend> cuda = cuda_or_null();
  auto reference = Model::load(model_fixture(fixture), *cuda);
  ASSERT_TRUE(reference.is_ok());
  const int64_t vocab = (*reference)->config().vocab_size;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_EQ(off[i].finish_reason, FinishReason::kLength);
    ASSERT_EQ(on[i].finish_reason, FinishReason::kLength);
    ASSERT_EQ(on[i].output_ids.size(), off[i].output_ids.size());
    size_t k = 0;
    while (k < off[i].output_ids.size() && off[i].output_ids[k] == on[i].output_ids[k]) ++k;
    if (k == off[i].output_ids.size()) continue;
    std::vector<int32_t> prefix = requests[i].prompt_ids;
    prefix.insert(prefix.end(), off[i].output_ids.begin(), off[i].output_ids.begin() + std::ptrdiff_t(k));
    auto logits = prompt_logits(**reference, prefix, 16, 0,
                                kv_cache_dtype == "fp8" ? std::optional<DType>(DType::kF8E4M3) : std::nullopt);
    ASSERT_TRUE(logits.is_ok());
    const float* row = logits->data() + (prefix.size() - 1) * size_t(vocab);
    float scale = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(row[v]));
    EXPECT_LE(top2_margin(row, vocab), 2 * kCudaTolerance * scale)
        << "the two runs part at output token " << k << " without a near tie";
  }
}

TEST(DecodeGraphCuda, EngineTokensMatchWithGraphsOnAndOff) {
  check_engine_tokens(false, SpecMethod::kOff);
}

// The newer families through the engine (prefix cache on, chunked prefill) with and without decode
// graphs: MoE layers, soft-capping, local/global RoPE and LongRoPE recorded into graphs.
TEST(DecodeGraphCuda, Fp8KvEngineTokensMatchWithGraphsOnAndOff) {
  check_engine_tokens(false, SpecMethod::kOff, "llama", "fp8");
}

TEST(DecodeGraphCuda, NewFamiliesEngineTokensMatchWithGraphsOnAndOff) {
  for (const char* fixture : {"mixtral", "qwen3_moe", "gemma2", "gemma3", "phi3", "gemma2_hd256"})
    check_engine_tokens(false, SpecMethod::kOff, fixture);
}

// Speculative decoding on the GPU: verification steps (1 + k query tokens, graphs of that width)
// give the tokens plain decoding gives, up to bf16 near ties.
TEST(DecodeGraphCuda, SpeculativeEngineTokensMatchPlainDecoding) {
  check_engine_tokens(true, SpecMethod::kNgram);
}

}  // namespace
}  // namespace fg
