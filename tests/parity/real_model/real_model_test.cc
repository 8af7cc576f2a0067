// The default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by scripts/setup.sh) on the
// CPU backend against Hugging Face transformers on the same dequantized float32 weights
// (tests/fixtures/real_model/, written by tools/make_real_model_refs.py):
//  - logits of five prompts (short, code, multilingual, chat-formatted, 232 tokens) within 1e-4
//    relative, where the relative error of a row is max_i |ours_i - ref_i| / max_i |ref_i|;
//  - greedy continuations equal;
//  - token ids (and decoded text) of a varied corpus equal the model's own Hugging Face
//    tokenizer, the prompts' ids too. That is transformers' tokenizer loaded from the same file
//    with SmolLM2's numeral splitting restored (transformers' GGUF loader drops it); the two differ
//    only on numerals outside ASCII, and the reference lists those strings (docs/gguf.md);
//  - the chat template renders conversations exactly as apply_chat_template does.
// Without the model file every test skips, saying how to fetch it. The GPU backend is not run
// here: it is held to the CPU backend by the op parity tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/npy.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kMaxRelativeError = 1e-4;
constexpr uintmax_t kModelBytes = 98362432;  // the file scripts/fetch-model.sh unpacks (sha256 checked there)

std::string model_path() {
  return std::string(FG_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}
std::string fixture(const std::string& name) {
  return std::string(FG_SOURCE_DIR) + "/tests/fixtures/real_model/" + name;
}

const json& reference() {
  static const json ref = [] {
    std::ifstream in(fixture("reference.json"));
    std::ostringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }();
  return ref;
}

#define FG_REQUIRE_DEFAULT_MODEL()                                                                           \
  do {                                                                                                       \
    std::error_code ec;                                                                                      \
    if (!fs::exists(model_path(), ec))                                                                       \
      GTEST_SKIP() << model_path()                                                                           \
                   << " not found: run ./scripts/setup.sh (or ./scripts/fetch-model.sh) to "                 \
                      "fetch the default model";                                                             \
    ASSERT_EQ(fs::file_size(model_path(), ec), kModelBytes)                                                  \
        << model_path() << " is not the file the references were made from; rerun ./scripts/fetch-model.sh"; \
  } while (0)

class RealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(model_path())) return;
    backend_ = make_cpu_backend().release();
    auto m = Model::load(model_path(), *backend_);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = m->release();
    auto t = Tokenizer::load(model_path());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete backend_;
  }

  static Backend* backend_;
  static Model* model_;
  static Tokenizer* tokenizer_;
};

Backend* RealModel::backend_ = nullptr;
Model* RealModel::model_ = nullptr;
Tokenizer* RealModel::tokenizer_ = nullptr;

TEST_F(RealModel, LogitsMatchTransformers) {
  FG_REQUIRE_DEFAULT_MODEL();
  ASSERT_NE(model_, nullptr);
  const int64_t vocab = model_->config().vocab_size;
  double worst = 0.0;
  int prompts = 0, long_prompts = 0;
  for (const json& p : reference()["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    auto ref = read_npy(fixture(p["logits_file"].get<std::string>()));
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    const auto positions = p["logits_positions"].get<std::vector<int64_t>>();
    ASSERT_EQ(ref->shape, (std::vector<int64_t>{int64_t(positions.size()), vocab}));
    auto got = prompt_logits(*model_, ids, 16);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    for (size_t r = 0; r < positions.size(); ++r) {
      const float* ours = got->data() + positions[r] * vocab;
      const float* want = ref->f32.data() + int64_t(r) * vocab;
      double max_diff = 0.0, max_ref = 0.0;
      for (int64_t i = 0; i < vocab; ++i) {
        max_diff = std::max(max_diff, double(std::fabs(ours[i] - want[i])));
        max_ref = std::max(max_ref, double(std::fabs(want[i])));
      }
      const double rel = max_diff / max_ref;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, kMaxRelativeError) << p["name"] << " position " << positions[r] << ": max |diff| " << max_diff
                                        << ", max |ref| " << max_ref;
    }
    ++prompts;
    if (ids.size() >= 200) ++long_prompts;
  }
  EXPECT_GE(prompts, 5);
  EXPECT_GE(long_prompts, 1);
  std::printf("[ real model ] worst relative logit error %.3g over %d prompts (limit %.0e)\n", worst, prompts,
              kMaxRelativeError);
}

TEST_F(RealModel, GreedyContinuationsMatchTransformers) {
  FG_REQUIRE_DEFAULT_MODEL();
  ASSERT_NE(model_, nullptr);
  int checked = 0;
  for (const json& p : reference()["prompts"]) {
    if (!p.contains("greedy_ids")) continue;
    const auto want = p["greedy_ids"].get<std::vector<int32_t>>();
    GenerateOptions o;
    o.max_new_tokens = int(want.size());
    o.sampling.temperature = 0.0f;
    o.stop_ids = model_->config().eos_token_ids;
    auto got = generate(*model_, p["ids"].get<std::vector<int32_t>>(), o);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, want) << p["name"] << ": ours '" << tokenizer_->decode(*got, false) << "', transformers '"
                          << tokenizer_->decode(want, false) << "'";
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(RealModel, ConfigFromMetadata) {
  FG_REQUIRE_DEFAULT_MODEL();
  ASSERT_NE(model_, nullptr);
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_q_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.eos_token_ids, reference()["eos_token_ids"].get<std::vector<int64_t>>());
}

TEST_F(RealModel, TokenIdsMatchTransformers) {
  FG_REQUIRE_DEFAULT_MODEL();
  ASSERT_NE(tokenizer_, nullptr);
  int checked = 0, differ_from_transformers_gguf = 0;
  for (const json& c : reference()["tokenizer_corpus"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->encode(text, false), ids) << "'" << text << "'";
    EXPECT_EQ(tokenizer_->decode(ids, false), c["decoded"].get<std::string>()) << "'" << text << "'";
    if (c.contains("ids_transformers_gguf")) {
      ++differ_from_transformers_gguf;
      EXPECT_TRUE(std::any_of(text.begin(), text.end(), [](char ch) { return ch & 0x80; }))
          << "'" << text << "': only numerals outside ASCII may split differently";
    }
    ++checked;
  }
  EXPECT_LE(differ_from_transformers_gguf, 2);
  for (const json& p : reference()["prompts"]) {
    EXPECT_EQ(tokenizer_->encode(p["text"].get<std::string>(), false), p["ids"].get<std::vector<int32_t>>())
        << p["name"];
    ++checked;
  }
  EXPECT_GE(checked, 50);
  EXPECT_EQ(tokenizer_->encode("hi", true), tokenizer_->encode("hi", false));  // add_bos_token is false
  std::printf(
      "[ real model ] %d strings tokenized as the model's tokenizer does (%d differ from transformers' GGUF "
      "tokenizer: numerals outside ASCII)\n",
      checked, differ_from_transformers_gguf);
}

TEST_F(RealModel, ChatTemplateMatchesTransformers) {
  FG_REQUIRE_DEFAULT_MODEL();
  auto ct = ChatTemplate::from_model_dir(model_path());
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  for (const json& c : reference()["chats"]) {
    const auto messages = nlohmann::ordered_json::parse(c["messages"].dump());
    auto text = ct->render(messages, nullptr, true);
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(*text, c["prompt_text"].get<std::string>());
    EXPECT_EQ(tokenizer_->encode(*text, false), c["prompt_ids"].get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace fg
