// Tensor parallelism (model/tensor_parallel.h, backend/communicator.h): a model split over N ranks
// must give the logits of the whole model.
//  - TensorParallelCpu.*: N CPU backends as threads with the in-process communicator (CI). Logits
//    of TP = 2 and 4 against TP = 1 within f32 reduction-order noise: |a - b| <= 1e-4 * max|logit|
//    of the row (the ranks' partial sums are added in a different order than one GEMM adds them);
//    a size-1 communicator gives bit-identical logits (the same code path, nothing split); greedy
//    tokens equal through the engine (ModelRunner with --tensor-parallel-size) on fixtures and on a
//    synthetic model with more heads (kv heads < N: replicated; a vocabulary N does not divide:
//    padded); decode steps padded to a graph bucket (the CUDA graph layout, run eagerly) equal too;
//    each rank reads only its slices; bad splits are refused by name; an fp8 KV cache holds each
//    rank's kv heads with their checkpoint scales and matches TP = 1 with fp8 KV; FP8 weights (both
//    checkpoint formats, --quantization fp8) split to the whole model's values and logits.
//  - TensorParallelCuda.*: on GPUs, TP = 1 through the NCCL path against the plain path (one GPU),
//    TP = 2 shards' FP8 codes and scales against the whole model's (one GPU), and TP = 2/4/8
//    against TP = 1 within bf16 tolerance (skipped with fewer GPUs than that).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/generate.h"
#include "model/model.h"
#include "support/engine_test_util.h"
#include "support/fp8_block_checkpoint.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

constexpr float kCpuTolerance = 1e-4f;
constexpr float kCudaTolerance = 2e-2f;
constexpr int kPageSize = 4;

using test::argmax;
using test::model_fixture;
using test::top2_margin;

// ---- a synthetic checkpoint with more heads than the fixtures (f32 safetensors)

struct SynthOptions {
  int heads = 4, kv_heads = 2, head_dim = 16, hidden = 64, inter = 96, layers = 2;
  int vocab = 250;
  bool biases = true;  // attention_bias (q/k/v/o) and mlp_bias (gate/up/down)
  // Per kv head: every layer's self_attn.k_scale and v_scale (an fp8 KV cache's calibrated
  // scales); empty: none.
  std::vector<float> kv_scales;
};

void write_synthetic_model(const std::string& dir, const SynthOptions& o) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                                      << "\"hidden_size\": " << o.hidden << ", \"intermediate_size\": " << o.inter
                                      << ", \"num_hidden_layers\": " << o.layers
                                      << ", \"num_attention_heads\": " << o.heads
                                      << ", \"num_key_value_heads\": " << o.kv_heads << ", \"head_dim\": " << o.head_dim
                                      << ", \"vocab_size\": " << o.vocab
                                      << ", \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-5, "
                                      << "\"rope_theta\": 10000.0, \"tie_word_embeddings\": false, "
                                      << "\"attention_bias\": " << (o.biases ? "true" : "false")
                                      << ", \"mlp_bias\": " << (o.biases ? "true" : "false") << "}";
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { tensors.push_back({name, std::move(shape)}); };
  const int64_t h = o.hidden, q = int64_t(o.heads) * o.head_dim, kv = int64_t(o.kv_heads) * o.head_dim;
  add("model.embed_tokens.weight", {o.vocab, h});
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    add(p + "mlp.gate_proj.weight", {o.inter, h});
    add(p + "mlp.up_proj.weight", {o.inter, h});
    add(p + "mlp.down_proj.weight", {h, o.inter});
    if (o.biases) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
      add(p + "self_attn.o_proj.bias", {h});
      add(p + "mlp.gate_proj.bias", {o.inter});
      add(p + "mlp.up_proj.bias", {o.inter});
      add(p + "mlp.down_proj.bias", {h});
    }
  }
  add("model.norm.weight", {h});
  add("lm_head.weight", {o.vocab, h});
  if (!o.kv_scales.empty())
    for (int l = 0; l < o.layers; ++l)
      for (const char* kind : {"k", "v"})
        add("model.layers." + std::to_string(l) + ".self_attn." + kind + "_scale", {o.kv_heads});
  std::mt19937 rng(7);
  std::string header = "{", data;
  for (const auto& [name, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool norm = name.find("norm") != std::string::npos;
    std::uniform_real_distribution<float> dist(norm ? 0.8f : -0.25f, norm ? 1.2f : 0.25f);
    std::vector<float> v(static_cast<size_t>(n));
    if (name.find("_scale") != std::string::npos)
      v = o.kv_scales;
    else
      for (float& x : v) x = dist(rng);
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    header += std::string(header.size() > 1 ? ", " : "") + "\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [";
    for (size_t i = 0; i < shape.size(); ++i) header += (i ? ", " : "") + std::to_string(shape[i]);
    header += "], \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(data.size()) + "]}";
  }
  header += "}";
  const uint64_t len = header.size();
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header << data;
}

