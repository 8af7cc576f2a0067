// The reference the engine's e2e tests compare against: each request run alone through the model's
// single-sequence generate() (model/generate.h), with the request's own sampling settings.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/request.h"
#include "model/generate.h"

namespace fg {

inline std::vector<std::vector<int32_t>> reference_tokens(Model& model, const std::vector<Request>& requests) {
  std::vector<std::vector<int32_t>> out;
  for (const Request& r : requests) {
    GenerateOptions g;
    g.max_new_tokens = r.params.max_new_tokens;
    g.sampling.temperature = r.params.temperature;
    g.sampling.top_k = r.params.top_k;
    g.sampling.top_p = r.params.top_p;
    g.sampling.seed = r.params.seed.value_or(0);
    g.page_size = 8;
    auto ids = generate(model, r.prompt_ids, g);
    EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
    out.push_back(ids.is_ok() ? *ids : std::vector<int32_t>{});
  }
  return out;
}

}  // namespace fg
