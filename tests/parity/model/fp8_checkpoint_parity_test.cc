// FP8 checkpoints on the backend under test (FG_TEST_BACKEND=cuda: the CUDA backend; skipped when
// there is no GPU): each of tests/fixtures/models/fp8_{block,channel} (tools/make_fp8_fixtures.py)
// gives exactly the logits and greedy ids of its dequantized f32 twin on the same backend. Every
// backend keeps FP8 matrices as weight_dtype(f8_e4m3) of their exact f32 values (e4m3 * scale; f32
// on the CPU, the bf16 rounding of that f32 value on CUDA), which is exactly what it makes of the
// twin's f32 weights, so the two models compute with the same weights and no rounding separates
// them. (When CUDA computes FP8 x FP8 GEMMs with per-token activation scales, this bound becomes the
// error of fp8 activation rounding against the twin.)
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "support/model_test_util.h"

namespace fg {
namespace {

class Fp8CheckpointParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    backend_ = test::test_backend();
    if (!backend_)
      GTEST_SKIP() << "FG_TEST_BACKEND=cuda but no CUDA backend: " << make_cuda_backend(0).status().message();
  }
  std::unique_ptr<Model> load(const std::string& name) {
    auto m = Model::load(test::model_fixture(name), *backend_);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? std::move(m).value() : nullptr;
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(Fp8CheckpointParity, LogitsAndGreedyIdsAreTheTwins) {
  auto fp8 = load(GetParam());
  auto twin = load(std::string(GetParam()) + "_twin");
  ASSERT_TRUE(fp8 && twin);
  ASSERT_TRUE(fp8->config().quant.quantized());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 53 + 7) % 256));
  for (int chunk : {0, 1}) {  // prefill in one step, then one token per step
    auto got = prompt_logits(*fp8, prompt, 16, chunk);
    auto want = prompt_logits(*twin, prompt, 16, chunk);
    ASSERT_TRUE(got.is_ok() && want.is_ok());
    ASSERT_EQ(got->size(), want->size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got->size(); ++i) mismatches += (*got)[i] != (*want)[i] || !std::isfinite((*got)[i]);
    EXPECT_EQ(mismatches, 0u) << backend_->name() << ", chunk " << chunk << ": logits differ from the twin's";
  }
  GenerateOptions g;
  g.max_new_tokens = 24;
  auto ids = generate(*fp8, std::span(prompt).first(9), g);
  auto want_ids = generate(*twin, std::span(prompt).first(9), g);
  ASSERT_TRUE(ids.is_ok() && want_ids.is_ok());
  EXPECT_EQ(*ids, *want_ids);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8CheckpointParity, ::testing::Values("fp8_block", "fp8_channel"));

}  // namespace
}  // namespace fg
