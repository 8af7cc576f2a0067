// Harness of the backend parity tests: every CUDA op is run on random data next to the CPU
// reference backend and compared. It provides
//  - the two backends, created once per test process (tests skip with "no CUDA GPU found: ..."
//    when the CUDA backend cannot be created);
//  - Twin: one logical tensor held by both backends with the same shape and strides (the CPU copy
//    in its dtype, usually f32; the GPU copy in its dtype, usually bf16) inside a GPU buffer with
//    sentinel guard bytes before and after it. Outputs are poisoned with NaN before an op; after
//    it, every element of the view must be written (no NaN) and every byte outside the view
//    (guards, gaps of strided views) must be unchanged.
// Never used outside tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace fg::parity {

struct Backends {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> gpu;
  std::string skip_reason;  // why gpu is null
};
// Created on first use, shared by every test of the process.
Backends& backends();
inline Backend& cpu() {
  return *backends().cpu;
}
inline Backend& gpu() {
  return *backends().gpu;
}
// A second CUDA backend on gpu()'s device, made with `options` (batch-invariant mode, or after an
// environment switch the backend reads when it is made); null, with a test failure, if it cannot
// be made. The Twins' buffers (gpu()'s) are valid on it.
std::unique_ptr<Backend> another_gpu(const BackendOptions& options);

// Relative error bound of a bf16 result against the CPU reference.
constexpr double kBf16Tol = 1e-2;

#define FG_REQUIRE_GPU()                                                                     \
  do {                                                                                       \
    if (!::fg::parity::backends().gpu) GTEST_SKIP() << ::fg::parity::backends().skip_reason; \
  } while (0)

// Value of `v` after rounding to dtype (f32/f16/bf16).
float round_to(DType dtype, float v);

class Twin {
 public:
  // A view of `shape` with element `strides` (empty: contiguous) at element `offset` of a storage
  // of `storage_elems` elements (0: just large enough).
  Twin(std::vector<int64_t> shape, DType gpu_dtype, DType cpu_dtype = DType::kF32, std::vector<int64_t> strides = {},
       int64_t storage_elems = 0, int64_t offset = 0);
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

  Tensor cpu;  // view on the CPU backend
  Tensor gpu;  // view on the GPU backend

  // Uniform values in [lo, hi) over the whole storage (gaps too), rounded to the GPU dtype so both
  // backends see identical inputs. Integer twins get integers in [lo, hi).
  void fill_random(std::mt19937_64& rng, float lo, float hi);
  // Sets the view's elements (logical row-major order) on both sides; the rest keeps its values.
  void set(const std::vector<float>& values);
  // NaN into every element of the view on both sides (integers: INT32_MIN).
  void poison();
  // Uploads the host image to the GPU and records the snapshot the guard checks compare against.
  void sync_to_gpu();

  // The view's elements in logical row-major order, as f32.
  std::vector<float> gpu_values() const;
  std::vector<float> cpu_values() const;
  // Downloads the whole GPU buffer: every view element written (no NaN) when `expect_written`,
  // every byte outside the view unchanged. Adds gtest failures naming `what`.
  void check_guards(const std::string& what, bool expect_written) const;
  // The whole GPU buffer is byte-identical to the snapshot (read-only inputs).
  void check_unchanged(const std::string& what) const;

  const std::vector<int64_t>& offsets() const { return offsets_; }  // view element offsets

 private:
  std::vector<uint8_t> download() const;
  void store_host(int64_t elem, float v);

  std::vector<int64_t> shape_, strides_;
  DType gpu_dtype_, cpu_dtype_;
  int64_t storage_elems_ = 0, offset_ = 0;
  std::vector<int64_t> offsets_;      // storage offsets of the view's elements, row-major order
  std::vector<uint8_t> cpu_storage_;  // cpu dtype
  std::vector<uint8_t> gpu_image_;    // guard | storage (gpu dtype) | guard, what the GPU should hold
  Buffer gpu_buffer_;
};

// ||a - b|| / ||b|| (infinite when any value is NaN or the lengths differ).
double rel_error(const std::vector<float>& a, const std::vector<float>& b);
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace fg::parity