std::string synthetic_model(const std::string& name, const SynthOptions& o) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("flashgen_tp_test_" + std::to_string(getpid())) / name).string();
  write_synthetic_model(dir, o);
  return dir;
}

// ---- running N shards on N CPU backends, one thread per rank

std::vector<float> to_host(Backend& backend, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  backend.copy_to_host(out.data(), t.data, out.size() * sizeof(float));
  backend.synchronize();
  return out;
}

// One rank: its backend, shard and KV cache.
struct Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::optional<KvCache> cache;
};

// A model split over `comms.size()` ranks (or whole, with no communicators).
struct Shards {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<Rank> ranks;
};

// padded_decode: decode steps take the decode-graph path (fixed buffers, padded to a bucket) run
// eagerly (DecodeGraphOptions::capture = false), as on CUDA but without recording.
// kv_dtype: the KV caches' (kF32, the CPU's act dtype, or kF8E4M3).
Result<Shards> load_shards(const std::string& dir, int n, bool with_comm = true, bool padded_decode = false,
                           DType kv_dtype = DType::kF32, const WeightLoadOptions& load = {}) {
  Shards s;
  if (with_comm) s.comms = make_local_communicators(n);
  for (int r = 0; r < n; ++r) {
    Rank rank;
    rank.backend = make_cpu_backend();
    TensorParallel tp;
    if (with_comm) tp.comm = s.comms[size_t(r)].get();
    FG_ASSIGN_OR_RETURN(rank.model, Model::load(dir, *rank.backend, tp, load));
    if (padded_decode) {
      DecodeGraphOptions g;
      g.max_batch_size = 8;
      g.max_pages_per_seq = 8;
      g.capture = false;
      FG_RETURN_IF_ERROR(rank.model->enable_decode_graphs(g));
    }
    FG_ASSIGN_OR_RETURN(KvCache cache, rank.model->make_kv_cache(64, kPageSize, kv_dtype));
    rank.cache.emplace(std::move(cache));
    s.ranks.push_back(std::move(rank));
  }
  return s;
}

// Prompts of 3..12 tokens, prefilled together, then `decode` greedy steps of all of them (rank 0's
// argmax fed to every rank). Returns rank 0's logits of every step, concatenated.
std::vector<float> run_steps(Shards& s, int num_seqs, int decode) {
  const int64_t vocab = s.ranks[0].model->config().vocab_size;
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(num_seqs));
  for (auto& p : seqs) {
    p.resize(size_t(3 + rng() % 10));
    for (int32_t& t : p) t = int32_t(rng() % uint32_t(vocab));
  }
  std::vector<float> all;
  for (int step = 0; step <= decode; ++step) {
    std::vector<SequenceChunk> chunks;
    std::vector<std::vector<int32_t>> pages(seqs.size()), news(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int cached = step == 0 ? 0 : int(seqs[i].size()) - 1;
      news[i].assign(seqs[i].begin() + cached, seqs[i].end());
      for (int p = 0; p < 8; ++p) pages[i].push_back(int32_t(i) * 8 + p);
      SequenceChunk c;
      c.new_tokens = news[i];
      c.num_cached = cached;
      c.pages = pages[i];
      chunks.push_back(c);
    }
    std::vector<std::vector<float>> logits(s.ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < s.ranks.size(); ++r)
      threads.emplace_back([&, r] {
        Rank& rank = s.ranks[r];
        auto out = rank.model->forward(chunks, *rank.cache);
        EXPECT_TRUE(out.is_ok()) << out.status().to_string();
        if (out.is_ok()) logits[r] = to_host(*rank.backend, *out);
      });
    for (auto& t : threads) t.join();
    for (size_t r = 1; r < s.ranks.size(); ++r)
      EXPECT_EQ(logits[r], logits[0]) << "every rank holds the same full logits";
    all.insert(all.end(), logits[0].begin(), logits[0].end());
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].push_back(argmax(logits[0].data() + i * size_t(vocab), vocab));
  }
  return all;
}

// |a - b| <= tol * max|b| per row of `vocab` logits, and the same argmax.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t row = 0; row * size_t(vocab) < b.size(); ++row) {
    const float* x = a.data() + row * size_t(vocab);
    const float* y = b.data() + row * size_t(vocab);
    float scale = 0.0f, diff = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::fabs(y[v]));
      diff = std::max(diff, std::fabs(x[v] - y[v]));
    }
    ASSERT_LE(diff, tol * std::max(scale, 1.0f)) << "row " << row;
    EXPECT_EQ(argmax(x, vocab), argmax(y, vocab)) << "row " << row;
  }
}

