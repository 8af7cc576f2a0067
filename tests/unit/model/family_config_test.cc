// config.json of the families beyond the Llama layout: Gemma 2, Gemma 3, Phi-3, Mixtral and
// Qwen3-MoE, each in the classic form and transformers 5's (they must resolve to the same
// ModelConfig), their defaults, and the options flashgen refuses by name.
#include <gtest/gtest.h>

#include <cmath>

#include "model/config.h"
#include "model/rope.h"
#include "model_test_util.h"

namespace fg {
namespace {

using model_test::fixture;
using model_test::must_load;

// A small valid config of `arch` plus `extra` fields (a repeated key keeps its last value).
std::string family_config_json(const std::string& arch, const std::string& extra = "") {
  return R"({"architectures": [")" + arch + R"("], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 100)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

ModelConfig must_parse(const std::string& text) {
  auto c = parse_model_config(text, "/m/config.json");
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? c.value() : ModelConfig{};
}

// The message of a refused config (which must be refused, in one line naming the file).
std::string refusal(const std::string& text) {
  auto c = parse_model_config(text, "/m/config.json");
  EXPECT_FALSE(c.is_ok());
  if (c.is_ok()) return "";
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status().message();
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos);
  return c.status().message();
}

void expect_same_rope(const RopeConfig& a, const RopeConfig& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_DOUBLE_EQ(a.theta, b.theta);
  EXPECT_DOUBLE_EQ(a.factor, b.factor);
  EXPECT_DOUBLE_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
  EXPECT_EQ(a.original_max_position, b.original_max_position);
  EXPECT_EQ(a.short_factor, b.short_factor);
  EXPECT_EQ(a.long_factor, b.long_factor);
  EXPECT_DOUBLE_EQ(a.attention_factor, b.attention_factor);
}

TEST(FamilyConfig, Gemma2Fixture) {
  ModelConfig c = must_load("gemma2");
  EXPECT_EQ(c.architecture, "Gemma2ForCausalLM");
  EXPECT_TRUE(c.options.norm_plus_one);
  EXPECT_TRUE(c.options.sandwich_norms);
  EXPECT_EQ(c.options.activation, Activation::kGeluTanh);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.embedding_scale, 8.0);  // sqrt(hidden 64)
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(48.0));
  EXPECT_DOUBLE_EQ(c.attn_softcap, 4.0);
  EXPECT_DOUBLE_EQ(c.final_softcap, 6.0);
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int>{8, 0, 8}));
  EXPECT_FALSE(c.local_rope.has_value());
  EXPECT_EQ(c.every_layer_window(), 0);
}

TEST(FamilyConfig, Gemma2Defaults) {
  // What the config class assumes when config.json is silent.
  ModelConfig c = must_parse(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100})");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_DOUBLE_EQ(c.attn_softcap, 50.0);
  EXPECT_DOUBLE_EQ(c.final_softcap, 30.0);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int>{4096, 0, 4096, 0}));
  EXPECT_TRUE(c.tie_word_embeddings);
  // null turns soft-capping off.
  ModelConfig off = must_parse(
      family_config_json("Gemma2ForCausalLM", R"("attn_logit_softcapping": null, "final_logit_softcapping": null)"));
  EXPECT_EQ(off.attn_softcap, 0.0);
  EXPECT_EQ(off.final_softcap, 0.0);
}

