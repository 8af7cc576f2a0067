// GGUF models with quantized weights on the CPU backend: every matrix is kept in the dtype the file
// stores it in (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, f16, bf16; a fused q/k/v or gate/up whose parts
// differ is kept as f32 values), norms stay f32, and the logits are bit for bit those of the same
// model written with every matrix as F32 values of its dequantized blocks: the weights the CPU
// computes with are exactly the dequantized ones, on the prefill path (many rows per GEMM) and on
// the decode path (one row per step).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dequant.h"
#include "model/generate.h"
#include "model/model.h"
#include "support/gguf_writer.h"
#include "support/weight_blocks.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::GgufWriter;

// A small llama whose rows are whole 256-value blocks (every quantized format fits).
constexpr int64_t kHidden = 256, kInter = 512, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kVocab = 300;
constexpr int kLayers = 2;

struct Layout {
  const char* name;
  DType embed, q, k, v, o, gate, up, down;
  bool tied;  // no output.weight: the LM head is the embedding table
};

GgmlType loadable_ggml_type(DType t) {
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (info != nullptr && info->loadable && info->dtype == t) return info->type;
  }
  ADD_FAILURE() << "no ggml type for " << dtype_name(t);
  return GgmlType::kF32;
}

// The model of `layout` as a GGUF file; dequantized: every matrix as F32 values of the same blocks.
GgufWriter model_file(const Layout& layout, bool dequantized) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", kLayers);
  w.u32("llama.embedding_length", kHidden);
  w.u32("llama.feed_forward_length", kInter);
  w.u32("llama.attention.head_count", kHeads);
  w.u32("llama.attention.head_count_kv", kKvHeads);
  w.u32("llama.rope.dimension_count", kHeadDim);
  w.u32("llama.context_length", 256);
  w.f32("llama.rope.freq_base", 10000.0f);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  uint32_t seed = 1;
  auto matrix = [&](const std::string& name, DType t, int64_t rows, int64_t cols) {
    const std::vector<uint8_t> bytes = test::random_weight_bytes(t, rows * cols, seed++);
    if (!dequantized) {
      w.tensor(name, loadable_ggml_type(t), {cols, rows}, std::string(bytes.begin(), bytes.end()));
      return;
    }
    std::vector<float> values(size_t(rows * cols));
    dequantize(t, bytes.data(), values.data(), rows * cols);
    w.tensor_f32(name, {rows, cols}, values.data());
  };
  auto norm = [&](const std::string& name) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    std::vector<float> v(static_cast<size_t>(kHidden));
    for (float& x : v) x = dist(rng);
    w.tensor_f32(name, {kHidden}, v.data());
  };
  matrix("token_embd.weight", layout.embed, kVocab, kHidden);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", layout.q, kHeads * kHeadDim, kHidden);
    matrix(p + "attn_k.weight", layout.k, kKvHeads * kHeadDim, kHidden);
    matrix(p + "attn_v.weight", layout.v, kKvHeads * kHeadDim, kHidden);
    matrix(p + "attn_output.weight", layout.o, kHidden, kHeads * kHeadDim);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", layout.gate, kInter, kHidden);
    matrix(p + "ffn_up.weight", layout.up, kInter, kHidden);
    matrix(p + "ffn_down.weight", layout.down, kHidden, kInter);
  }
  norm("output_norm.weight");
  if (!layout.tied) matrix("output.weight", layout.embed, kVocab, kHidden);
  return w;
}

