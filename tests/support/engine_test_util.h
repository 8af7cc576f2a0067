// Helpers shared by the engine tests that run a fixture model on the CPU reference backend.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/model_runner.h"
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

}  // namespace fg::test
