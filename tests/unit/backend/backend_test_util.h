// Helpers for the backend op tests: seeded random data, and f32 views with padded (strided) rows
// inside guarded storage, so a test can poison an output, run an op, and then check both that
// every element of the view was written and that nothing outside the view changed.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace fg::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor view_of(std::vector<int32_t>& v) {
  return Tensor::contiguous(v.data(), DType::kI32, Device::kCpu, {int64_t(v.size())});
}

// An f32 view of shape [d0, d1] or [d0, d1, d2] whose rows are padded by `pad` elements at every
// level (so leading strides exceed the packed ones), inside storage with guard elements on both
// sides. All storage starts random; snapshot() records it so untouched_outside() can compare.
class PaddedF32 {
 public:
  PaddedF32(std::vector<int64_t> shape, int64_t pad, uint32_t seed) : shape_(std::move(shape)) {
    const int nd = int(shape_.size());
    std::vector<int64_t> stride(static_cast<size_t>(nd));
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; --d) {
      stride[size_t(d)] = st;
      st = st * shape_[size_t(d)] + pad;
    }
    const int64_t span = st;
    storage_ = random_floats(size_t(span + 2 * kGuard), seed, -1.0f, 1.0f);
    view.data = storage_.data() + kGuard;
    view.dtype = DType::kF32;
    view.device = Device::kCpu;
    view.ndim = nd;
    for (int d = 0; d < nd; ++d) {
      view.shape[d] = shape_[size_t(d)];
      view.stride[d] = stride[size_t(d)];
    }
    snapshot();
  }
  // A deep copy: the copy's view points into its own storage.
  PaddedF32(const PaddedF32& o) : view(o.view), shape_(o.shape_), storage_(o.storage_), before_(o.before_) {
    view.data = storage_.data() + kGuard;
  }
  PaddedF32& operator=(const PaddedF32&) = delete;

  Tensor view;  // f32 [shape], padded leading strides, last dim contiguous

  float* data() const { return static_cast<float*>(view.data); }
  int64_t offset(int64_t i, int64_t j = 0, int64_t k = 0) const {
    return i * view.stride[0] + (view.ndim > 1 ? j * view.stride[1] : 0) + (view.ndim > 2 ? k * view.stride[2] : 0);
  }
  float& at(int64_t i, int64_t j = 0, int64_t k = 0) { return data()[offset(i, j, k)]; }
  float at(int64_t i, int64_t j = 0, int64_t k = 0) const { return data()[offset(i, j, k)]; }
  int64_t numel() const { return view.numel(); }

  // Calls fn(i, j, k) for every element of the view.
  template <class Fn>
  void for_each(Fn&& fn) const {
    const int64_t d1 = view.ndim > 1 ? view.shape[1] : 1, d2 = view.ndim > 2 ? view.shape[2] : 1;
    for (int64_t i = 0; i < view.shape[0]; ++i)
      for (int64_t j = 0; j < d1; ++j)
        for (int64_t k = 0; k < d2; ++k) fn(i, j, k);
  }

  void poison() {
    for_each([&](int64_t i, int64_t j, int64_t k) { at(i, j, k) = std::numeric_limits<float>::quiet_NaN(); });
    snapshot();
  }
  void snapshot() { before_ = storage_; }

  // Every element outside the view (padding and guards) is bit-identical to the snapshot.
  ::testing::AssertionResult untouched_outside() const {
    std::vector<char> inside(storage_.size(), 0);
    for_each([&](int64_t i, int64_t j, int64_t k) { inside[size_t(kGuard + offset(i, j, k))] = 1; });
    for (size_t e = 0; e < storage_.size(); ++e) {
      if (inside[e]) continue;
      if (std::memcmp(&storage_[e], &before_[e], sizeof(float)) != 0)
        return ::testing::AssertionFailure() << "storage element " << e << " outside the view changed";
    }
    return ::testing::AssertionSuccess();
  }

  // Every element of the view is finite (a poisoned NaN left behind means it was never written).
  ::testing::AssertionResult all_finite() const {
    int64_t bad = 0;
    for_each([&](int64_t i, int64_t j, int64_t k) { bad += std::isfinite(at(i, j, k)) ? 0 : 1; });
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " elements of " << view.describe() << " are not finite";
  }

 private:
  static constexpr int64_t kGuard = 37;
  std::vector<int64_t> shape_;
  std::vector<float> storage_;
  std::vector<float> before_;
};

// |got - want| <= abs_tol + rel_tol * |want|, with a message naming the element.
inline ::testing::AssertionResult near(double got, double want, double abs_tol, double rel_tol, const char* what,
                                       int64_t index) {
  if (std::isfinite(got) && std::fabs(got - want) <= abs_tol + rel_tol * std::fabs(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << "[" << index << "]: got " << got << ", want " << want;
}

}  // namespace fg::test
