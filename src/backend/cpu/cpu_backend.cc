// CPU backend: the factory, memory and transfers, dtype conversion, seeded fill, and the
// row-wise ops (silu_mul, gelu_tanh_mul, scale, softcap, kv_write, gather_rows). gemm and
// embedding (the ops that read weights) live in cpu_gemm.cc, norms and RoPE in cpu_norm_rope.cc,
// attention in cpu_attention.cc, sampling in cpu_sample.cc, the mixture-of-experts ops in
// cpu_moe.cc.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/cpu_checks.h"
#include "backend/sampling_rule.h"

namespace fg {

using cpu::check_dim;
using cpu::check_view;
using cpu::kParallelMinWork;
using cpu::row;

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

CpuBackend::CpuBackend(const BackendOptions& options)
    : options_(options), pool_(cpu::default_cpu_threads()), sample_scratch_(size_t(pool_.threads())) {
  // Every sgemm call runs inside one of cpu_gemm.cc's chunks, on a share of the weight rows:
  // OpenBLAS's own thread pool would only compete with the backend's for the same cores.
  openblas_set_num_threads(1);
}

// ---- memory and transfers

namespace {

constexpr size_t kAlignment = 64;

Buffer alloc_aligned(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; never hand out null.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  FG_CHECK(p != nullptr, "cpu alloc: out of host memory allocating " + std::to_string(bytes) + " bytes");
  return Buffer(p, bytes, Device::kCpu, [](void* q) { std::free(q); });
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FG_CHECK(dst != nullptr && src != nullptr,
           "cpu copy: null pointer for a copy of " + std::to_string(bytes) + " bytes");
  std::memmove(dst, src, bytes);
}

}  // namespace

Buffer CpuBackend::alloc(size_t bytes) {
  return alloc_aligned(bytes);
}
Buffer CpuBackend::alloc_host(size_t bytes) {
  return alloc_aligned(bytes);
}
void CpuBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  copy_bytes(dst, src, bytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  copy_bytes(dst, src, bytes);
}
void CpuBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  copy_bytes(dst, src, bytes);
}

void CpuBackend::copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                           size_t rows) {
  FG_CHECK(rows <= 1 || (dst_stride >= row_bytes && src_stride >= row_bytes),
           "copy_rows: strides below the row length");
  for (size_t i = 0; i < rows; ++i)
    copy_bytes(static_cast<char*>(dst) + i * dst_stride, static_cast<const char*>(src) + i * src_stride, row_bytes);
}

// ---- elementwise: convert and fill_uniform

namespace {

bool is_float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

template <DType kT>
inline float load_as_f32(const void* base, int64_t i) {
  if constexpr (kT == DType::kF32) return static_cast<const float*>(base)[i];
  if constexpr (kT == DType::kF16) return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
  if constexpr (kT == DType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

template <DType kT>
inline void store_from_f32(void* base, int64_t i, float v) {
  if constexpr (kT == DType::kF32) static_cast<float*>(base)[i] = v;
  if constexpr (kT == DType::kF16) static_cast<uint16_t*>(base)[i] = f32_to_f16(v);
  if constexpr (kT == DType::kBF16) static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
}

// Element offset of the first element of flattened row r (all dims but the last), honouring strides.
int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t off = 0;
  for (int d = t.ndim - 2; d >= 0; --d) {
    off += (r % t.shape[d]) * t.stride[d];
    r /= t.shape[d];
  }
  return off;
}

int64_t last_dim(const Tensor& t) {
  return t.ndim == 0 ? 1 : t.shape[t.ndim - 1];
}
int64_t last_stride(const Tensor& t) {
  return t.ndim == 0 ? 1 : t.stride[t.ndim - 1];
}

char* byte_at(const Tensor& t, int64_t elem_offset) {
  return static_cast<char*>(t.data) + elem_offset * int64_t(dtype_size(t.dtype));
}

template <DType kSrc, DType kDst>
void convert_typed(cpu::WorkerPool& pool, const Tensor& src, const Tensor& dst) {
  const int64_t cols = last_dim(src);
  const int64_t rows = src.numel() / cols;
  const int64_t ss = last_stride(src), ds = last_stride(dst);
  cpu::parallel_items(pool, rows, src.numel(), kParallelMinWork, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const void* s = byte_at(src, row_offset(src, r));
      void* d = byte_at(dst, row_offset(dst, r));
      for (int64_t c = 0; c < cols; ++c) store_from_f32<kDst>(d, c * ds, load_as_f32<kSrc>(s, c * ss));
    }
  });
}

template <DType kSrc>
void convert_from(cpu::WorkerPool& pool, const Tensor& src, const Tensor& dst) {
  switch (dst.dtype) {
    case DType::kF32: return convert_typed<kSrc, DType::kF32>(pool, src, dst);
    case DType::kF16: return convert_typed<kSrc, DType::kF16>(pool, src, dst);
    case DType::kBF16: return convert_typed<kSrc, DType::kBF16>(pool, src, dst);
    default: FG_CHECK(false, "convert: unsupported dst dtype");
  }
}