void check_split(const std::string& dir, int n, const WeightLoadOptions& load = {}) {
  SCOPED_TRACE(dir + " at TP " + std::to_string(n));
  auto whole = load_shards(dir, 1, /*with_comm=*/false, /*padded_decode=*/false, DType::kF32, load);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  auto split = load_shards(dir, n, /*with_comm=*/true, /*padded_decode=*/false, DType::kF32, load);
  ASSERT_TRUE(split.is_ok()) << split.status().to_string();
  const int64_t vocab = whole->ranks[0].model->config().vocab_size;
  expect_close(run_steps(*split, 3, 4), run_steps(*whole, 3, 4), vocab, kCpuTolerance);
}

TEST(TensorParallelCpu, SizeOneCommunicatorIsBitIdenticalToThePlainPath) {
  for (const char* fixture : {"llama", "qwen2", "gemma2"}) {
    auto plain = load_shards(model_fixture(fixture), 1, /*with_comm=*/false);
    auto one = load_shards(model_fixture(fixture), 1);
    ASSERT_TRUE(plain.is_ok() && one.is_ok());
    EXPECT_EQ(run_steps(*one, 2, 3), run_steps(*plain, 2, 3)) << fixture;
  }
}

// The fixtures have 2 q heads and 1 kv head: TP = 2 splits the q heads and replicates the kv head.
TEST(TensorParallelCpu, FixturesAtTp2MatchTheWholeModel) {
  for (const char* fixture : {"llama", "llama3_tied", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "llama_bf16"})
    check_split(model_fixture(fixture), 2);
}

// 4 q heads, 2 kv heads, 96 MLP rows, biases everywhere, a vocabulary of 250: TP = 2 (kv split,
// vocabulary 2 x 125) and TP = 4 (kv heads replicated, vocabulary padded to 4 x 63).
TEST(TensorParallelCpu, SyntheticModelAtTp2And4MatchesTheWholeModel) {
  const std::string dir = synthetic_model("biases", SynthOptions{});
  check_split(dir, 2);
  check_split(dir, 4);
}

// Decode steps of 3 sequences padded to a bucket of 4 (the CUDA graph path's layout, run eagerly):
// the padded rows go through the collectives too and change nothing.
TEST(TensorParallelCpu, PaddedDecodeStepsMatchTheWholeModel) {
  const std::string dir = synthetic_model("biases", SynthOptions{});
  auto whole = load_shards(dir, 1, /*with_comm=*/false);
  auto split = load_shards(dir, 4, /*with_comm=*/true, /*padded_decode=*/true);
  ASSERT_TRUE(whole.is_ok() && split.is_ok()) << split.status().to_string();
  expect_close(run_steps(*split, 3, 5), run_steps(*whole, 3, 5), whole->ranks[0].model->config().vocab_size,
               kCpuTolerance);
  EXPECT_EQ(split->ranks[1].model->decode_graph_stats().padded_steps, 5);
}

// An fp8 KV cache under TP: each rank's cache holds its kv heads (2 kv heads: split at TP 2,
// replicated at TP 4) with the checkpoint's scales of those heads, and the logits equal TP 1's
// with fp8 KV within the TP tolerance. Head 1's scale 64 puts its K/V codes among e4m3's
// subnormals (about 3 significant bits), so a rank reading head 0's scale 1 for it would give
// other logits: the model with scales {1, 1} is shown to differ by more than the tolerance.
TEST(TensorParallelCpu, Fp8KvCacheAtTp2And4MatchesTp1) {
  SynthOptions o;
  o.kv_scales = {1.0f, 64.0f};
  const std::string dir = synthetic_model("fp8_kv", o);
  auto whole = load_shards(dir, 1, /*with_comm=*/false, false, DType::kF8E4M3);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->ranks[0].cache->dtype(), DType::kF8E4M3);
  const int64_t vocab = whole->ranks[0].model->config().vocab_size;
  const std::vector<float> reference = run_steps(*whole, 3, 4);
  for (int n : {2, 4}) {
    SCOPED_TRACE("TP " + std::to_string(n));
    auto split = load_shards(dir, n, /*with_comm=*/true, false, DType::kF8E4M3);
    ASSERT_TRUE(split.is_ok()) << split.status().to_string();
    for (int r = 0; r < n; ++r) {
      const KvCache& cache = *split->ranks[size_t(r)].cache;
      const int heads = 2 / std::min(n, 2);  // local kv heads: 1 at TP 2 and (replicated) at TP 4
      const int head0 = r * 2 / n;           // the first one's global index
      ASSERT_EQ(cache.layer(0).k.size(2), heads);
      std::vector<float> want;
      for (int l = 0; l < o.layers; ++l)
        for (int h = 0; h < heads; ++h) want.push_back(o.kv_scales[size_t(head0 + h)]);
      EXPECT_EQ(cache.scales().k, want) << "rank " << r;
      EXPECT_EQ(cache.scales().v, want) << "rank " << r;
    }
    expect_close(run_steps(*split, 3, 4), reference, vocab, kCpuTolerance);
  }
  // The scales matter: the same weights with scale 1 on both heads give other logits.
  SynthOptions ones = o;
  ones.kv_scales = {1.0f, 1.0f};
  auto unscaled = load_shards(synthetic_model("fp8_kv_ones", ones), 1, /*with_comm=*/false, false, DType::kF8E4M3);
  ASSERT_TRUE(unscaled.is_ok()) << unscaled.status().to_string();
  const std::vector<float> other = run_steps(*unscaled, 3, 4);
  ASSERT_EQ(other.size(), reference.size());
  float diff = 0.0f, scale = 0.0f;
  for (size_t i = 0; i < other.size(); ++i) {
    diff = std::max(diff, std::fabs(other[i] - reference[i]));
    scale = std::max(scale, std::fabs(reference[i]));
  }
  EXPECT_GT(diff, 10 * kCpuTolerance * scale);
}

