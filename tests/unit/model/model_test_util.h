// What the model tests share: the committed fixture models and loading their configs.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/config.h"

namespace fg::model_test {

// The path of a model folder under tests/fixtures/models.
inline std::string fixture(const std::string& name) {
  return std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// The config of a fixture model; a failure to load fails the test.
inline ModelConfig must_load(const std::string& name) {
  auto c = load_model_config(fixture(name));
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? c.value() : ModelConfig{};
}

}  // namespace fg::model_test