template <DType kT>
void fill_typed(cpu::WorkerPool& pool, const Tensor& t, float lo, float hi, uint64_t seed) {
  const int64_t cols = last_dim(t);
  const int64_t rows = t.numel() / cols;
  const int64_t ts = last_stride(t);
  // Exactly reproducible on any IEEE machine: the product of two f32 values is exact in double,
  // so a fused multiply-add gives the same double as separate operations.
  const double range = double(hi - lo);
  cpu::parallel_items(pool, rows, t.numel(), kParallelMinWork, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      void* d = byte_at(t, row_offset(t, r));
      for (int64_t c = 0; c < cols; ++c) {
        const uint64_t index = uint64_t(r * cols + c);
        const float u = sample_uniform(seed, index);
        store_from_f32<kT>(d, c * ts, float(range * double(u) + double(lo)));
      }
    }
  });
}

}  // namespace

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  FG_CHECK(src.device == Device::kCpu && dst.device == Device::kCpu,
           "convert: src and dst must be cpu tensors, got " + src.describe() + " -> " + dst.describe());
  FG_CHECK(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype),
           "convert: only f32/f16/bf16 are supported, got " + src.describe() + " -> " + dst.describe());
  bool same_shape = src.ndim == dst.ndim;
  for (int d = 0; same_shape && d < src.ndim; ++d) same_shape = src.shape[d] == dst.shape[d];
  FG_CHECK(same_shape, "convert: shapes differ: " + src.describe() + " -> " + dst.describe());
  if (src.numel() == 0) return;
  FG_CHECK(src.data != nullptr && dst.data != nullptr,
           "convert: undefined tensor: " + src.describe() + " -> " + dst.describe());
  switch (src.dtype) {
    case DType::kF32: return convert_from<DType::kF32>(pool_, src, dst);
    case DType::kF16: return convert_from<DType::kF16>(pool_, src, dst);
    case DType::kBF16: return convert_from<DType::kBF16>(pool_, src, dst);
    default: FG_CHECK(false, "convert: unsupported src dtype " + src.describe());
  }
}

void CpuBackend::fill_uniform(Tensor& t, float lo, float hi, uint64_t seed) {
  FG_CHECK(t.device == Device::kCpu && is_float_dtype(t.dtype),
           "fill_uniform: t must be an f32/f16/bf16 cpu tensor, got " + t.describe());
  if (t.numel() == 0) return;
  FG_CHECK(t.data != nullptr, "fill_uniform: t is undefined: " + t.describe());
  switch (t.dtype) {
    case DType::kF32: return fill_typed<DType::kF32>(pool_, t, lo, hi, seed);
    case DType::kF16: return fill_typed<DType::kF16>(pool_, t, lo, hi, seed);
    case DType::kBF16: return fill_typed<DType::kBF16>(pool_, t, lo, hi, seed);
    default: break;
  }
}

// ---- row ops

// out[i, :] = src[index[i], :], with every index checked.
// src: [n, h] f32; index: [m] i32; out: [m, h] f32. Messages name the op and its arguments.
static void gather_checked_rows(cpu::WorkerPool& pool, const char* op, const char* src_name, const Tensor& src,
                                const char* index_name, const Tensor& index, Tensor& out) {
  check_view(op, src_name, src, DType::kF32, 2);
  check_view(op, index_name, index, DType::kI32, 1);
  check_view(op, "out", out, DType::kF32, 2);
  const int64_t n = src.shape[0], h = src.shape[1], m = index.shape[0];
  check_dim(op, "out", out, 0, m);
  check_dim(op, "out", out, 1, h);
  const int32_t* idx = index.ptr<int32_t>();
  for (int64_t i = 0; i < m; ++i)
    FG_CHECK(idx[i] >= 0 && idx[i] < n, std::string(op) + ": " + index_name + "[" + std::to_string(i) + "] = " +
                                            std::to_string(idx[i]) + " is outside " + src_name + " " + src.describe());
  cpu::parallel_items(pool, m, m * h, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(row<float>(out, i), row<float>(src, idx[i]), size_t(h) * 4);
  });
}

void CpuBackend::silu_mul(const Tensor& x, Tensor& out) {
  check_view("silu_mul", "x", x, DType::kF32, 2);
  check_view("silu_mul", "out", out, DType::kF32, 2);
  const int64_t n = x.shape[0], inter = out.shape[1];
  check_dim("silu_mul", "out", out, 0, n);
  check_dim("silu_mul", "x", x, 1, 2 * inter);
  cpu::parallel_items(pool_, n, n * inter, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* gate = row<float>(x, i);
      const float* up = gate + inter;
      float* o = row<float>(out, i);
      for (int64_t c = 0; c < inter; ++c) {
        const float g = gate[c];
        o[c] = g / (1.0f + std::exp(-g)) * up[c];  // silu(g) = g * sigmoid(g), as torch computes it
      }
    }
  });
}

