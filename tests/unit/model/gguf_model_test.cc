// GGUF checkpoints through Model::load: each fixture model (llama, llama_bf16, llama3_tied,
// mistral, qwen2, qwen3), written as a GGUF file the way llama.cpp's converter writes it (GGUF
// tensor names, llama-style q/k rows permuted, config as metadata, Llama 3 scaling as
// rope_freqs.weight), loads to the same config and gives the same logits on the CPU as its
// safetensors original. Broken or unsupported GGUF models fail with one line naming the file and
// the architecture, tensor, type or key.
#include "model/gguf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "backend/backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/gguf_writer.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using test::GgufWriter;

struct Variant {
  const char* fixture;
  const char* arch;  // general.architecture to write
  int prompt_len;    // qwen2: within its sliding window, which GGUF qwen2 files do not carry
};

// Rows of a q/k projection in llama.cpp's order: per head, Hugging Face's row (i * half + j) is
// stored at row (2 * j + i).
std::string permute_rows(const std::string& bytes, int64_t rows, int heads) {
  std::string out(bytes.size(), '\0');
  const size_t row_bytes = bytes.size() / size_t(rows);
  const int64_t per_head = rows / heads, half = per_head / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(&out[size_t(h * per_head + 2 * j + i) * row_bytes],
                    &bytes[size_t(h * per_head + i * half + j) * row_bytes], row_bytes);
  return out;
}

GgmlType ggml_type_of(DType t) {
  switch (t) {
    case DType::kF16: return GgmlType::kF16;
    case DType::kBF16: return GgmlType::kBF16;
    default: return GgmlType::kF32;
  }
}

