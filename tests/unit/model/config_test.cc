// config.json parsing: both dialects (classic rope_scaling/torch_dtype and transformers-5
// rope_parameters/dtype), per-family rules (sliding-window layers, biases, q/k norms, head_dim),
// generation_config eos ids, and one-line errors that name the file.
#include "model/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/rope.h"
#include "model_test_util.h"

namespace fg {
namespace {

using model_test::fixture;
using model_test::must_load;

// A minimal valid config plus `extra` fields; a repeated key keeps its last value, so extras
// override the base fields.
std::string config_json(const std::string& arch, const std::string& extra = "") {
  return R"({"architectures": [")" + arch + R"("], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

Status parse_error(const std::string& text) {
  auto c = parse_model_config(text, "/m/config.json");
  EXPECT_FALSE(c.is_ok());
  if (c.is_ok()) return Status::ok();
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status().message();
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status().message();
  return c.status();
}

TEST(ModelConfig, TransformersFiveDialect) {
  ModelConfig c = must_load("llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_q_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 64);  // explicit in config.json (hidden / heads would be 32)
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope.type, RopeScaling::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.checkpoint_dtype, DType::kF32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int>{0, 0}));
}

TEST(ModelConfig, ClassicDialectLlama3Tied) {
  ModelConfig c = must_load("llama3_tied");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position, 64);
}

TEST(ModelConfig, ClassicDialectOldTypeKey) {
  ModelConfig c = must_load("llama_dynamic");
  EXPECT_EQ(c.rope.type, RopeScaling::kDynamic);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
  EXPECT_EQ(c.max_position_embeddings, 16);
}

TEST(ModelConfig, FamilyRules) {
  ModelConfig mistral = must_load("mistral");
  EXPECT_EQ(mistral.layer_sliding_window, (std::vector<int>{8, 8}));
  EXPECT_EQ(mistral.rope.type, RopeScaling::kLinear);
  EXPECT_FALSE(mistral.options.qkv_bias);

  ModelConfig qwen2 = must_load("qwen2");
  EXPECT_EQ(qwen2.head_dim, 64);  // derived: hidden 128 / 2 heads
  EXPECT_EQ(qwen2.layer_sliding_window, (std::vector<int>{0, 8}));
  EXPECT_TRUE(qwen2.options.qkv_bias);
  EXPECT_FALSE(qwen2.options.o_bias);
  EXPECT_FALSE(qwen2.options.qk_norm);

  ModelConfig qwen3 = must_load("qwen3");
  EXPECT_EQ(qwen3.head_dim, 64);  // explicit, not hidden / heads = 32
  EXPECT_EQ(qwen3.q_dim(), 128);
  EXPECT_EQ(qwen3.hidden_size, 64);
  EXPECT_TRUE(qwen3.options.qk_norm);
  EXPECT_FALSE(qwen3.options.qkv_bias);
  EXPECT_EQ(qwen3.layer_sliding_window, (std::vector<int>{0, 0}));
}

TEST(ModelConfig, QwenSlidingWindowWithoutLayerTypes) {
  auto on = parse_model_config(
      config_json("Qwen2ForCausalLM", R"("use_sliding_window": true, "sliding_window": 5, "max_window_layers": 1)"),
      "c");
  ASSERT_TRUE(on.is_ok()) << on.status().message();
  EXPECT_EQ(on->layer_sliding_window, (std::vector<int>{0, 5, 5}));
  auto off = parse_model_config(config_json("Qwen2ForCausalLM", R"("sliding_window": 5, "max_window_layers": 1)"), "c");
  ASSERT_TRUE(off.is_ok());
  EXPECT_EQ(off->layer_sliding_window, (std::vector<int>{0, 0, 0}));
  auto llama = parse_model_config(config_json("LlamaForCausalLM", R"("sliding_window": 5)"), "c");
  ASSERT_TRUE(llama.is_ok());
  EXPECT_EQ(llama->layer_sliding_window, (std::vector<int>{0, 0, 0}));
}

TEST(ModelConfig, BiasFlags) {
  auto llama = parse_model_config(config_json("LlamaForCausalLM", R"("attention_bias": true, "mlp_bias": true)"), "c");
  ASSERT_TRUE(llama.is_ok());
  EXPECT_TRUE(llama->options.qkv_bias);
  EXPECT_TRUE(llama->options.o_bias);
  EXPECT_TRUE(llama->options.mlp_bias);
  auto mistral = parse_model_config(config_json("MistralForCausalLM", R"("attention_bias": true)"), "c");
  ASSERT_TRUE(mistral.is_ok());
  EXPECT_FALSE(mistral->options.qkv_bias);
}

TEST(ModelConfig, RopeFormsAgree) {
  auto classic = parse_model_config(
      config_json(
          "LlamaForCausalLM",
          R"("rope_theta": 5000.0, "rope_scaling": {"type": "linear", "factor": 4.0}, "torch_dtype": "bfloat16")"),
      "c");
  auto modern = parse_model_config(
      config_json(
          "LlamaForCausalLM",
          R"("rope_parameters": {"rope_type": "linear", "rope_theta": 5000.0, "factor": 4.0}, "dtype": "bfloat16")"),
      "c");
  ASSERT_TRUE(classic.is_ok()) << classic.status().message();
  ASSERT_TRUE(modern.is_ok()) << modern.status().message();
  for (const ModelConfig* c : {&classic.value(), &modern.value()}) {
    EXPECT_EQ(c->rope.type, RopeScaling::kLinear);
    EXPECT_DOUBLE_EQ(c->rope.theta, 5000.0);
    EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
    EXPECT_EQ(c->checkpoint_dtype, DType::kBF16);
  }
  auto partial = parse_model_config(config_json("LlamaForCausalLM", R"("partial_rotary_factor": 0.5)"), "c");
  ASSERT_TRUE(partial.is_ok());
  EXPECT_EQ(partial->rotary_dim, 8);
}

TEST(ModelConfig, Errors) {
  EXPECT_NE(parse_error("{\"architectures\": [").message().find("invalid JSON"), std::string::npos);
  EXPECT_NE(parse_error("[1, 2]").message().find("JSON object"), std::string::npos);
  Status arch = parse_error(config_json("GPT2LMHeadModel"));
  EXPECT_EQ(arch.code(), ErrorCode::kUnsupported);
  EXPECT_NE(arch.message().find("unsupported architecture 'GPT2LMHeadModel'"), std::string::npos) << arch.message();
  EXPECT_NE(
      parse_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})").message().find("intermediate_size"),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"hidden_size": 64})").message().find("architectures"), std::string::npos);
  EXPECT_NE(parse_error(config_json("LlamaForCausalLM", R"("vocab_size": "100")")).message().find("vocab_size"),
            std::string::npos);
  EXPECT_NE(parse_error(config_json("LlamaForCausalLM", R"("num_key_value_heads": 3)")).message().find("multiple"),
            std::string::npos);
  EXPECT_NE(parse_error(config_json("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "yarn", "factor": 4})"))
                .message()
                .find("'yarn'"),
            std::string::npos);
  EXPECT_NE(parse_error(config_json("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "linear"})"))
                .message()
                .find("factor"),
            std::string::npos);
  EXPECT_NE(parse_error(config_json("LlamaForCausalLM", R"("hidden_act": "gelu")")).message().find("gelu"),
            std::string::npos);
  EXPECT_NE(
      parse_error(config_json("LlamaForCausalLM", R"("num_hidden_layers": -2)")).message().find("num_hidden_layers"),
      std::string::npos);
}