void CpuBackend::gelu_tanh_mul(const Tensor& x, Tensor& out) {
  check_view("gelu_tanh_mul", "x", x, DType::kF32, 2);
  check_view("gelu_tanh_mul", "out", out, DType::kF32, 2);
  const int64_t n = x.shape[0], inter = out.shape[1];
  check_dim("gelu_tanh_mul", "out", out, 0, n);
  check_dim("gelu_tanh_mul", "x", x, 1, 2 * inter);
  // sqrt(2 / pi), and the cubic coefficient of the tanh approximation.
  constexpr double kBeta = 0.7978845608028654;
  constexpr double kKappa = 0.044715;
  cpu::parallel_items(pool_, n, n * inter, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* gate = row<float>(x, i);
      const float* up = gate + inter;
      float* o = row<float>(out, i);
      for (int64_t c = 0; c < inter; ++c) {
        // Evaluated in double and rounded once: within an ulp of torch's f32 kernel.
        const double g = gate[c];
        const float act = float(0.5 * g * (1.0 + std::tanh(kBeta * (g + kKappa * g * g * g))));
        o[c] = act * up[c];
      }
    }
  });
}

void CpuBackend::scale(Tensor& x, float s) {
  check_view("scale", "x", x, DType::kF32, 2);
  const int64_t m = x.shape[0], n = x.shape[1];
  cpu::parallel_items(pool_, m, m * n, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* r = row<float>(x, i);
      for (int64_t c = 0; c < n; ++c) r[c] *= s;
    }
  });
}

void CpuBackend::softcap(Tensor& x, float cap) {
  check_view("softcap", "x", x, DType::kF32, 2);
  FG_CHECK(cap > 0.0f, "softcap: cap must be positive, got " + std::to_string(cap));
  const int64_t m = x.shape[0], n = x.shape[1];
  cpu::parallel_items(pool_, m, m * n, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* r = row<float>(x, i);
      // As transformers: x / cap, tanh, * cap, each rounded to f32.
      for (int64_t c = 0; c < n; ++c) r[c] = float(std::tanh(double(r[c] / cap))) * cap;
    }
  });
}

void CpuBackend::kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) {
  check_view("kv_write", "k", k, DType::kF32, 3);
  check_view("kv_write", "v", v, DType::kF32, 3);
  check_view("kv_write", "slot_mapping", slot_mapping, DType::kI32, 1);
  const DType kv_dtype = cpu::check_kv_cache("kv_write", cache);
  const int64_t n = k.shape[0], heads = k.shape[1], head_dim = k.shape[2];
  const int64_t num_pages = cache.k.shape[0], page_size = cache.k.shape[1];
  for (int d = 0; d < 3; ++d) check_dim("kv_write", "v", v, d, k.shape[d]);
  check_dim("kv_write", "slot_mapping", slot_mapping, 0, n);
  check_dim("kv_write", "cache.k", cache.k, 2, heads);
  check_dim("kv_write", "cache.k", cache.k, 3, head_dim);
  const int32_t* slots = slot_mapping.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    FG_CHECK(slots[i] < num_pages * page_size, "kv_write: slot_mapping[" + std::to_string(i) +
                                                   "] = " + std::to_string(slots[i]) + " is past the cache " +
                                                   cache.k.describe());
  const size_t es = dtype_size(cache.k.dtype);
  // One row of head_dim values into the cache: copied (f32), rounded to bf16, or quantized as
  // x * (1 / scale) (exact: scales are powers of two) rounded to e4m3.
  auto store = [&](const float* src, const Tensor& dst_cache, int64_t elem, const Tensor& scales, int64_t h) {
    char* dst = static_cast<char*>(dst_cache.data) + elem * int64_t(es);
    if (kv_dtype == DType::kF32) {
      std::memcpy(dst, src, size_t(head_dim) * 4);
    } else if (kv_dtype == DType::kBF16) {
      auto* b = reinterpret_cast<uint16_t*>(dst);
      for (int64_t d = 0; d < head_dim; ++d) b[d] = f32_to_bf16(src[d]);
    } else {
      const float inv = 1.0f / scales.ptr<float>()[h];
      auto* q = reinterpret_cast<uint8_t*>(dst);
      for (int64_t d = 0; d < head_dim; ++d) q[d] = f32_to_f8e4m3(src[d] * inv);
    }
  };
  cpu::parallel_items(pool_, n, n * heads * head_dim, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t slot = slots[i];
      if (slot < 0) continue;  // padding token: nothing to store
      const int64_t page = slot / page_size, offset = slot % page_size;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t dst = page * cache.k.stride[0] + offset * cache.k.stride[1] + h * cache.k.stride[2];
        const int64_t dst_v = page * cache.v.stride[0] + offset * cache.v.stride[1] + h * cache.v.stride[2];
        store(row<float>(k, i, h), cache.k, dst, cache.k_scale, h);
        store(row<float>(v, i, h), cache.v, dst_v, cache.v_scale, h);
      }
    }
  });
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) {
  gather_checked_rows(pool_, "gather_rows", "x", x, "indices", indices, out);
}

}  // namespace fg
