// FP8 checkpoints on the CPU backend (model/quant_config.h, model/fp8_weights.h): the two
// published formats (fine-grained 128 x 128 block scales, compressed-tensors per-channel scales)
// load as their exact dequantized values, which tools/make_fp8_fixtures.py wrote as an f32 twin of
// each fixture: the weights are bit for bit the twin's (so are the logits and greedy ids:
// tests/parity/model/fp8_checkpoint_parity_test.cc). Checkpoints that contradict their quantization_config, and
// quantization_configs flashgen does not read, are refused by name. `--quantization fp8` (WeightLoadOptions) turns a
// bf16 checkpoint's linear weights into exactly their per-channel e4m3 rounding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>

#include "backend/backend.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/model.h"
#include "support/fp8_block_checkpoint.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<float> host_values(const Tensor& t) {
  EXPECT_EQ(t.dtype, DType::kF32);
  const auto* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

std::vector<int32_t> test_prompt() {
  std::vector<int32_t> prompt;
  // 40 tokens: more rows than any kernel set takes through the GEMV path.
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 37 + 11) % 256));
  return prompt;
}

class Fp8Weights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fg_fp8_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Model> load(const std::string& dir, const WeightLoadOptions& options = {}) {
    auto m = Model::load(dir, *backend_, options);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? std::move(m).value() : nullptr;
  }

  // A copy of a fixture whose config.json and safetensors header (as JSON, data offsets relative
  // to the data section) and data bytes the callbacks may edit.
  std::string edited_copy(const std::string& fixture, const std::function<void(Json&)>& edit_config,
                          const std::function<void(Json& header, std::string& data)>& edit_file) {
    const std::string src = test::model_fixture(fixture);
    Json config = Json::parse(read_file(src + "/config.json"));
    if (edit_config) edit_config(config);
    std::ofstream(dir_ / "config.json") << config.dump(2);
    const std::string bytes = read_file(src + "/model.safetensors");
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    Json header = Json::parse(bytes.substr(8, header_len));
    std::string data = bytes.substr(8 + header_len);
    if (edit_file) edit_file(header, data);
    const std::string h = header.dump();
    const uint64_t n = h.size();
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
    return dir_.string();
  }

  // Model::load of `dir` must fail with `code` and a message containing every one of `what`.
  void expect_refused(const std::string& dir, ErrorCode code, std::initializer_list<const char*> what) {
    auto m = Model::load(dir, *backend_);
    ASSERT_FALSE(m.is_ok()) << "loaded " << dir;
    EXPECT_EQ(m.status().code(), code) << m.status().to_string();
    for (const char* w : what) EXPECT_NE(m.status().message().find(w), std::string::npos) << m.status().message();
  }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
};

// Both formats: every linear weight is bit for bit the twin's f32 value (the logits and greedy ids,
// then equal too: tests/parity/model/fp8_checkpoint_parity_test.cc, on the CPU and on CUDA).
TEST_F(Fp8Weights, BothFormatsLoadAsTheirExactDequantizedTwins) {
  for (const std::string format : {"fp8_block", "fp8_channel"}) {
    SCOPED_TRACE(format);
    auto fp8 = load(test::model_fixture(format));
    auto twin = load(test::model_fixture(format + "_twin"));
    ASSERT_TRUE(fp8 && twin);
    const WeightQuantization want =
        format == "fp8_block" ? WeightQuantization::kFp8Block : WeightQuantization::kFp8Channel;
    EXPECT_EQ(fp8->config().quant.method, want);
    EXPECT_FALSE(twin->config().quant.quantized());
    for (size_t l = 0; l < fp8->weights().layers.size(); ++l) {
      const LayerWeights& a = fp8->weights().layers[l];
      const LayerWeights& b = twin->weights().layers[l];
      for (auto [x, y, name] : {std::tuple{&a.qkv, &b.qkv, "qkv"}, std::tuple{&a.o, &b.o, "o"},
                                std::tuple{&a.gate_up, &b.gate_up, "gate_up"}, std::tuple{&a.down, &b.down, "down"}}) {
        ASSERT_EQ(x->numel(), y->numel()) << name;
        EXPECT_TRUE(host_values(*x) == host_values(*y)) << "layer " << l << " " << name << " differs from the twin";
      }
    }
    // The embedding table (bf16 in both) is kept as stored.
    EXPECT_EQ(fp8->weights().embed.dtype, DType::kBF16);
  }
}

