// Helpers shared by the tests that run the fixture models (model parity, batch invariance, decode
// graphs): where a fixture model lives and how a logits row is read.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace fg::test {

// tests/fixtures/models/<name> of this checkout.
inline std::string model_fixture(const std::string& name) {
  return std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// The backend a parity test runs on: cpu unless FG_TEST_BACKEND=cuda (tools/gpu_check.sh sets it);
// null when cuda is asked for and there is no GPU (the test skips).
inline std::unique_ptr<Backend> test_backend() {
  const char* env = std::getenv("FG_TEST_BACKEND");
  if (!env || std::string(env) != "cuda") return make_cpu_backend();
  auto cuda = make_cuda_backend(0);
  if (!cuda.is_ok()) return nullptr;
  return std::move(cuda).value();
}

// The greedy token of a logits row: the largest logit, the lowest id on ties.
inline int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return int32_t(best);
}

// Best minus second-best logit: how far a row is from a greedy tie.
inline float top2_margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return a - b;
}

}  // namespace fg::test
