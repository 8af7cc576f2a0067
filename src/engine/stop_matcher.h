// The seam through which stop strings reach the engine. Stop strings live in text, the engine in
// token ids; the tokenizer layer provides the matcher (it detokenizes incrementally and finds a
// stop string that may span several tokens). The engine only asks "is this sequence done?".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg {

class StopMatcher {
 public:
  virtual ~StopMatcher() = default;
  // Feeds the next output token; true once the output text contains one of the stop strings.
  virtual bool feed(int32_t token) = 0;
};

// Builds a matcher for one request's stop strings (called on the submitting thread).
using StopMatcherFactory =
    std::function<Result<std::unique_ptr<StopMatcher>>(const std::vector<std::string>& stop_strings)>;

}  // namespace fg