TEST(TensorParallelCpu, EachRankReadsOnlyItsSlices) {
  SynthOptions o;
  o.biases = false;
  const std::string dir = synthetic_model("no_biases", o);
  auto whole = load_shards(dir, 1, false);
  auto split = load_shards(dir, 2);
  ASSERT_TRUE(whole.is_ok() && split.is_ok());
  const int64_t all = whole->ranks[0].model->weights().source_bytes;
  // Replicated: the norms (2 per layer and the final one), f32.
  const int64_t norms = int64_t(2 * o.layers + 1) * o.hidden * 4;
  EXPECT_EQ(all, weight_bytes(whole->ranks[0].model->weights()));
  for (const Rank& r : split->ranks) {
    EXPECT_EQ(r.model->weights().source_bytes, norms + (all - norms) / 2);
    EXPECT_EQ(r.model->weights().layers[0].qkv.size(0), (o.heads + 2 * o.kv_heads) / 2 * o.head_dim);
  }
}

// ---- FP8 weights under the split (weights.h): a part is made whole on the host (dequantized with
// its 128 x 128 block or per-channel scales, or quantized per output channel at load), then sliced,
// so every rank keeps the values the whole model keeps.

WeightLoadOptions fp8_at_load() {
  WeightLoadOptions o;
  o.quantization = LoadQuantization::kFp8;
  return o;
}

// Both FP8 checkpoint formats (the CPU keeps their exact f32 values): the fixtures' MLP rows split
// at 80, inside a 128-row scale block, and o_proj / down_proj columns too.
TEST(TensorParallelCpu, Fp8CheckpointsAtTp2MatchTheWholeModel) {
  for (const char* fixture : {"fp8_channel", "fp8_block"}) check_split(model_fixture(fixture), 2);
}

// --quantization fp8 quantizes a whole output channel before the row-parallel layers' columns are
// split: a rank quantizing only its columns would get other scales (and logits off by the FP8 error).
TEST(TensorParallelCpu, QuantizationAtLoadAtTp2MatchesTheWholeModel) {
  SynthOptions o;
  o.biases = false;
  check_split(synthetic_model("fp8_at_load", o), 2, fp8_at_load());
  check_split(model_fixture("llama"), 2, fp8_at_load());
}

// The bytes of a device tensor.
std::vector<uint8_t> bytes_of(Backend& backend, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  backend.copy_to_host(out.data(), t.data, out.size());
  backend.synchronize();
  return out;
}

// Rows [r0, r1) x columns [c0, c1) of a row-major [rows, cols] host copy of t.
std::vector<uint8_t> block_of(const std::vector<uint8_t>& v, const Tensor& t, int64_t r0, int64_t r1, int64_t c0,
                              int64_t c1) {
  const size_t e = dtype_size(t.dtype), cols = size_t(t.ndim > 1 ? t.shape[1] : 1);
  std::vector<uint8_t> out;
  for (int64_t r = r0; r < r1; ++r)
    out.insert(out.end(), v.begin() + std::ptrdiff_t((size_t(r) * cols + size_t(c0)) * e),
               v.begin() + std::ptrdiff_t((size_t(r) * cols + size_t(c1)) * e));
  return out;
}

