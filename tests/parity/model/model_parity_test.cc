// Model parity with Hugging Face transformers on the CPU reference backend: for every fixture of
// tests/fixtures/models (written by tools/make_model_fixtures.py), the logits of every prompt
// position must satisfy max|ours - HF| / max|HF| < 1e-4, and greedy generation must reproduce the
// ids of transformers' generate(do_sample=False) exactly (including stopping at eos).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/npy.h"

namespace fg {
namespace {

std::string fixture(const std::string& name) { return std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<float> logits;  // [sum of prompt lengths, vocab]
  int max_new_tokens = 0;
};

Reference load_reference(const std::string& dir) {
  Reference r;
  auto text = read_text_file(dir + "/reference.json");
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  auto j = nlohmann::json::parse(text.value());
  r.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  r.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  r.max_new_tokens = j["max_new_tokens"].get<int>();
  auto npy = read_npy(dir + "/logits.npy");
  EXPECT_TRUE(npy.is_ok()) << npy.status().message();
  r.logits = npy->f32;
  return r;
}

class ModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParity, LogitsMatchTransformers) {
  const std::string dir = fixture(GetParam());
  Reference ref = load_reference(dir);
  auto backend = make_cpu_backend();
  auto model = Model::load(dir, *backend);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const int64_t vocab = (*model)->config().vocab_size;
  size_t row0 = 0;
  for (const auto& prompt : ref.prompts) {
    auto logits = prompt_logits(**model, prompt, /*page_size=*/16);
    ASSERT_TRUE(logits.is_ok()) << logits.status().message();
    ASSERT_EQ(logits->size(), prompt.size() * size_t(vocab));
    ASSERT_LE((row0 + prompt.size()) * size_t(vocab), ref.logits.size());
    float max_diff = 0.0f, max_ref = 0.0f;
    for (size_t i = 0; i < logits->size(); ++i) {
      float r = ref.logits[row0 * size_t(vocab) + i];
      max_diff = std::max(max_diff, std::fabs((*logits)[i] - r));
      max_ref = std::max(max_ref, std::fabs(r));
    }
    EXPECT_GT(max_ref, 0.0f);
    EXPECT_LT(max_diff / max_ref, 1e-4f) << "prompt of " << prompt.size() << " tokens";
    row0 += prompt.size();
  }
  EXPECT_EQ(row0 * size_t(vocab), ref.logits.size());
}

TEST_P(ModelParity, GreedyMatchesTransformersGenerate) {
  const std::string dir = fixture(GetParam());
  Reference ref = load_reference(dir);
  auto backend = make_cpu_backend();
  auto model = Model::load(dir, *backend);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  GenerateOptions o;
  o.max_new_tokens = ref.max_new_tokens;
  o.stop_ids = (*model)->config().eos_token_ids;
  ASSERT_EQ(ref.prompts.size(), ref.greedy.size());
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    auto ids = generate(**model, ref.prompts[p], o);
    ASSERT_TRUE(ids.is_ok()) << ids.status().message();
    EXPECT_EQ(*ids, ref.greedy[p]) << "prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParity,
                         ::testing::Values("llama", "llama3_tied", "llama_dynamic", "llama_bf16", "mistral", "qwen2",
                                           "qwen3"));

}  // namespace
}  // namespace fg