// A fine-grained checkpoint whose parts are whole 128 x 128 blocks keeps its codes with block
// scales (q/k/v and gate/up fused: their blocks stacked), and computes within FP8 activation
// rounding of its twin (the bound and its derivation: tests/parity/model/fp8_checkpoint_parity_test.cc).
// The committed fixture, 160 wide, has partial blocks inside its fused matrices: those are kept as
// values, its single-part o and down as codes.
TEST_F(Fp8Weights, WholeBlockCheckpointKeepsCodesWithBlockScales) {
  test::write_fp8_block_llama(dir_ / "fp8", dir_ / "twin");
  backend_ = std::make_unique<test::CodesKeepingCpu>();
  auto fp8 = load((dir_ / "fp8").string());
  auto twin = load((dir_ / "twin").string());
  ASSERT_TRUE(fp8 && twin);
  const LayerWeights& L = fp8->weights().layers[0];
  for (auto [w, scale, n, k] :
       {std::tuple{&L.qkv, &L.qkv_scale, 512, 256}, std::tuple{&L.o, &L.o_scale, 256, 256},
        std::tuple{&L.gate_up, &L.gate_up_scale, 768, 256}, std::tuple{&L.down, &L.down_scale, 256, 384}}) {
    EXPECT_EQ(w->dtype, DType::kF8E4M3);
    ASSERT_EQ(scale->ndim, 2);
    EXPECT_EQ(scale->shape[0], n / 128);
    EXPECT_EQ(scale->shape[1], k / 128);
    EXPECT_EQ(scale->stride[0], 4) << "ceil(k / 128) rounded up to 4";
  }
  // The fused qkv's block rows are q's two, then k's, then v's, each as the checkpoint has them.
  auto ckpt = SafetensorsCheckpoint::open((dir_ / "fp8").string());
  ASSERT_TRUE(ckpt.is_ok());
  const auto* qkv_scales = static_cast<const float*>(L.qkv_scale.data);
  int row = 0;
  for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
    auto t = ckpt->get(weight_name_layer(0, (std::string("self_attn.") + part + ".weight_scale_inv").c_str()));
    ASSERT_TRUE(t.is_ok());
    // (safetensors data need not be aligned: copied out)
    std::vector<float> want(size_t((*t)->numel()));
    std::memcpy(want.data(), (*t)->data, want.size() * 4);
    for (int64_t r = 0; r < (*t)->shape[0]; ++r, ++row)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(qkv_scales[row * 4 + c], want[r * 2 + c]) << part << " " << r;
  }
  EXPECT_EQ(row, 4);

  const std::vector<int32_t> prompt = test_prompt();
  const int64_t vocab = fp8->config().vocab_size;
  auto got = prompt_logits(*fp8, prompt, 16);
  auto want = prompt_logits(*twin, prompt, 16);
  ASSERT_TRUE(got.is_ok() && want.is_ok());
  double diff_sq = 0.0, ref_sq = 0.0;
  float max_diff = 0.0f;
  for (size_t i = 0; i < got->size(); ++i) {
    const double d = double((*got)[i]) - double((*want)[i]);
    diff_sq += d * d;
    ref_sq += double((*want)[i]) * double((*want)[i]);
    max_diff = std::max(max_diff, float(std::fabs(d)));
  }
  EXPECT_GT(diff_sq, 0.0) << "the codes path should differ from the twin by activation rounding";
  EXPECT_LE(std::sqrt(diff_sq), 0.25 * std::sqrt(ref_sq));
  for (size_t r = 0; r < prompt.size(); ++r) {
    const float* g = got->data() + r * size_t(vocab);
    const float* w = want->data() + r * size_t(vocab);
    if (test::top2_margin(w, vocab) > 2.0f * max_diff) {
      EXPECT_EQ(test::argmax(g, vocab), test::argmax(w, vocab)) << "row " << r;
    }
  }

  auto partial = load(test::model_fixture("fp8_block"));
  ASSERT_TRUE(partial);
  // q (128 rows), k (64), v (64): k's partial block row would sit inside the fused matrix.
  EXPECT_EQ(partial->weights().layers[0].qkv.dtype, DType::kF32) << "partial blocks inside a fused matrix";
  EXPECT_EQ(partial->weights().layers[0].qkv_scale.data, nullptr);
  // o [160, 128] is one part: its partial last block row is the matrix's edge.
  const Tensor& o_scale = partial->weights().layers[0].o_scale;
  EXPECT_EQ(partial->weights().layers[0].o.dtype, DType::kF8E4M3);
  ASSERT_EQ(o_scale.ndim, 2);
  EXPECT_EQ(o_scale.shape[0], 2);
  EXPECT_EQ(o_scale.shape[1], 1);
}