// Rank r of 2's linear weights against the whole model's (loaded from `whole_dir`, by default the
// same checkpoint), byte for byte: o_proj and down_proj columns with every output channel's scale,
// gate/up rows with theirs. Per-channel FP8 (`per_channel`) on a backend that keeps FP8 codes
// (CUDA) must be codes, and their scales are checked too.
void check_fp8_shards(Backend& backend, const std::string& dir, const WeightLoadOptions& load, bool per_channel,
                      const std::string& whole_dir = "") {
  SCOPED_TRACE(dir);
  auto whole = Model::load(whole_dir.empty() ? dir : whole_dir, backend, TensorParallel{}, load);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  const ModelConfig& c = (*whole)->config();
  const int64_t q = c.q_dim(), inter = c.intermediate_size, hidden = c.hidden_size;
  const bool codes = per_channel && backend.weight_dtype(DType::kF8E4M3) == DType::kF8E4M3;
  auto comms = make_local_communicators(2);
  for (int r = 0; r < 2; ++r) {
    auto shard = Model::load(dir, backend, TensorParallel{comms[size_t(r)].get()}, load);
    ASSERT_TRUE(shard.is_ok()) << shard.status().to_string();
    for (size_t l = 0; l < size_t(c.num_layers); ++l) {
      SCOPED_TRACE("rank " + std::to_string(r) + " layer " + std::to_string(l));
      const LayerWeights& W = (*whole)->weights().layers[l];
      const LayerWeights& S = (*shard)->weights().layers[l];
      for (const auto& [w, s] : {std::pair{&W.o, &S.o}, std::pair{&W.gate_up, &S.gate_up}, std::pair{&W.down, &S.down}})
        ASSERT_EQ(s->dtype, w->dtype) << "a shard keeps its weights as the whole model does";
      if (codes) {
        for (const Tensor* t : {&S.o, &S.gate_up, &S.down})
          ASSERT_EQ(t->dtype, DType::kF8E4M3) << "the CUDA backend keeps per-channel FP8 as codes";
      }
      const int64_t qs = q / 2, is = inter / 2;
      EXPECT_EQ(bytes_of(backend, S.o), block_of(bytes_of(backend, W.o), W.o, 0, hidden, r * qs, (r + 1) * qs));
      EXPECT_EQ(bytes_of(backend, S.down),
                block_of(bytes_of(backend, W.down), W.down, 0, hidden, r * is, (r + 1) * is));
      const std::vector<uint8_t> gu = bytes_of(backend, W.gate_up);
      std::vector<uint8_t> want = block_of(gu, W.gate_up, r * is, (r + 1) * is, 0, hidden);
      const std::vector<uint8_t> up = block_of(gu, W.gate_up, inter + r * is, inter + (r + 1) * is, 0, hidden);
      want.insert(want.end(), up.begin(), up.end());
      EXPECT_EQ(bytes_of(backend, S.gate_up), want);
      ASSERT_EQ(S.o_scale.defined(), codes);
      if (!codes) continue;
      // Row-parallel layers keep every output channel's scale; column-parallel ones their rows'.
      EXPECT_EQ(bytes_of(backend, S.o_scale), bytes_of(backend, W.o_scale));
      EXPECT_EQ(bytes_of(backend, S.down_scale), bytes_of(backend, W.down_scale));
      const std::vector<uint8_t> gs = bytes_of(backend, W.gate_up_scale);
      std::vector<uint8_t> want_s = block_of(gs, W.gate_up_scale, r * is, (r + 1) * is, 0, 1);
      const std::vector<uint8_t> up_s = block_of(gs, W.gate_up_scale, inter + r * is, inter + (r + 1) * is, 0, 1);
      want_s.insert(want_s.end(), up_s.begin(), up_s.end());
      EXPECT_EQ(bytes_of(backend, S.gate_up_scale), want_s);
    }
  }
}

void check_fp8_shards_on(Backend& backend) {
  check_fp8_shards(backend, model_fixture("fp8_channel"), {}, /*per_channel=*/true);
  // The 128-block fixture's shards cut its blocks (64- and 80-column slices, 80-row gate/up parts):
  // they keep the bf16 rounding of the exact values, as its twin does (the whole fixture keeps its
  // single-part o and down as codes where the backend keeps block codes).
  check_fp8_shards(backend, model_fixture("fp8_block"), {}, /*per_channel=*/false, model_fixture("fp8_block_twin"));
  SynthOptions o;
  o.biases = false;  // FP8 codes are kept only for projections without a bias
  o.head_dim = 64;   // a head size the CUDA attention kernels are built for (the model is loaded there)
  check_fp8_shards(backend, synthetic_model("fp8_at_load_hd64", o), fp8_at_load(), /*per_channel=*/true);
}

