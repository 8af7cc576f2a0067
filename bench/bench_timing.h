// What the GEMM benchmarks share: device tensors over whole buffers and the median time of a
// synchronized call. Benchmarks only; never part of the library.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/backend.h"

namespace fg::bench {

inline Tensor tensor(const Buffer& b, DType dt, std::initializer_list<int64_t> shape) {
  return Tensor::contiguous(b.data(), dt, b.device(), shape);
}

// Median seconds of `reps` timed calls of fn (after 3 untimed ones), each synchronized.
template <class F>
double time_median(Backend& be, int reps, F&& fn) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) fn();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace fg::bench