TEST(FamilyConfig, Gemma3FormsAgree) {
  const std::string modern = family_config_json("Gemma3ForCausalLM", R"("sliding_window": 16,
      "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})");
  const std::string classic =
      family_config_json("Gemma3ForCausalLM", R"("sliding_window": 16, "sliding_window_pattern": 3,
      "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0})");
  // Neither form named: the config class's defaults (1e6 global, 1e4 local, pattern 6).
  const std::string defaults = family_config_json("Gemma3ForCausalLM", R"("sliding_window": 16,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 3)");
  ModelConfig a = must_parse(modern), b = must_parse(classic), d = must_parse(defaults);
  for (const ModelConfig* c : {&a, &b, &d}) {
    EXPECT_EQ(c->layer_sliding_window, (std::vector<int>{16, 16, 0, 16}));
    EXPECT_TRUE(c->options.qk_norm);
    EXPECT_TRUE(c->options.norm_plus_one);
    EXPECT_EQ(c->final_softcap, 0.0);
    EXPECT_EQ(c->attn_softcap, 0.0);
    ASSERT_TRUE(c->local_rope.has_value());
    EXPECT_EQ(c->rope.type, RopeScaling::kLinear);
    EXPECT_DOUBLE_EQ(c->rope.theta, 1000000.0);
    EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
    EXPECT_EQ(c->local_rope->type, RopeScaling::kDefault);
    EXPECT_DOUBLE_EQ(c->local_rope->theta, 10000.0);
  }
  ModelConfig fixture_modern = must_load("gemma3"), fixture_classic = must_load("gemma3_classic");
  EXPECT_EQ(fixture_modern.layer_sliding_window, (std::vector<int>{8, 0, 8}));
  EXPECT_EQ(fixture_classic.layer_sliding_window, (std::vector<int>{8, 8, 0}));
  EXPECT_DOUBLE_EQ(fixture_classic.local_rope->theta, 20000.0);
  EXPECT_DOUBLE_EQ(fixture_classic.rope.factor, 8.0);
  // Without a pattern the config class's 6: layers 0..4 slide, 5 is global.
  ModelConfig six =
      must_parse(family_config_json("Gemma3ForCausalLM", R"("num_hidden_layers": 6, "sliding_window": 4)"));
  EXPECT_EQ(six.layer_sliding_window, (std::vector<int>{4, 4, 4, 4, 4, 0}));
}

TEST(FamilyConfig, Gemma3Refusals) {
  EXPECT_NE(refusal(family_config_json("Gemma3ForCausalLM", R"("use_bidirectional_attention": true)"))
                .find("use_bidirectional_attention"),
            std::string::npos);
  EXPECT_NE(refusal(family_config_json("Gemma3ForCausalLM", R"("attn_logit_softcapping": 50.0)"))
                .find("attn_logit_softcapping"),
            std::string::npos);
  EXPECT_NE(refusal(family_config_json("Gemma3ForCausalLM", R"("rope_parameters": {"rope_type": "default"})"))
                .find("per layer type"),
            std::string::npos);
  EXPECT_NE(
      refusal(family_config_json("Gemma3ForCausalLM", R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})"))
          .find("'dynamic'"),
      std::string::npos);
  EXPECT_NE(refusal(family_config_json("Gemma3ForCausalLM",
                                       R"("rope_parameters": {"full_attention": {}, "chunked_attention": {}})"))
                .find("chunked_attention"),
            std::string::npos);
  EXPECT_NE(
      refusal(family_config_json("Gemma3ForCausalLM", R"("hidden_activation": "relu")")).find("hidden_activation"),
      std::string::npos);
  EXPECT_NE(refusal(family_config_json("Gemma3ForCausalLM", R"("sliding_window": null)")).find("sliding_window"),
            std::string::npos);
  // Per-layer-type rope on a family that has one rope.
  EXPECT_NE(
      refusal(family_config_json("LlamaForCausalLM", R"("rope_parameters": {"full_attention": {}})")).find("per-layer"),
      std::string::npos);
}