TEST(TensorParallelCpu, Fp8ShardWeightsAreSlicesOfTheWholeModels) {
  auto cpu = make_cpu_backend();
  check_fp8_shards_on(*cpu);
}

TEST(TensorParallelCpu, SplitsThatDoNotDivideAreRefusedByName) {
  const std::string dir = synthetic_model("biases", SynthOptions{});
  auto three = load_shards(dir, 3);  // 4 heads over 3 ranks
  ASSERT_FALSE(three.is_ok());
  EXPECT_NE(three.status().message().find("4 attention heads cannot be split over --tensor-parallel-size 3"),
            std::string::npos)
      << three.status().message();
  auto phi = load_shards(model_fixture("phi3"), 2);  // one head
  ASSERT_FALSE(phi.is_ok());
  EXPECT_NE(phi.status().message().find("attention heads"), std::string::npos) << phi.status().message();
  auto moe = load_shards(model_fixture("mixtral"), 2);
  ASSERT_FALSE(moe.is_ok());
  EXPECT_NE(moe.status().message().find("mixture-of-experts"), std::string::npos) << moe.status().message();
  SynthOptions eight;
  eight.heads = 8;
  eight.kv_heads = 8;
  eight.inter = 90;  // 90 rows over 4 ranks
  auto inter = load_shards(synthetic_model("inter90", eight), 4);
  ASSERT_FALSE(inter.is_ok());
  EXPECT_NE(inter.status().message().find("intermediate_size 90"), std::string::npos) << inter.status().message();
  SynthOptions kv3;
  kv3.heads = 6;
  kv3.kv_heads = 3;  // 3 kv heads over 2 ranks: neither divides the other
  kv3.inter = 96;
  auto kv = load_shards(synthetic_model("kv3", kv3), 2);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.status().message().find("key/value heads"), std::string::npos) << kv.status().message();
}

// ---- through the engine: ModelRunner with tensor_parallel_size (the step broadcast to the ranks)

// Six greedy requests of 2..31 tokens.
std::vector<Request> engine_requests(int32_t vocab) {
  std::mt19937 rng(5);
  std::vector<Request> out;
  for (int i = 0; i < 6; ++i) {
    Request r;
    const int len = 2 + int(rng() % 30);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(rng() % uint32_t(vocab)));
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = 6 + i;
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

std::vector<std::vector<int32_t>> engine_tokens(const std::string& dir, const std::string& backend, int tp,
                                                Status* error = nullptr) {
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.backend = backend;
  o.page_size = kPageSize;
  o.kv_cache_bytes = int64_t(4) << 20;
  o.tensor_parallel_size = tp;
  o.max_graph_batch = 16;
  auto runner = ModelRunner::create(o);
  if (!runner.is_ok()) {
    if (error) *error = runner.status();
    return {};
  }
  EXPECT_EQ((*runner)->tensor_parallel_size(), tp);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 24;  // chunked prefills next to decodes
  config.scheduler.max_running = 8;
  const test::EngineRun run = test::run_engine(**runner, config, engine_requests((*runner)->vocab_size()));
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& o : run.outputs) out.push_back(o.output_ids);
  return out;
}

TEST(TensorParallelCpu, EngineGreedyTokensMatchTp1) {
  const std::string synth = synthetic_model("biases", SynthOptions{});
  for (const auto& [dir, n] : std::vector<std::pair<std::string, int>>{
           {model_fixture("llama"), 2}, {model_fixture("qwen3"), 2}, {synth, 2}, {synth, 4}}) {
    SCOPED_TRACE(dir + " at TP " + std::to_string(n));
    const auto one = engine_tokens(dir, "cpu", 1);
    ASSERT_EQ(one.size(), 6u);
    EXPECT_EQ(engine_tokens(dir, "cpu", n), one);
  }
}

// The default GGUF model (Q4_1 blocks, 9 q heads / 3 kv heads, tied embeddings) split over 3
// ranks: its q/k rows come out of the GGUF source reordered, o/down are column slices on block
// boundaries. Skipped when models/ has not been fetched (scripts/setup.sh).
TEST(TensorParallelCpu, DefaultGgufModelAtTp3GivesTheTokensOfTp1) {
  const std::string gguf = std::string(FG_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(gguf)) GTEST_SKIP() << gguf << " is missing (scripts/setup.sh fetches it)";
  const auto one = engine_tokens(gguf, "cpu", 1);
  ASSERT_EQ(one.size(), 6u);
  EXPECT_EQ(engine_tokens(gguf, "cpu", 3), one);
}