// The fixture's config as GGUF metadata and its tensors under GGUF names.
GgufWriter fixture_as_gguf(const std::string& dir, const std::string& arch) {
  auto c = load_model_config(dir);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  auto ckpt = SafetensorsCheckpoint::open(dir);
  EXPECT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  GgufWriter w;
  const std::string p = arch + ".";
  w.str("general.architecture", arch);
  w.u32(p + "block_count", uint32_t(c->num_layers));
  w.u32(p + "embedding_length", uint32_t(c->hidden_size));
  w.u32(p + "feed_forward_length", uint32_t(c->intermediate_size));
  w.u32(p + "attention.head_count", uint32_t(c->num_q_heads));
  w.u32(p + "attention.head_count_kv", uint32_t(c->num_kv_heads));
  w.u32(p + "attention.key_length", uint32_t(c->head_dim));
  w.u32(p + "attention.value_length", uint32_t(c->head_dim));
  w.u32(p + "rope.dimension_count", uint32_t(c->rotary_dim));
  w.u32(p + "context_length", uint32_t(c->max_position_embeddings));
  w.f32(p + "rope.freq_base", float(c->rope.theta));
  w.f32(p + "attention.layer_norm_rms_epsilon", float(c->rms_norm_eps));
  if (c->rope.type == RopeScaling::kLinear) {
    w.str(p + "rope.scaling.type", "linear");
    w.f32(p + "rope.scaling.factor", float(c->rope.factor));
  }
  if (c->layer_sliding_window[0] > 0 && arch == "mistral")
    w.u32(p + "attention.sliding_window", uint32_t(c->layer_sliding_window[0]));
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  if (c->rope.type == RopeScaling::kLlama3) {
    // llama.cpp's per-frequency divisors for Llama 3 scaling.
    const RopeConfig& r = c->rope;
    std::vector<float> div(size_t(c->rotary_dim / 2));
    const double low_wavelen = double(r.original_max_position) / r.low_freq_factor;
    const double high_wavelen = double(r.original_max_position) / r.high_freq_factor;
    for (size_t i = 0; i < div.size(); ++i) {
      const double freq = 1.0 / std::pow(r.theta, double(2 * i) / double(c->rotary_dim));
      const double wavelen = 2.0 * M_PI / freq;
      if (wavelen < high_wavelen) {
        div[i] = 1.0f;
      } else if (wavelen > low_wavelen) {
        div[i] = float(r.factor);
      } else {
        const double smooth =
            (double(r.original_max_position) / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        div[i] = float(1.0 / ((1.0 - smooth) / r.factor + smooth));
      }
    }
    w.tensor_f32("rope_freqs.weight", {int64_t(div.size())}, div.data());
  }
  const bool permuted = arch == "llama" || arch == "mistral";
  for (int l = -1; l < c->num_layers; ++l) {
    std::vector<std::string> names;
    if (l < 0) {
      names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    } else {
      for (const char* s :
           {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
            "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight",
            "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
        names.push_back(weight_name_layer(l, s));
    }
    for (const std::string& hf : names) {
      if (!ckpt->contains(hf)) continue;
      const SafetensorsTensor* t = ckpt->get(hf).value();
      std::string bytes(static_cast<const char*>(t->data), t->nbytes);
      const std::string name = gguf_tensor_name(hf);
      if (permuted && name.find(".attn_q.") != std::string::npos)
        bytes = permute_rows(bytes, t->shape[0], c->num_q_heads);
      if (permuted && name.find(".attn_k.") != std::string::npos)
        bytes = permute_rows(bytes, t->shape[0], c->num_kv_heads);
      w.tensor(name, ggml_type_of(*t->dtype), std::vector<int64_t>(t->shape.rbegin(), t->shape.rend()), bytes);
    }
  }
  return w;
}

class GgufModelTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fg_gguf_model_" + std::to_string(getpid()) + "_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + GetParam().fixture);
    fs::create_directories(dir_);
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(GgufModelTest, SameConfigAndLogitsAsSafetensors) {
  const Variant v = GetParam();
  const std::string src = test::model_fixture(v.fixture);
  const std::string path = (dir_ / "model.gguf").string();
  fixture_as_gguf(src, v.arch).write(path);

  auto ref = Model::load(src, *backend_);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  auto m = Model::load(path, *backend_);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const ModelConfig &a = (*ref)->config(), &b = (*m)->config();
  EXPECT_EQ(b.dir, path);
  EXPECT_EQ(b.num_layers, a.num_layers);
  EXPECT_EQ(b.hidden_size, a.hidden_size);
  EXPECT_EQ(b.intermediate_size, a.intermediate_size);
  EXPECT_EQ(b.num_q_heads, a.num_q_heads);
  EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
  EXPECT_EQ(b.head_dim, a.head_dim);
  EXPECT_EQ(b.rotary_dim, a.rotary_dim);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
  EXPECT_EQ(b.options.qkv_bias, a.options.qkv_bias);
  EXPECT_EQ(b.options.qk_norm, a.options.qk_norm);
  EXPECT_FLOAT_EQ(float(b.rms_norm_eps), float(a.rms_norm_eps));
  EXPECT_EQ(b.eos_token_ids, std::vector<int64_t>{2});
  if (std::string(v.arch) != "qwen2") {
    EXPECT_EQ(b.layer_sliding_window, a.layer_sliding_window);
  }

  std::vector<int32_t> prompt;
  for (int i = 0; i < v.prompt_len; ++i) prompt.push_back(int32_t((i * 37 + 11) % a.vocab_size));
  auto want = prompt_logits(**ref, prompt, 4);
  auto got = prompt_logits(**m, prompt, 4);
  ASSERT_TRUE(want.is_ok() && got.is_ok());
  ASSERT_EQ(want->size(), got->size());
  if (a.rope.type == RopeScaling::kLlama3) {
    // The divisors round the Llama 3 frequencies a little differently from the direct formula.
    for (size_t i = 0; i < want->size(); ++i) EXPECT_NEAR((*got)[i], (*want)[i], 1e-4f) << "logit " << i;
  } else {
    EXPECT_EQ(*got, *want) << "the GGUF copy must load to the same weights";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufModelTest,
                         ::testing::Values(Variant{"llama", "llama", 20}, Variant{"llama_bf16", "llama", 20},
                                           Variant{"llama3_tied", "llama", 20}, Variant{"mistral", "mistral", 20},
                                           Variant{"qwen2", "qwen2", 8}, Variant{"qwen3", "qwen3", 20}),
                         [](const auto& p) { return std::string(p.param.fixture); });

class GgufModelErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_gguf_model_err_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loading must fail with one line naming the file and containing `what`.
  void expect_error(const GgufWriter& w, const std::string& what) {
    const std::string path = (dir_ / "m.gguf").string();
    w.write(path);
    auto m = Model::load(path, *backend_);
    ASSERT_FALSE(m.is_ok()) << "loaded, expected: " << what;
    const std::string& msg = m.status().message();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }

  GgufWriter llama() { return fixture_as_gguf(test::model_fixture("llama"), "llama"); }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(GgufModelErrorTest, NanWeightIsRefusedNamingTheTensor) {
  const std::string path = (dir_ / "m.gguf").string();
  llama().write(path);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  size_t at = 0;
  {
    auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const GgufTensorInfo* t = (*f)->find_tensor("blk.0.ffn_up.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, GgmlType::kF32);
    at = size_t(t->data - reinterpret_cast<const uint8_t*>(bytes.data())) + 4 * 3;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&bytes[at], &nan, 4);
  std::ofstream(path, std::ios::binary) << bytes;
  auto m = Model::load(path, *backend_);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("blk.0.ffn_up.weight"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("NaN or infinite value at element 3"), std::string::npos) << m.status().message();
}

TEST_F(GgufModelErrorTest, UnsupportedArchitectureByName) {
  GgufWriter w;
  w.str("general.architecture", "phi3");
  expect_error(w, "GGUF architecture 'phi3' is not supported (supported: llama, mistral, qwen2, qwen3)");
}

TEST_F(GgufModelErrorTest, MissingMetadata) {
  GgufWriter w;
  w.str("general.architecture", "qwen2");
  expect_error(w, "metadata 'qwen2.block_count' is missing");
}

TEST_F(GgufModelErrorTest, TensorOfATypeFlashgenCannotLoad) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.embedding_length", 64);
  w.u32("llama.feed_forward_length", 80);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.u32("llama.rope.dimension_count", 64);
  w.tensor("token_embd.weight", GgmlType::kQ5_0, {64, 4}, std::string(4 * 2 * 22, '\0'));
  expect_error(
      w, "tensor 'token_embd.weight' has dtype Q5_0, expected F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K");
}

TEST_F(GgufModelErrorTest, MissingTensorAndWrongShape) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.embedding_length", 64);
  w.u32("llama.feed_forward_length", 80);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  std::vector<float> embed(4 * 64, 0.5f), norm(64, 1.0f), q(32 * 64, 0.0f);
  w.tensor_f32("token_embd.weight", {4, 64}, embed.data());
  w.tensor_f32("blk.0.attn_norm.weight", {64}, norm.data());
  GgufWriter missing = w;
  expect_error(missing, "tensor 'blk.0.attn_q.weight' is missing");
  w.tensor_f32("blk.0.attn_q.weight", {32, 64}, q.data());  // 2 heads x 32 rows: expected [64, 64]
  expect_error(w, "tensor 'blk.0.attn_q.weight' has shape [32, 64], expected [64, 64]");
}

TEST_F(GgufModelErrorTest, UnsupportedRopeScalingByName) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.embedding_length", 64);
  w.u32("llama.feed_forward_length", 80);
  w.u32("llama.attention.head_count", 2);
  w.str("llama.rope.scaling.type", "yarn");
  std::vector<float> embed(4 * 64, 0.5f);
  w.tensor_f32("token_embd.weight", {4, 64}, embed.data());
  expect_error(w, "rope scaling 'yarn' (llama.rope.scaling.type) is not supported");
}

TEST_F(GgufModelErrorTest, FolderWithSeveralGgufFiles) {
  llama().write((dir_ / "a.gguf").string());
  llama().write((dir_ / "b.gguf").string());
  auto m = Model::load(dir_.string(), *backend_);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("holds 2 .gguf files"), std::string::npos) << m.status().message();
  fs::remove(dir_ / "b.gguf");
  auto one = Model::load(dir_.string(), *backend_);
  EXPECT_TRUE(one.is_ok()) << one.status().to_string();
}

}  // namespace
}  // namespace fg