TEST(FamilyConfig, Phi3LongRopeForms) {
  ModelConfig fx = must_load("phi3");  // the classic form
  EXPECT_TRUE(fx.options.fused_checkpoint);
  EXPECT_EQ(fx.rope.type, RopeScaling::kLongRope);
  EXPECT_EQ(fx.rotary_dim, 32);  // head_dim 64 * partial_rotary_factor 0.5
  EXPECT_EQ(fx.rope.original_max_position, 32);
  EXPECT_DOUBLE_EQ(fx.rope.factor, 4.0);  // max_position_embeddings 128 / 32
  EXPECT_DOUBLE_EQ(fx.rope.attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(32.0)));
  ASSERT_EQ(fx.rope.short_factor.size(), 16u);
  EXPECT_DOUBLE_EQ(fx.rope.long_factor[2], 4.5);
  EXPECT_EQ(fx.layer_sliding_window, (std::vector<int>{24, 24}));
  EXPECT_EQ(fx.every_layer_window(), 24);

  std::string factors;
  for (int i = 0; i < 16; ++i) factors += (i ? ", " : "") + std::to_string(1.0 + i);
  const std::string lists = R"("short_factor": [)" + factors + R"(], "long_factor": [)" + factors + "]";
  const std::string base = R"("max_position_embeddings": 4096, "partial_rotary_factor": 0.5, )";
  const std::string modern = family_config_json(
      "Phi3ForCausalLM", base + R"("rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, )" + lists +
                             R"(, "original_max_position_embeddings": 1024, "partial_rotary_factor": 0.5})");
  const std::string classic =
      family_config_json("Phi3ForCausalLM", base + R"("rope_theta": 10000.0, "original_max_position_embeddings": 1024,
          "rope_scaling": {"type": "longrope", )" +
                                                lists + "}");
  const std::string su = family_config_json("Phi3ForCausalLM", base + R"("rope_theta": 10000.0,
          "original_max_position_embeddings": 1024, "rope_scaling": {"type": "su", )" +
                                                                   lists + "}");
  ModelConfig a = must_parse(modern), b = must_parse(classic), s = must_parse(su);
  expect_same_rope(a.rope, b.rope);
  expect_same_rope(a.rope, s.rope);
  EXPECT_EQ(a.rope.original_max_position, 1024);
  EXPECT_DOUBLE_EQ(a.rope.factor, 4.0);
  // Tables: short and long differ by their factors; the attention factor scales cos and sin.
  std::vector<float> short_t = rope_inv_freq(a.rope, a.rotary_dim), long_t = rope_long_inv_freq(a.rope, a.rotary_dim);
  ASSERT_EQ(short_t.size(), 16u);
  EXPECT_FLOAT_EQ(short_t[0], 1.0f);
  EXPECT_NEAR(long_t[3], 1.0 / (4.0 * std::pow(10000.0, 6.0 / 32.0)), 1e-7);
  EXPECT_FLOAT_EQ(rope_attention_scaling(a.rope), float(a.rope.attention_factor));
  // An explicit attention_factor wins.
  ModelConfig explicit_factor =
      must_parse(family_config_json("Phi3ForCausalLM", base + R"("rope_parameters": {"rope_type": "longrope", )" +
                                                           lists + R"(, "attention_factor": 1.5})"));
  EXPECT_DOUBLE_EQ(explicit_factor.rope.attention_factor, 1.5);
  EXPECT_EQ(explicit_factor.rope.original_max_position, 4096);  // Phi-3's config default
  // Factors must cover rotary_dim / 2.
  EXPECT_NE(refusal(family_config_json("Phi3ForCausalLM", R"("rope_scaling": {"type": "longrope", "short_factor": [1.0],
                                                       "long_factor": [1.0]})"))
                .find("rotary_dim / 2"),
            std::string::npos);
  EXPECT_NE(
      refusal(family_config_json("Phi3ForCausalLM", R"("rope_scaling": {"type": "longrope", "long_factor": [1.0]})"))
          .find("short_factor"),
      std::string::npos);
  // "su" is Phi-3's old name only.
  EXPECT_NE(
      refusal(family_config_json("LlamaForCausalLM", R"("rope_scaling": {"type": "su", "factor": 2.0})")).find("'su'"),
      std::string::npos);
}

TEST(FamilyConfig, MixtralExperts) {
  ModelConfig fx = must_load("mixtral");
  EXPECT_EQ(fx.moe.num_experts, 4);
  EXPECT_EQ(fx.moe.top_k, 2);
  EXPECT_EQ(fx.moe.intermediate_size, 32);  // intermediate_size is the expert's
  EXPECT_TRUE(fx.moe.renormalize);
  EXPECT_EQ(fx.layer_moe, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(fx.layer_sliding_window, (std::vector<int>{0, 0}));
  // Either name of the expert count, and the window on every layer when set.
  ModelConfig c = must_parse(family_config_json("MixtralForCausalLM", R"("num_experts": 8, "sliding_window": 32)"));
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.every_layer_window(), 32);
  EXPECT_EQ(
      refusal(family_config_json("MixtralForCausalLM", R"("num_experts": 8, "num_local_experts": 4)")).find("differ") !=
          std::string::npos,
      true);
  EXPECT_NE(refusal(family_config_json("MixtralForCausalLM", R"("num_local_experts": 4, "num_experts_per_tok": 5)"))
                .find("num_experts_per_tok"),
            std::string::npos);
  EXPECT_NE(refusal(family_config_json("MixtralForCausalLM", R"("num_local_experts": 1024)")).find("1024 experts"),
            std::string::npos);
}

