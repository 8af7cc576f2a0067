// Helpers shared by the engine tests that run a fixture model on the CPU reference backend: the
// runner, and the reference they compare against.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "model/generate.h"
#include "support/model_test_util.h"

namespace fg::test {

// A CPU ModelRunner over fixture `name` with a KV pool of kv_bytes in pages of page_size tokens;
// null (and a test failure) when it cannot be created.
inline std::unique_ptr<ModelRunner> make_cpu_runner(const std::string& name, int64_t kv_bytes, int page_size) {
  ModelRunnerOptions o;
  o.model_dir = model_fixture(name);
  o.backend = "cpu";
  o.page_size = page_size;
  o.kv_cache_bytes = kv_bytes;
  auto r = ModelRunner::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

// Each request run alone through the model's single-sequence generate() (model/generate.h), with
// the request's own sampling settings.
inline std::vector<std::vector<int32_t>> reference_tokens(Model& model, const std::vector<Request>& requests) {
  std::vector<std::vector<int32_t>> out;
  for (const Request& r : requests) {
    GenerateOptions g;
    EXPECT_TRUE(r.params.max_new_tokens.has_value()) << "the reference loop needs a token limit";
    g.max_new_tokens = r.params.max_new_tokens.value_or(0);
    static_cast<SamplingRule&>(g.sampling) = r.params.rule();
    g.sampling.seed = r.params.seed.value_or(0);
    g.page_size = 8;
    auto ids = generate(model, r.prompt_ids, g);
    EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
    out.push_back(ids.is_ok() ? *ids : std::vector<int32_t>{});
  }
  return out;
}

// The outputs and final stats of one EngineCore run over `requests` (stepped to completion),
// checking that every KV page came back (pages the prefix cache keeps count as returned).
struct EngineRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

inline EngineRun run_engine(ModelRunner& runner, const EngineConfig& config, const std::vector<Request>& requests) {
  EngineCore core(config, runner);
  std::vector<RequestHandle> handles;
  for (const Request& r : requests) {
    auto h = core.submit(r);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    if (h.is_ok()) handles.push_back(*h);
  }
  while (core.has_work()) {
    Status st = core.step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
  }
  EngineRun run;
  for (const auto& h : handles) run.outputs.push_back(h.wait());
  run.stats = core.stats();
  EXPECT_EQ(run.stats.pages.free + run.stats.pages.cached, run.stats.pages.num_pages) << "pages leaked";
  EXPECT_EQ(run.stats.pages.held, 0) << "pages leaked";
  return run;
}

}  // namespace fg::test