// Dummy weights for a config with the fine-grained quantization_config (engine_bench's FP8 block
// figures): codes with 128 x 128 block scales where the backend keeps codes; the model runs.
TEST_F(Fp8Weights, DummyWeightsOfABlockConfigAreBlockScaledCodes) {
  test::write_fp8_block_llama(dir_ / "fp8", dir_ / "twin");
  backend_ = std::make_unique<test::CodesKeepingCpu>();
  auto m = Model::load_dummy((dir_ / "fp8").string(), *backend_, 5);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const LayerWeights& L = (*m)->weights().layers[1];
  EXPECT_EQ(L.gate_up.dtype, DType::kF8E4M3);
  ASSERT_EQ(L.gate_up_scale.ndim, 2);
  EXPECT_EQ(L.gate_up_scale.shape[0], 6);
  EXPECT_EQ(L.gate_up_scale.shape[1], 2);
  EXPECT_EQ(L.gate_up_scale.stride[0], 4);
  EXPECT_EQ(L.down_scale.shape[1], 3);
  auto logits = prompt_logits(**m, test_prompt(), 16);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
  // The plain CPU keeps no codes: nothing FP8 to measure there.
  auto plain = make_cpu_backend();
  auto refused = Model::load_dummy((dir_ / "fp8").string(), *plain, 5);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnsupported) << refused.status().to_string();
}