class QuantizedWeights : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_quantized_" + std::to_string(getpid()) + "_" + GetParam().name);
    fs::create_directories(dir_);
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Model> load(bool dequantized) {
    const std::string path = (dir_ / (dequantized ? "f32.gguf" : "stored.gguf")).string();
    model_file(GetParam(), dequantized).write(path);
    auto m = Model::load(path, *backend_);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? std::move(m).value() : nullptr;
  }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(QuantizedWeights, KeptAsStoredWithTheLogitsOfTheirF32Values) {
  const Layout& l = GetParam();
  auto stored = load(false);
  auto f32 = load(true);
  ASSERT_TRUE(stored && f32);

  const ModelWeights& w = stored->weights();
  EXPECT_EQ(w.embed.dtype, l.embed);
  EXPECT_EQ(w.lm_head.dtype, l.embed);
  EXPECT_EQ(w.final_norm.dtype, DType::kF32);
  for (const LayerWeights& L : w.layers) {
    EXPECT_EQ(L.qkv.dtype, l.q == l.k && l.k == l.v ? l.q : DType::kF32);
    EXPECT_EQ(L.o.dtype, l.o);
    EXPECT_EQ(L.gate_up.dtype, l.gate == l.up ? l.gate : DType::kF32);
    EXPECT_EQ(L.down.dtype, l.down);
    EXPECT_EQ(L.input_norm.dtype, DType::kF32);
  }
  for (const LayerWeights& L : f32->weights().layers) EXPECT_EQ(L.qkv.dtype, DType::kF32);

  std::vector<int32_t> prompt;
  // 40 tokens: more rows than any kernel set takes through the GEMV path.
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 37 + 11) % kVocab));
  for (int chunk : {0, 1}) {  // the whole prompt in one step (prefill), then one token per step (decode)
    auto got = prompt_logits(*stored, prompt, 16, chunk);
    auto want = prompt_logits(*f32, prompt, 16, chunk);
    ASSERT_TRUE(got.is_ok() && want.is_ok());
    ASSERT_EQ(got->size(), want->size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got->size(); ++i) mismatches += (*got)[i] != (*want)[i] || !std::isfinite((*got)[i]);
    EXPECT_EQ(mismatches, 0u) << "chunk " << chunk << ": logits differ from the dequantized model's";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, QuantizedWeights,
    ::testing::Values(Layout{"q8_0", DType::kQ8_0, DType::kQ8_0, DType::kQ8_0, DType::kQ8_0, DType::kQ8_0, DType::kQ8_0,
                             DType::kQ8_0, DType::kQ8_0, false},
                      Layout{"q4_0", DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, DType::kQ4_0,
                             DType::kQ4_0, DType::kQ4_0, true},
                      Layout{"q4_1", DType::kQ4_1, DType::kQ4_1, DType::kQ4_1, DType::kQ4_1, DType::kQ4_1, DType::kQ4_1,
                             DType::kQ4_1, DType::kQ4_1, true},
                      Layout{"q4_k", DType::kQ4_K, DType::kQ4_K, DType::kQ4_K, DType::kQ4_K, DType::kQ4_K, DType::kQ4_K,
                             DType::kQ4_K, DType::kQ4_K, false},
                      Layout{"q5_k", DType::kQ5_K, DType::kQ5_K, DType::kQ5_K, DType::kQ5_K, DType::kQ5_K, DType::kQ5_K,
                             DType::kQ5_K, DType::kQ5_K, false},
                      Layout{"q6_k", DType::kQ6_K, DType::kQ6_K, DType::kQ6_K, DType::kQ6_K, DType::kQ6_K, DType::kQ6_K,
                             DType::kQ6_K, DType::kQ6_K, true},
                      Layout{"f16", DType::kF16, DType::kF16, DType::kF16, DType::kF16, DType::kF16, DType::kF16,
                             DType::kF16, DType::kF16, false},
                      Layout{"bf16", DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16,
                             DType::kBF16, DType::kBF16, true},
                      // As llama.cpp's Q4_K_M mixes them: parts of one fused matrix in different formats.
                      Layout{"mixed", DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kQ5_K,
                             DType::kQ4_1, DType::kQ4_1, DType::kQ6_K, true},
                      Layout{"mixed_mlp", DType::kQ6_K, DType::kQ4_K, DType::kQ4_K, DType::kQ4_K, DType::kQ4_K,
                             DType::kQ4_K, DType::kQ5_K, DType::kF16, false}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace fg