TEST(FamilyConfig, Qwen3MoeLayers) {
  ModelConfig fx = must_load("qwen3_moe");  // classic form, num_local_experts as transformers writes it
  EXPECT_EQ(fx.moe.num_experts, 8);
  EXPECT_EQ(fx.moe.top_k, 3);
  EXPECT_EQ(fx.moe.intermediate_size, 16);
  EXPECT_EQ(fx.intermediate_size, 80);  // the dense layer's
  EXPECT_FALSE(fx.moe.renormalize);
  EXPECT_EQ(fx.layer_moe, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_TRUE(fx.options.qk_norm);
  // decoder_sparse_step 2: layers 1 and 3 have experts; the flag turns the window on everywhere.
  ModelConfig c = must_parse(family_config_json("Qwen3MoeForCausalLM", R"("num_experts": 16, "num_experts_per_tok": 4,
      "moe_intermediate_size": 32, "norm_topk_prob": true, "decoder_sparse_step": 2,
      "use_sliding_window": true, "sliding_window": 64)"));
  EXPECT_EQ(c.layer_moe, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int>{64, 64, 64, 64}));
  ModelConfig off = must_parse(family_config_json("Qwen3MoeForCausalLM", R"("sliding_window": 64)"));
  EXPECT_EQ(off.every_layer_window(), 0);
  EXPECT_EQ(off.moe.num_experts, 128);  // the config class's defaults
  EXPECT_EQ(off.moe.top_k, 8);
}

TEST(FamilyConfig, BenchConfigsParse) {
  auto bench = [](const std::string& name) {
    auto c = load_model_config(std::string(FG_SOURCE_DIR) + "/bench/configs/" + name);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? c.value() : ModelConfig{};
  };
  ModelConfig mixtral = bench("mixtral-8x7b");
  EXPECT_EQ(mixtral.moe.num_experts, 8);
  EXPECT_EQ(mixtral.moe.top_k, 2);
  EXPECT_EQ(mixtral.moe.intermediate_size, 14336);
  ModelConfig qwen = bench("qwen3-30b-a3b");
  EXPECT_EQ(qwen.moe.num_experts, 128);
  EXPECT_EQ(qwen.moe.top_k, 8);
  EXPECT_TRUE(qwen.moe.renormalize);
  EXPECT_EQ(qwen.layer_moe, std::vector<uint8_t>(48, 1));
  EXPECT_EQ(qwen.every_layer_window(), 0);
  ModelConfig qwen_dense = bench("qwen3-8b");
  EXPECT_TRUE(qwen_dense.options.qk_norm);
  EXPECT_EQ(qwen_dense.num_layers, 36);
  EXPECT_FALSE(qwen_dense.is_moe_layer(0));
  ModelConfig gemma = bench("gemma-2-9b");
  EXPECT_EQ(gemma.head_dim, 256);
  EXPECT_EQ(gemma.layer_sliding_window[0], 4096);
  EXPECT_EQ(gemma.layer_sliding_window[1], 0);
  ModelConfig stand_in = bench("gemma-2-9b-hd128"), nocap = bench("gemma-2-9b-hd128-nocap");
  EXPECT_EQ(stand_in.q_dim(), gemma.q_dim());
  EXPECT_EQ(stand_in.kv_dim(), gemma.kv_dim());
  EXPECT_DOUBLE_EQ(stand_in.attn_softcap, 50.0);
  EXPECT_DOUBLE_EQ(stand_in.final_softcap, 30.0);
  EXPECT_EQ(nocap.attn_softcap, 0.0);
  EXPECT_EQ(nocap.final_softcap, 0.0);
}

TEST(FamilyConfig, UnknownArchitectureNamesTheSupportedOnes) {
  const std::string m = refusal(family_config_json("DeepseekV3ForCausalLM"));
  for (const char* name : {"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "MixtralForCausalLM",
                           "Qwen3MoeForCausalLM", "'DeepseekV3ForCausalLM'"})
    EXPECT_NE(m.find(name), std::string::npos) << m;
}

}  // namespace
}  // namespace fg