TEST(ModelConfig, GenerationConfigAddsEosIds) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("fg_config_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json("LlamaForCausalLM", R"("eos_token_id": [2, 7])");
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [7, 9]})";
  auto c = load_model_config(dir.string());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 7, 9}));
  std::ofstream(dir / "generation_config.json") << "{oops";
  auto bad = load_model_config(dir.string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("generation_config.json"), std::string::npos);
  fs::remove_all(dir);
  auto missing = load_model_config(dir.string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("config.json"), std::string::npos);
}

TEST(Rope, StaticTables) {
  RopeConfig r;
  r.theta = 10000.0;
  std::vector<float> base = rope_inv_freq(r, 16);
  ASSERT_EQ(base.size(), 8u);
  EXPECT_FLOAT_EQ(base[0], 1.0f);
  EXPECT_NEAR(base[4], 1.0 / std::pow(10000.0, 0.5), 1e-7);

  r.type = RopeScaling::kLinear;
  r.factor = 4.0;
  std::vector<float> lin = rope_inv_freq(r, 16);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(lin[i], base[i] / 4.0f);

  // llama3: wavelengths below original/high_freq_factor keep their frequency, above
  // original/low_freq_factor are divided by factor, in between interpolate monotonically.
  r.type = RopeScaling::kLlama3;
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position = 64;
  std::vector<float> l3 = rope_inv_freq(r, 16);
  const double kPi = 3.14159265358979323846;
  int kept = 0, divided = 0, mixed = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    double wavelen = 2 * kPi / base[i];
    if (wavelen < 16) {
      EXPECT_FLOAT_EQ(l3[i], base[i]);
      ++kept;
    } else if (wavelen > 64) {
      EXPECT_FLOAT_EQ(l3[i], base[i] / 8.0f);
      ++divided;
    } else {
      EXPECT_LT(l3[i], base[i]);
      EXPECT_GT(l3[i], base[i] / 8.0f);
      ++mixed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(mixed, 0);
}

TEST(Rope, DynamicBase) {
  RopeConfig r;
  r.type = RopeScaling::kDynamic;
  r.theta = 10000.0;
  r.factor = 2.0;
  EXPECT_DOUBLE_EQ(rope_dynamic_base(r, 16, 32, 1), 10000.0);
  EXPECT_DOUBLE_EQ(rope_dynamic_base(r, 16, 32, 32), 10000.0);
  EXPECT_NEAR(rope_dynamic_base(r, 16, 32, 64), 10000.0 * std::pow(3.0, 16.0 / 14.0), 1e-6);
  EXPECT_GT(rope_dynamic_base(r, 16, 32, 65), rope_dynamic_base(r, 16, 32, 64));
}

}  // namespace
}  // namespace fg