TEST_F(Fp8Weights, QuantizationAtLoadIsPerChannelE4m3RoundingOfTheOriginal) {
  const std::string dir = test::model_fixture("llama_bf16");
  WeightLoadOptions options;
  options.quantization = LoadQuantization::kFp8;
  auto quantized = load(dir, options);
  auto original = load(dir);
  ASSERT_TRUE(quantized && original);
  EXPECT_EQ(quantized->weights().embed.dtype, DType::kBF16);
  EXPECT_EQ(quantized->weights().lm_head.dtype, DType::kBF16);

  auto ckpt = SafetensorsCheckpoint::open(dir);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  // The expected rows of one checkpoint matrix, appended to `out`.
  auto expect_rows = [&](const std::string& name, std::vector<float>& out) {
    auto t = ckpt->get(name);
    ASSERT_TRUE(t.is_ok()) << name;
    const SafetensorsTensor& s = **t;
    ASSERT_EQ(s.dtype, DType::kBF16);
    const int64_t n = s.shape[0], k = s.shape[1];
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> row(static_cast<size_t>(k));
      float amax = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        uint16_t h;
        std::memcpy(&h, static_cast<const char*>(s.data) + 2 * (i * k + j), 2);
        row[size_t(j)] = bf16_to_f32(h);
        amax = std::max(amax, std::fabs(row[size_t(j)]));
      }
      const float scale = amax / 448.0f;
      ASSERT_GT(scale, 0.0f);
      for (float v : row) out.push_back(f8e4m3_to_f32(f32_to_f8e4m3(v / scale)) * scale);
    }
  };
  size_t changed = 0;
  for (int l = 0; l < quantized->config().num_layers; ++l) {
    const LayerWeights& L = quantized->weights().layers[size_t(l)];
    auto n = [l](const char* s) { return weight_name_layer(l, s); };
    const std::vector<std::pair<const Tensor*, std::vector<std::string>>> matrices = {
        {&L.qkv, {n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"), n("self_attn.v_proj.weight")}},
        {&L.o, {n("self_attn.o_proj.weight")}},
        {&L.gate_up, {n("mlp.gate_proj.weight"), n("mlp.up_proj.weight")}},
        {&L.down, {n("mlp.down_proj.weight")}}};
    for (const auto& [tensor, names] : matrices) {
      std::vector<float> want;
      for (const std::string& name : names) expect_rows(name, want);
      const std::vector<float> got = host_values(*tensor);
      EXPECT_TRUE(got == want) << "layer " << l << " " << names.front();
      const Tensor& orig = *(tensor == &L.qkv       ? &original->weights().layers[size_t(l)].qkv
                             : tensor == &L.o       ? &original->weights().layers[size_t(l)].o
                             : tensor == &L.gate_up ? &original->weights().layers[size_t(l)].gate_up
                                                    : &original->weights().layers[size_t(l)].down);
      ASSERT_EQ(orig.dtype, DType::kBF16);
      for (size_t i = 0; i < got.size(); ++i)
        changed += got[i] != bf16_to_f32(static_cast<const uint16_t*>(orig.data)[i]);
    }
  }
  EXPECT_GT(changed, 0u) << "quantization left every weight as it was";
  // The quantized model still runs, with finite logits.
  auto logits = prompt_logits(*quantized, test_prompt(), 16);
  ASSERT_TRUE(logits.is_ok());
  for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(Fp8Weights, Fp8TensorsWithoutQuantizationConfigAreRefused) {
  expect_refused(edited_copy(
                     "fp8_channel", [](Json& c) { c.erase("quantization_config"); }, nullptr),
                 ErrorCode::kInvalidArgument,
                 {"model.layers.0.self_attn.q_proj.weight", "F8_E4M3", "quantization_config"});
}

TEST_F(Fp8Weights, FP8WeightOfAModuleListedAsNotQuantizedIsRefused) {
  expect_refused(edited_copy(
                     "fp8_block",
                     [](Json& c) {
                       c["quantization_config"]["modules_to_not_convert"] =
                           Json::array({"model.layers.1.mlp.down_proj"});
                     },
                     nullptr),
                 ErrorCode::kInvalidArgument, {"model.layers.1.mlp.down_proj.weight", "not quantized"});
  expect_refused(
      edited_copy(
          "fp8_channel", [](Json& c) { c["quantization_config"]["ignore"] = Json::array({"re:.*o_proj"}); }, nullptr),
      ErrorCode::kInvalidArgument, {"model.layers.0.self_attn.o_proj.weight", "not quantized"});
}

TEST_F(Fp8Weights, MissingOrMisshapenScalesAreRefused) {
  const std::string scale = "model.layers.0.mlp.up_proj.weight_scale_inv";
  expect_refused(edited_copy("fp8_block", nullptr,
                             [&](Json& h, std::string&) {
                               h["renamed"] = h[scale];
                               h.erase(scale);
                             }),
                 ErrorCode::kInvalidArgument, {"model.layers.0.mlp.up_proj.weight", "no scale tensor"});
  // [2, 2] scales declared as [4, 1] (same bytes): the 128 x 128 blocks of a [160, 160] weight are [2, 2].
  expect_refused(edited_copy("fp8_block", nullptr,
                             [&](Json& h, std::string&) {
                               h[scale]["shape"] = {4, 1};
                             }),
                 ErrorCode::kInvalidArgument, {scale.c_str(), "[4, 1]", "[2, 2]"});
}

TEST_F(Fp8Weights, NonPositiveScalesAndNanCodesAreRefused) {
  const std::string scale = "model.layers.1.self_attn.k_proj.weight_scale";  // bf16 [64, 1]
  expect_refused(edited_copy("fp8_channel", nullptr,
                             [&](Json& h, std::string& data) {
                               const uint64_t at = h[scale]["data_offsets"][0].get<uint64_t>() + 2 * 5;
                               data[at] = 0;  // -0.0 as bf16: 0x8000
                               data[at + 1] = char(0x80);
                             }),
                 ErrorCode::kInvalidArgument, {scale.c_str(), "element 5", "finite and positive"});
  const std::string weight = "model.layers.1.self_attn.k_proj.weight";
  expect_refused(edited_copy("fp8_channel", nullptr,
                             [&](Json& h, std::string& data) {
                               data[h[weight]["data_offsets"][0].get<uint64_t>() + 9] = char(0x7f);  // e4m3 NaN
                             }),
                 ErrorCode::kInvalidArgument, {weight.c_str(), "NaN", "element 9"});
}

// quantization_config: what flashgen reads, and what it refuses by name.
std::string config_with(const Json& quant) {
  Json c = Json::parse(read_file(test::model_fixture("fp8_channel") + "/config.json"));
  c["quantization_config"] = quant;
  return c.dump();
}

Json finegrained() {
  return Json::parse(read_file(test::model_fixture("fp8_block") + "/config.json")).at("quantization_config");
}

Json compressed_tensors() {
  return Json::parse(read_file(test::model_fixture("fp8_channel") + "/config.json")).at("quantization_config");
}

void expect_config_refused(const Json& quant, ErrorCode code, std::initializer_list<const char*> what) {
  auto c = parse_model_config(config_with(quant), "config.json");
  ASSERT_FALSE(c.is_ok()) << quant.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  for (const char* w : what) EXPECT_NE(c.status().message().find(w), std::string::npos) << c.status().message();
}

TEST(Fp8QuantConfig, ReadsBothFormats) {
  auto block = parse_model_config(config_with(finegrained()), "config.json");
  ASSERT_TRUE(block.is_ok()) << block.status().to_string();
  EXPECT_EQ(block->quant.method, WeightQuantization::kFp8Block);
  EXPECT_EQ(block->quant.block_rows, 128);
  EXPECT_EQ(block->quant.block_cols, 128);
  EXPECT_EQ(block->quant.scale_name("model.layers.0.mlp.up_proj.weight"),
            "model.layers.0.mlp.up_proj.weight_scale_inv");
  auto channel = parse_model_config(config_with(compressed_tensors()), "config.json");
  ASSERT_TRUE(channel.is_ok()) << channel.status().to_string();
  EXPECT_EQ(channel->quant.method, WeightQuantization::kFp8Channel);
  EXPECT_EQ(channel->quant.scale_name("model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight_scale");
  EXPECT_TRUE(channel->quant.is_ignored("lm_head.weight"));
  EXPECT_FALSE(channel->quant.is_ignored("model.layers.0.mlp.up_proj.weight"));
}

TEST(Fp8QuantConfig, IgnoredModulesFollowEachFormatsRule) {
  QuantConfig fg;  // transformers: a prefix up to a module boundary (or a regex so anchored), or a suffix
  fg.method = WeightQuantization::kFp8Block;
  fg.ignored = {"lm_head", "model.layers.1", "mlp.gate", "model.layers.2.*q_proj"};
  EXPECT_TRUE(fg.is_ignored("lm_head.weight"));
  EXPECT_TRUE(fg.is_ignored("model.layers.1.mlp.up_proj.weight"));
  EXPECT_FALSE(fg.is_ignored("model.layers.11.mlp.up_proj.weight"));
  EXPECT_TRUE(fg.is_ignored("model.layers.0.mlp.gate.weight"));
  EXPECT_FALSE(fg.is_ignored("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(fg.is_ignored("model.layers.2.self_attn.q_proj.weight"));
  EXPECT_FALSE(fg.is_ignored("model.layers.2.self_attn.k_proj.weight"));
  QuantConfig ct;  // compressed-tensors: whole names, or "re:" regexes from the start
  ct.method = WeightQuantization::kFp8Channel;
  ct.ignored = {"lm_head", "re:.*mlp\\.gate$"};
  EXPECT_TRUE(ct.is_ignored("lm_head.weight"));
  EXPECT_TRUE(ct.is_ignored("model.layers.3.mlp.gate.weight"));
  EXPECT_FALSE(ct.is_ignored("model.layers.3.mlp.gate_proj.weight"));
  EXPECT_FALSE(ct.is_ignored("model.lm_head.weight"));
  // config.json is untrusted: a pattern that backtracks exponentially gives up at the match limit.
  ct.ignored = {"re:(a|aa)+$"};
  EXPECT_FALSE(ct.is_ignored(std::string(60, 'a') + "b.weight"));
  EXPECT_TRUE(ct.is_ignored("aaaa.weight"));
}

TEST(Fp8QuantConfig, RefusesWhatItDoesNotReadByName) {
  const ErrorCode kUnsupported = ErrorCode::kUnsupported;
  expect_config_refused({{"quant_method", "gptq"}, {"bits", 4}}, kUnsupported, {"quant_method", "gptq"});
  Json j = finegrained();
  j["activation_scheme"] = "static";
  expect_config_refused(j, kUnsupported, {"activation_scheme", "static"});
  j = finegrained();
  j["weight_block_size"] = {64, 64};
  expect_config_refused(j, kUnsupported, {"weight_block_size", "[64,64]", "[128, 128]"});
  j = finegrained();
  j["scale_fmt"] = "ue8m0";
  expect_config_refused(j, kUnsupported, {"scale_fmt", "ue8m0"});
  j = finegrained();
  j["some_new_option"] = true;
  expect_config_refused(j, kUnsupported, {"some_new_option"});
  j = compressed_tensors();
  j["format"] = "int-quantized";
  expect_config_refused(j, kUnsupported, {"format", "int-quantized"});
  j = compressed_tensors();
  j["config_groups"]["group_0"]["weights"]["type"] = "int";
  expect_config_refused(j, kUnsupported, {"config_groups.group_0.weights.type", "int"});
  j = compressed_tensors();
  j["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  expect_config_refused(j, kUnsupported, {"weights.num_bits"});
  j = compressed_tensors();
  j["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  expect_config_refused(j, kUnsupported, {"weights.strategy", "tensor"});
  j = compressed_tensors();
  j["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;  // static activation scales
  expect_config_refused(j, kUnsupported, {"input_activations.dynamic"});
  j = compressed_tensors();
  j["config_groups"]["group_0"]["input_activations"] = nullptr;  // weight-only
  expect_config_refused(j, kUnsupported, {"input_activations", "weight-only"});
  j = compressed_tensors();
  j["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
  expect_config_refused(j, kUnsupported, {"kv_cache_scheme"});
  j = compressed_tensors();
  j["ignore"] = {"re:(unclosed"};
  expect_config_refused(j, ErrorCode::kInvalidArgument, {"re:(unclosed", "regex"});
  // A field that must be present and is not (found by the model_config fuzz target: naming it used
  // to look the value up and throw).
  j = compressed_tensors();
  j["config_groups"]["group_0"].erase("targets");
  expect_config_refused(j, kUnsupported, {"config_groups.group_0.targets is missing", "Linear"});
}

TEST(Fp8QuantConfig, LoadQuantizationNames) {
  EXPECT_EQ(parse_load_quantization("fp8").value(), LoadQuantization::kFp8);
  EXPECT_EQ(parse_load_quantization("none").value(), LoadQuantization::kNone);
  auto bad = parse_load_quantization("int4");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos);
}

}  // namespace
}  // namespace fg
