// Argument checks and strided-row helpers shared by the CPU backend's op files.
// Every failed check aborts (FG_CHECK) with a message naming the op, the argument and the
// offending view (Tensor::describe()); a bad argument here is a bug in the caller, never input.
// Nothing in this file allocates or touches global state.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace fg::cpu {

// Work (in elements) below which a row-wise op runs on the calling thread alone: handing out
// chunks (cpu_pool.h) costs a few microseconds, which such an op does not recover.
constexpr int64_t kParallelMinWork = int64_t(1) << 17;

inline std::string arg_message(const char* op, const char* name, const std::string& want, const Tensor& t) {
  return std::string(op) + ": " + name + " must be " + want + ", got " + t.describe();
}

// t must be a defined cpu tensor of `dtype` with `ndim` dims whose last dim is contiguous.
inline void check_view(const char* op, const char* name, const Tensor& t, DType dtype, int ndim) {
  FG_CHECK(t.ndim == ndim, arg_message(op, name, std::to_string(ndim) + "-d", t));
  FG_CHECK(t.device == Device::kCpu, arg_message(op, name, "a cpu tensor", t));
  FG_CHECK(t.dtype == dtype, arg_message(op, name, std::string(dtype_name(dtype)), t));
  FG_CHECK(t.data != nullptr || t.numel() == 0, arg_message(op, name, "defined (it has no data)", t));
  FG_CHECK(ndim == 0 || t.stride[ndim - 1] == 1 || t.shape[ndim - 1] <= 1,
           arg_message(op, name, "contiguous in its last dim", t));
  for (int d = 0; d < ndim; ++d)
    FG_CHECK(t.shape[d] >= 0 && t.stride[d] >= 0, arg_message(op, name, "non-negative shape/strides", t));
}

// t.shape[dim] must equal `expected`.
inline void check_dim(const char* op, const char* name, const Tensor& t, int dim, int64_t expected) {
  FG_CHECK(t.shape[dim] == expected,
           arg_message(op, name, "of size " + std::to_string(expected) + " in dim " + std::to_string(dim), t));
}

// A layer's cache: k and v [num_pages, page_size, num_kv_heads, head_dim] of one shape, f32 (the
// act dtype), bf16 (rows rounded to bf16: --kv-cache-dtype bf16 on the CPU) or f8_e4m3 with
// k_scale and v_scale [num_kv_heads] f32 (backend.h's KvCacheLayer). Returns its dtype.
inline DType check_kv_cache(const char* op, const KvCacheLayer& cache) {
  const bool fp8 = cache.k.dtype == DType::kF8E4M3;
  const DType dtype = fp8 || cache.k.dtype == DType::kBF16 ? cache.k.dtype : DType::kF32;
  check_view(op, "cache.k", cache.k, dtype, 4);
  check_view(op, "cache.v", cache.v, dtype, 4);
  for (int d = 0; d < 4; ++d) check_dim(op, "cache.v", cache.v, d, cache.k.shape[d]);
  if (fp8) {
    check_view(op, "cache.k_scale", cache.k_scale, DType::kF32, 1);
    check_view(op, "cache.v_scale", cache.v_scale, DType::kF32, 1);
    check_dim(op, "cache.k_scale", cache.k_scale, 0, cache.k.shape[2]);
    check_dim(op, "cache.v_scale", cache.v_scale, 0, cache.k.shape[2]);
  }
  return dtype;
}

// Row i of a 2-D view, or row (i, j) of a 3-D view (the last dim is contiguous).
template <class T>
inline T* row(const Tensor& t, int64_t i) {
  return static_cast<T*>(t.data) + i * t.stride[0];
}
template <class T>
inline T* row(const Tensor& t, int64_t i, int64_t j) {
  return static_cast<T*>(t.data) + i * t.stride[0] + j * t.stride[1];
}

}  // namespace fg::cpu