TEST(TensorParallelCpu, RunnerRefusesBadSizes) {
  Status error;
  EXPECT_TRUE(engine_tokens(model_fixture("llama"), "cpu", 0, &error).empty());
  EXPECT_NE(error.message().find("--tensor-parallel-size must be in [1, 64]"), std::string::npos) << error.message();
  EXPECT_TRUE(engine_tokens(model_fixture("llama"), "cpu", 3, &error).empty());
  EXPECT_NE(error.message().find("cannot be split over --tensor-parallel-size 3"), std::string::npos)
      << error.message();
}

// ---- CUDA: skipped without the GPUs each case needs

int cuda_devices() {
  int n = 0;
  while (make_cuda_backend(n).is_ok()) ++n;
  return n;
}

// TP = 1 through the NCCL path (a size-1 communicator: shard lookup, all-reduce, all-gather)
// against the plain path on one GPU: the same bf16 ops, so the same logits up to collective rounding
// (none at size 1).
TEST(TensorParallelCuda, Tp1ThroughNcclMatchesThePlainPath) {
  auto cuda = make_cuda_backend(0);
  if (!cuda.is_ok()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda.status().message();
  Backend& backend = **cuda;
  auto comms = make_nccl_communicators({&backend});
  ASSERT_TRUE(comms.is_ok()) << comms.status().to_string();
  for (const char* fixture : {"llama", "qwen2", "gemma2"}) {
    SCOPED_TRACE(fixture);
    auto plain = Model::load(model_fixture(fixture), backend);
    auto one = Model::load(model_fixture(fixture), backend, {(*comms)[0].get()});
    ASSERT_TRUE(plain.is_ok() && one.is_ok());
    auto cache_a = (*plain)->make_kv_cache(64, kPageSize);
    auto cache_b = (*one)->make_kv_cache(64, kPageSize);
    ASSERT_TRUE(cache_a.is_ok() && cache_b.is_ok());
    std::vector<int32_t> prompt = {1, 5, 9, 33, 70, 2, 8};
    std::vector<int32_t> pages = {0, 1, 2};
    SequenceChunk c;
    c.new_tokens = prompt;
    c.pages = pages;
    c.logits = LogitsWanted::kAll;
    auto a = (*plain)->forward({&c, 1}, *cache_a);
    ASSERT_TRUE(a.is_ok());
    const std::vector<float> la = to_host(backend, *a);
    auto b = (*one)->forward({&c, 1}, *cache_b);
    ASSERT_TRUE(b.is_ok());
    // The same kernels on the same values: equal but for GEMM algorithm choices.
    expect_close(to_host(backend, *b), la, (*plain)->config().vocab_size, 1e-3f);
  }
}

// A fine-grained checkpoint whose slices at TP = 2 are whole 128 x 128 blocks (head_dim 128: each
// rank's q, k and v rows and o, down columns are multiples of 128), on a backend that keeps FP8
// codes: each rank keeps codes with block scales, and its codes and scales are the whole model's
// slices (a column-parallel layer its block rows, a row-parallel one its block columns).
TEST(TensorParallelCpu, Fp8BlockShardsKeepTheirBlocksScales) {
  const auto dir = std::filesystem::temp_directory_path() / ("fg_tp_fp8_block_" + std::to_string(getpid()));
  test::Fp8BlockLlamaShape shape;
  shape.head_dim = 128;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.inter = 512;
  test::write_fp8_block_llama(dir / "fp8", dir / "twin", 7, shape);
  test::CodesKeepingCpu backend;
  auto whole = Model::load((dir / "fp8").string(), backend);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  auto comms = make_local_communicators(2);
  // Rows [r0, r1) x columns [c0, c1) of a scale tensor (row stride from the tensor).
  auto scale_block = [](const Tensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    std::vector<float> out;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) out.push_back(static_cast<const float*>(t.data)[r * t.stride[0] + c]);
    return out;
  };
  auto all = [&](const Tensor& t) { return scale_block(t, 0, t.shape[0], 0, t.shape[1]); };
  for (int r = 0; r < 2; ++r) {
    auto shard = Model::load((dir / "fp8").string(), backend, TensorParallel{comms[size_t(r)].get()});
    ASSERT_TRUE(shard.is_ok()) << shard.status().to_string();
    const LayerWeights& W = (*whole)->weights().layers[0];
    const LayerWeights& S = (*shard)->weights().layers[0];
    for (const Tensor* t : {&S.qkv, &S.o, &S.gate_up, &S.down}) ASSERT_EQ(t->dtype, DType::kF8E4M3);
    for (const Tensor* t : {&S.qkv_scale, &S.o_scale, &S.gate_up_scale, &S.down_scale}) ASSERT_EQ(t->ndim, 2);
    // qkv block rows: q 4 (2 per rank), k 2, v 2 (1 per rank each); hidden 256 = 2 block columns.
    std::vector<float> qkv = scale_block(W.qkv_scale, 2 * r, 2 * r + 2, 0, 2);
    for (int64_t part : {4, 6}) {
      const std::vector<float> kv = scale_block(W.qkv_scale, part + r, part + r + 1, 0, 2);
      qkv.insert(qkv.end(), kv.begin(), kv.end());
    }
    EXPECT_EQ(all(S.qkv_scale), qkv);
    // gate/up block rows: gate 4 (2 per rank), then up 4.
    std::vector<float> gu = scale_block(W.gate_up_scale, 2 * r, 2 * r + 2, 0, 2);
    const std::vector<float> up = scale_block(W.gate_up_scale, 4 + 2 * r, 4 + 2 * r + 2, 0, 2);
    gu.insert(gu.end(), up.begin(), up.end());
    EXPECT_EQ(all(S.gate_up_scale), gu);
    // o and down: every block row, the rank's 2 of 4 block columns.
    EXPECT_EQ(all(S.o_scale), scale_block(W.o_scale, 0, 2, 2 * r, 2 * r + 2));
    EXPECT_EQ(all(S.down_scale), scale_block(W.down_scale, 0, 2, 2 * r, 2 * r + 2));
    EXPECT_EQ(S.o_scale.stride[0], 4);
    // The codes: o's columns of the rank.
    const auto* wo = static_cast<const uint8_t*>(W.o.data);
    const auto* so = static_cast<const uint8_t*>(S.o.data);
    for (int64_t i = 0; i < 256; ++i)
      ASSERT_EQ(std::memcmp(so + i * 256, wo + i * 512 + r * 256, 256), 0) << "o row " << i;
  }
  std::filesystem::remove_all(dir);
}

// The CUDA backend keeps per-channel FP8 weights as e4m3 codes with [n] scales: a shard's codes and
// scales are the whole model's slices (the ranks are loaded on one GPU; nothing runs).
TEST(TensorParallelCuda, Fp8ShardCodesAndScalesAreSlicesOfTheWholeModels) {
  auto cuda = make_cuda_backend(0);
  if (!cuda.is_ok()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda.status().message();
  check_fp8_shards_on(**cuda);
}

// TP = N on N GPUs against TP = 1 through the engine: greedy tokens equal, except where the
// whole model's two best logits are within bf16 tolerance (a tie rounding may break either way).
TEST(TensorParallelCuda, EngineTokensAtTp2And4And8MatchTp1) {
  const int gpus = cuda_devices();
  if (gpus < 2) GTEST_SKIP() << "tensor parallelism needs at least 2 GPUs, found " << gpus;
  const std::string synth = synthetic_model("cuda_heads8", [] {
    SynthOptions o;
    o.heads = 8;
    o.kv_heads = 8;
    o.head_dim = 64;
    o.hidden = 128;
    o.inter = 256;
    return o;
  }());
  const auto one = engine_tokens(synth, "cuda", 1);
  ASSERT_EQ(one.size(), 6u);
  for (int n : {2, 4, 8}) {
    if (n > gpus) {
      std::printf("TP %d skipped: %d GPUs\n", n, gpus);
      continue;
    }
    SCOPED_TRACE("TP " + std::to_string(n));
    const auto split = engine_tokens(synth, "cuda", n);
    ASSERT_EQ(split.size(), one.size());
    auto cuda = make_cuda_backend(0);
    ASSERT_TRUE(cuda.is_ok());
    auto reference = Model::load(synth, **cuda);
    ASSERT_TRUE(reference.is_ok());
    const int64_t vocab = (*reference)->config().vocab_size;
    const std::vector<Request> requests = engine_requests(int32_t(vocab));
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(split[i].size(), one[i].size());
      size_t k = 0;
      while (k < one[i].size() && one[i][k] == split[i][k]) ++k;
      if (k == one[i].size()) continue;
      std::vector<int32_t> prefix = requests[i].prompt_ids;
      prefix.insert(prefix.end(), one[i].begin(), one[i].begin() + std::ptrdiff_t(k));
      auto logits = prompt_logits(**reference, prefix, 16);
      ASSERT_TRUE(logits.is_ok());
      const float* row = logits->data() + (prefix.size() - 1) * size_t(vocab);
      float scale = 0.0f;
      for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(row[v]));
      EXPECT_LE(top2_margin(row, vocab), 2 * kCudaTolerance * scale)
          << "request " << i << ": TP " << n << " parts from TP 1 at output token " << k << " without a near tie";
    }
  }
}

}  // namespace
}  // namespace fg
