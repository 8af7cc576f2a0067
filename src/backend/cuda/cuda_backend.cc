// CudaBackend (cuda_backend.h) and fg::make_cuda_backend: validates the Tensor views each op gets,
// turns them into the kernels' params structs (kernels.h) and launches on the backend's stream.
// Shape or dtype mismatches are caller bugs and abort through FG_CHECK with the views described.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"

namespace fg::cuda {

namespace {

bool is_float_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

void check_on_device(const Tensor& t, const char* what) {
  FG_CHECK(t.device == Device::kCuda, std::string(what) + " must be a cuda tensor, got " + t.describe());
  FG_CHECK(t.data != nullptr || t.numel() == 0, std::string(what) + " has no data: " + t.describe());
}

// The RowView of a tensor whose last dim is contiguous and whose leading dims fold into at most
// two strided levels.
RowView row_view(const Tensor& t, const char* what) {
  check_on_device(t, what);
  FG_CHECK(t.ndim >= 1, std::string(what) + ": expected at least one dim, got " + t.describe());
  RowView v;
  v.data = t.data;
  v.cols = t.shape[t.ndim - 1];
  FG_CHECK(v.cols <= 1 || t.stride[t.ndim - 1] == 1,
           std::string(what) + ": last dim must be contiguous: " + t.describe());
  // Leading dims, size-1 dims dropped, adjacent dims merged when they are one strided run.
  int64_t shape[kMaxDims];
  int64_t stride[kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim - 1; ++d) {
    if (t.shape[d] == 1) continue;
    if (n > 0 && stride[n - 1] == t.stride[d] * t.shape[d]) {
      shape[n - 1] *= t.shape[d];
      stride[n - 1] = t.stride[d];
      continue;
    }
    shape[n] = t.shape[d];
    stride[n] = t.stride[d];
    ++n;
  }
  FG_CHECK(n <= 2, std::string(what) + ": leading dims do not fold into two strided levels: " + t.describe());
  if (n == 0) {
    v.rows = t.numel() == 0 ? 0 : 1;
    v.inner = 1;
    v.stride_outer = v.cols;
  } else if (n == 1) {
    v.rows = shape[0];
    v.inner = 1;
    v.stride_outer = stride[0];
  } else {
    v.rows = shape[0] * shape[1];
    v.inner = shape[1];
    v.stride_outer = stride[0];
    v.stride_inner = stride[1];
  }
  if (t.numel() == 0) v.rows = 0;
  return v;
}

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

std::string pair_desc(const Tensor& a, const Tensor& b) {
  return a.describe() + " vs " + b.describe();
}

// out [m, n] = x [m, k] @ w [n, k]^T (+ bias [n]) as the decode-size kernels take it (gemv.h).
GemvParams gemv_params(const Tensor& x, const Tensor& w, const void* bias, const Tensor& out) {
  return GemvParams{x.data,   x.stride[0],   w.data,     w.stride[0], bias,
                    out.data, out.stride[0], x.shape[0], w.shape[0],  x.shape[1]};
}

}  // namespace

CudaBackend::CudaBackend(int device_index, const BackendOptions& options) : device_(device_index), options_(options) {
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&sample_copied_, cudaEventDisableTiming));
  arena_ = std::make_shared<DeviceArena>(device_, kArenaSlabBytes);
  gemm_ = std::make_unique<GemmLt>(options_.batch_invariant ? GemmLt::Mode::kBatchInvariant : GemmLt::Mode::kHeuristic);
  moe_wgmma_ctas_ = init_moe_kernels();
  if (const char* env = std::getenv("FG_MOE_WGMMA"); env != nullptr && std::string(env) == "0") moe_wgmma_ctas_ = 0;
  gemv_fp8_ = gemv_fp8_supported();
  fp8_channel_ = gemm_->has_fp8_scaling(false);
  fp8_blocks_ = gemm_->has_fp8_scaling(true);
  {
    const char* env = std::getenv("FG_GEMV");
    gemv_ = gemv_supported() && !(env != nullptr && std::string(env) == "0");
    if (gemv_) init_gemv_kernels();
    if (const char* mb = std::getenv("FG_GEMV_MAX_MB"); mb != nullptr && std::atoll(mb) > 0)
      gemv_max_weight_bytes_ = std::atoll(mb) << 20;
  }
  ensure_sample_capacity(256);
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  gemm_.reset();
  sample_host_.reset();
  sample_device_.reset();
  if (sample_copied_ != nullptr) (void)cudaEventDestroy(sample_copied_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

// ---- memory and transfers

Buffer CudaBackend::alloc(size_t bytes) {
  return arena_->alloc(bytes);
}

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                            size_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, rows > 1 ? dst_stride : row_bytes, src, rows > 1 ? src_stride : row_bytes,
                               row_bytes, rows, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::bind_thread() {
  CUDA_CHECK(cudaSetDevice(device_));
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Buffer CudaBackend::alloc_host(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  return Buffer(p, bytes, Device::kCpu, [](void* q) { (void)cudaFreeHost(q); });
}

Backend::MemoryInfo CudaBackend::memory_info() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return MemoryInfo{int64_t(total_bytes), int64_t(free_bytes)};
}

// ---- elementwise

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  FG_CHECK(same_shape(src, dst), "convert: shapes differ: " + pair_desc(src, dst));
  FG_CHECK(is_float_type(src.dtype) && is_float_type(dst.dtype), "convert: f32/f16/bf16 only: " + pair_desc(src, dst));
  launch_convert(ConvertParams{row_view(src, "convert src"), row_view(dst, "convert dst")}, src.dtype, dst.dtype,
                 stream_);
}

void CudaBackend::fill_uniform(Tensor& t, float lo, float hi, uint64_t seed) {
  FG_CHECK(is_float_type(t.dtype), "fill_uniform: f32/f16/bf16 only: " + t.describe());
  launch_fill_uniform(FillUniformParams{row_view(t, "fill_uniform"), lo, hi, seed}, t.dtype, stream_);
}

void CudaBackend::silu_mul(const Tensor& x, Tensor& out) {
  gated_act(x, out, false);
}

void CudaBackend::gelu_tanh_mul(const Tensor& x, Tensor& out) {
  gated_act(x, out, true);
}

void CudaBackend::scale(Tensor& x, float s) {
  FG_CHECK(is_float_type(x.dtype), "scale: f32/f16/bf16 only: " + x.describe());
  ScaleParams p;
  p.x = row_view(x, "scale x");
  p.scale = s;
  launch_scale(p, x.dtype, stream_);
}

void CudaBackend::softcap(Tensor& x, float cap) {
  FG_CHECK(is_float_type(x.dtype), "softcap: f32/f16/bf16 only: " + x.describe());
  FG_CHECK(cap > 0.0f, "softcap: cap must be positive, got " + std::to_string(cap));
  ScaleParams p;
  p.x = row_view(x, "softcap x");
  p.cap = cap;
  launch_scale(p, x.dtype, stream_);
}

void CudaBackend::gated_act(const Tensor& x, Tensor& out, bool gelu_tanh) {
  check_on_device(x, "silu_mul x");
  check_on_device(out, "silu_mul out");
  FG_CHECK(x.ndim == 2 && out.ndim == 2 && x.shape[0] == out.shape[0] && x.shape[1] == 2 * out.shape[1],
           "silu_mul: expected x [n, 2 * inter] and out [n, inter]: " + pair_desc(x, out));
  FG_CHECK(x.dtype == out.dtype, "silu_mul: dtypes differ: " + pair_desc(x, out));
  FG_CHECK((x.shape[1] <= 1 || x.stride[1] == 1) && (out.shape[1] <= 1 || out.stride[1] == 1),
           "silu_mul: last dim must be contiguous: " + pair_desc(x, out));
  launch_silu_mul(SiluMulParams{x.data, x.stride[0], out.data, out.stride[0], out.shape[0], out.shape[1], gelu_tanh},
                  x.dtype, stream_);
}

// ---- row movement

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  lookup_rows(ids, table, 0, /*zero_outside=*/false, out);
}

void CudaBackend::embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) {
  lookup_rows(ids, table, first_id, /*zero_outside=*/true, out);
}

void CudaBackend::lookup_rows(const Tensor& ids, const Tensor& table, int64_t first_id, bool zero_outside,
                              Tensor& out) {
  check_on_device(ids, "embedding ids");
  check_on_device(table, "embedding table");
  check_on_device(out, "embedding out");
  FG_CHECK(ids.dtype == DType::kI32 && ids.ndim == 1, "embedding: ids must be [n] i32: " + ids.describe());
  FG_CHECK(table.ndim == 2 && out.ndim == 2 && out.shape[0] == ids.shape[0] && out.shape[1] == table.shape[1] &&
               table.dtype == out.dtype,
           "embedding: expected table [vocab, hidden], out [n, hidden]: " + pair_desc(table, out));
  FG_CHECK((table.shape[1] <= 1 || table.stride[1] == 1) && (out.shape[1] <= 1 || out.stride[1] == 1),
           "embedding: last dim must be contiguous: " + pair_desc(table, out));
  FG_CHECK(ids.shape[0] <= 1 || ids.stride[0] == 1, "embedding: ids must be contiguous");
  int64_t es = int64_t(dtype_size(out.dtype));
  launch_gather_rows(
      GatherRowsParams{table.data, table.stride[0] * es, ids.ptr<const int32_t>(), out.data, out.stride[0] * es,
                       out.shape[0], out.shape[1] * es, first_id, zero_outside ? table.shape[0] : -1},
      stream_);
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) {
  check_on_device(x, "gather_rows x");
  check_on_device(indices, "gather_rows indices");
  check_on_device(out, "gather_rows out");
  FG_CHECK(indices.dtype == DType::kI32 && indices.ndim == 1 && (indices.shape[0] <= 1 || indices.stride[0] == 1),
           "gather_rows: indices must be [m] i32 contiguous: " + indices.describe());
  FG_CHECK(x.ndim == 2 && out.ndim == 2 && out.shape[0] == indices.shape[0] && out.shape[1] == x.shape[1] &&
               x.dtype == out.dtype,
           "gather_rows: expected x [n, h], out [m, h]: " + pair_desc(x, out));
  FG_CHECK((x.shape[1] <= 1 || x.stride[1] == 1) && (out.shape[1] <= 1 || out.stride[1] == 1),
           "gather_rows: last dim must be contiguous: " + pair_desc(x, out));
  int64_t es = int64_t(dtype_size(out.dtype));
  launch_gather_rows(GatherRowsParams{x.data, x.stride[0] * es, indices.ptr<const int32_t>(), out.data,
                                      out.stride[0] * es, out.shape[0], out.shape[1] * es},
                     stream_);
}

namespace {

// Checks kv_write's arguments and describes them for the kernel (kv_write and rope_kv_write).
KvWriteParams kv_write_params(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) {
  check_on_device(k, "kv_write k");
  check_on_device(v, "kv_write v");
  check_on_device(slot_mapping, "kv_write slot_mapping");
  check_on_device(cache.k, "kv_write cache.k");
  check_on_device(cache.v, "kv_write cache.v");
  FG_CHECK(k.ndim == 3 && same_shape(k, v), "kv_write: k, v must be [n, num_kv_heads, head_dim]: " + pair_desc(k, v));
  FG_CHECK(cache.k.ndim == 4 && same_shape(cache.k, cache.v) && cache.k.stride == cache.v.stride,
           "kv_write: caches must be [num_pages, page_size, num_kv_heads, head_dim] with one layout: " +
               pair_desc(cache.k, cache.v));
  const bool fp8 = cache.k.dtype == DType::kF8E4M3;
  FG_CHECK(cache.k.shape[2] == k.shape[1] && cache.k.shape[3] == k.shape[2] && k.dtype == v.dtype &&
               cache.k.dtype == cache.v.dtype &&
               (fp8 ? is_float_type(k.dtype) && k.dtype != DType::kF32 : k.dtype == cache.k.dtype),
           "kv_write: k/v do not match the cache: " + pair_desc(k, cache.k));
  if (fp8)
    for (const Tensor* t : {&cache.k_scale, &cache.v_scale}) {
      check_on_device(*t, "kv_write cache scale");
      FG_CHECK(t->dtype == DType::kF32 && t->ndim == 1 && t->shape[0] == k.shape[1] &&
                   (t->shape[0] <= 1 || t->stride[0] == 1),
               "kv_write: an fp8 cache needs k_scale and v_scale [num_kv_heads] f32: " + t->describe());
    }
  FG_CHECK(slot_mapping.dtype == DType::kI32 && slot_mapping.ndim == 1 && slot_mapping.shape[0] == k.shape[0] &&
               (slot_mapping.shape[0] <= 1 || slot_mapping.stride[0] == 1),
           "kv_write: slot_mapping must be [n] i32 contiguous: " + slot_mapping.describe());
  FG_CHECK((k.shape[2] <= 1 || (k.stride[2] == 1 && v.stride[2] == 1 && cache.k.stride[3] == 1)),
           "kv_write: head_dim must be contiguous: " + pair_desc(k, cache.k));
  KvWriteParams p;
  p.k = k.data;
  p.k_stride_token = k.stride[0];
  p.k_stride_head = k.stride[1];
  p.v = v.data;
  p.v_stride_token = v.stride[0];
  p.v_stride_head = v.stride[1];
  p.slots = slot_mapping.ptr<const int32_t>();
  p.k_cache = cache.k.data;
  p.v_cache = cache.v.data;
  p.cache_stride_page = cache.k.stride[0];
  p.cache_stride_slot = cache.k.stride[1];
  p.cache_stride_head = cache.k.stride[2];
  p.n = int(k.shape[0]);
  p.num_kv_heads = int(k.shape[1]);
  p.head_dim = int(k.shape[2]);
  p.page_size = int(cache.k.shape[1]);
  p.elem_bytes = int(dtype_size(k.dtype));
  p.act = k.dtype;
  if (fp8) {
    p.k_scale = cache.k_scale.ptr<const float>();
    p.v_scale = cache.v_scale.ptr<const float>();
  }
  return p;
}

}  // namespace

void CudaBackend::kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) {
  launch_kv_write(kv_write_params(k, v, slot_mapping, cache), stream_);
}

// ---- normalization and rotary

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  FG_CHECK(same_shape(x, out) && x.dtype == out.dtype, "rms_norm: x and out differ: " + pair_desc(x, out));
  check_on_device(weight, "rms_norm weight");
  FG_CHECK(weight.ndim == 1 && weight.shape[0] == x.shape[x.ndim - 1] &&
               (weight.dtype == x.dtype || weight.dtype == DType::kF32) &&
               (weight.shape[0] <= 1 || weight.stride[0] == 1),
           "rms_norm: weight must be [hidden] contiguous, act dtype or f32: " + pair_desc(weight, x));
  RmsNormParams p;
  p.x = row_view(x, "rms_norm x");
  p.out = row_view(out, "rms_norm out");
  p.weight = weight.data;
  p.weight_f32 = weight.dtype == DType::kF32 && x.dtype != DType::kF32;
  p.eps = eps;
  launch_rms_norm(p, x.dtype, stream_);
}

namespace {

// The checked kernel parameters of a residual add + RMSNorm (add_rms_norm, add_rms_norm_fp8: `op`).
RmsNormParams add_rms_norm_params(const Tensor& residual, const Tensor& delta, const Tensor& weight, float eps,
                                  const Tensor& out, const std::string& op) {
  FG_CHECK(same_shape(residual, delta) && same_shape(residual, out) && residual.dtype == delta.dtype &&
               residual.dtype == out.dtype,
           op + ": residual, delta and out must match: " + pair_desc(residual, out));
  check_on_device(weight, (op + " weight").c_str());
  FG_CHECK(weight.ndim == 1 && weight.shape[0] == out.shape[out.ndim - 1] &&
               (weight.dtype == out.dtype || weight.dtype == DType::kF32) &&
               (weight.shape[0] <= 1 || weight.stride[0] == 1),
           op + ": weight must be [hidden] contiguous, act dtype or f32: " + pair_desc(weight, out));
  RmsNormParams p;
  p.residual = row_view(residual, (op + " residual").c_str());
  p.delta = row_view(delta, (op + " delta").c_str());
  p.out = row_view(out, (op + " out").c_str());
  p.weight = weight.data;
  p.weight_f32 = weight.dtype == DType::kF32 && out.dtype != DType::kF32;
  p.eps = eps;
  p.fused_add = true;
  return p;
}

}  // namespace

void CudaBackend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out) {
  launch_rms_norm(add_rms_norm_params(residual, delta, weight, eps, out, "add_rms_norm"), out.dtype, stream_);
}

namespace {

// Checks rope's arguments and describes them for the kernel (rope and rope_kv_write).
RopeParams rope_params(Tensor& q, Tensor& k, const RopeArgs& args) {
  check_on_device(q, "rope q");
  check_on_device(args.positions, "rope positions");
  bool has_k = k.data != nullptr && k.numel() > 0;
  FG_CHECK(q.ndim == 3, "rope: q must be [n, num_q_heads, head_dim]: " + q.describe());
  if (has_k) {
    check_on_device(k, "rope k");
    FG_CHECK(k.ndim == 3 && k.shape[0] == q.shape[0] && k.shape[2] == q.shape[2] && k.dtype == q.dtype,
             "rope: k must be [n, num_kv_heads, head_dim] like q: " + pair_desc(q, k));
    FG_CHECK(k.shape[2] <= 1 || k.stride[2] == 1, "rope: head_dim of k must be contiguous: " + k.describe());
  }
  FG_CHECK(q.shape[2] <= 1 || q.stride[2] == 1, "rope: head_dim of q must be contiguous: " + q.describe());
  FG_CHECK(args.rotary_dim > 0 && args.rotary_dim % 2 == 0 && args.rotary_dim <= q.shape[2],
           "rope: rotary_dim must be even and <= head_dim, got " + std::to_string(args.rotary_dim));
  FG_CHECK(args.positions.dtype == DType::kI32 && args.positions.ndim == 1 && args.positions.shape[0] == q.shape[0],
           "rope: positions must be [n] i32: " + args.positions.describe());
  bool per_token = args.per_token_base.data != nullptr;
  bool tables = !per_token && args.per_token_table.data != nullptr;
  if (per_token) {
    check_on_device(args.per_token_base, "rope per_token_base");
    FG_CHECK(args.per_token_base.dtype == DType::kF32 && args.per_token_base.shape[0] == q.shape[0],
             "rope: per_token_base must be [n] f32: " + args.per_token_base.describe());
  } else if (tables) {
    check_on_device(args.per_token_table, "rope per_token_table");
    check_on_device(args.inv_freq, "rope inv_freq");
    FG_CHECK(args.per_token_table.dtype == DType::kI32 && args.per_token_table.ndim == 1 &&
                 args.per_token_table.shape[0] == q.shape[0] &&
                 (args.per_token_table.shape[0] <= 1 || args.per_token_table.stride[0] == 1),
             "rope: per_token_table must be [n] i32 contiguous: " + args.per_token_table.describe());
    FG_CHECK(args.inv_freq.dtype == DType::kF32 && args.inv_freq.ndim == 2 &&
                 args.inv_freq.shape[1] == args.rotary_dim / 2 && args.inv_freq.stride[0] == args.rotary_dim / 2,
             "rope: inv_freq must be [num_tables, rotary_dim / 2] f32 contiguous: " + args.inv_freq.describe());
  } else {
    check_on_device(args.inv_freq, "rope inv_freq");
    FG_CHECK(args.inv_freq.dtype == DType::kF32 && args.inv_freq.numel() == args.rotary_dim / 2,
             "rope: inv_freq must be [rotary_dim / 2] f32: " + args.inv_freq.describe());
  }
  RopeParams p;
  p.q = q.data;
  p.q_stride_token = q.stride[0];
  p.q_stride_head = q.stride[1];
  p.num_q_heads = int(q.shape[1]);
  if (has_k) {
    p.k = k.data;
    p.k_stride_token = k.stride[0];
    p.k_stride_head = k.stride[1];
    p.num_kv_heads = int(k.shape[1]);
  }
  p.n = int(q.shape[0]);
  p.head_dim = int(q.shape[2]);
  p.rotary_dim = args.rotary_dim;
  p.positions = args.positions.ptr<const int32_t>();
  p.inv_freq = per_token ? nullptr : args.inv_freq.ptr<const float>();
  p.per_token_base = per_token ? args.per_token_base.ptr<const float>() : nullptr;
  p.per_token_table = tables ? args.per_token_table.ptr<const int32_t>() : nullptr;
  p.neox = args.neox;
  p.attention_scaling = args.attention_scaling;
  return p;
}

}  // namespace

void CudaBackend::rope(Tensor& q, Tensor& k, const RopeArgs& args) {
  launch_rope(rope_params(q, k, args), q.dtype, stream_);
}

void CudaBackend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const RopeArgs& args, const Tensor& slot_mapping,
                                KvCacheLayer& cache) {
  RopeParams p = rope_params(q, k, args);
  p.kv = kv_write_params(k, v, slot_mapping, cache);
  FG_CHECK(p.head_dim % 2 == 0, "rope_kv_write: head_dim must be even, got " + std::to_string(p.head_dim));
  launch_rope(p, q.dtype, stream_);
}

void CudaBackend::qk_norm_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                        const Tensor& k_norm, float eps, const RopeArgs& args,
                                        const Tensor& slot_mapping, KvCacheLayer& cache) {
  const int64_t d = q.ndim == 3 ? q.shape[2] : 0;
  const bool f32 = q_norm.dtype == DType::kF32;
  const bool fused = rope_takes_qk_norm(int(d)) && k.numel() > 0 && q_norm.dtype == k_norm.dtype &&
                     (f32 || q_norm.dtype == q.dtype) && q_norm.numel() == d && k_norm.numel() == d &&
                     q_norm.is_contiguous() && k_norm.is_contiguous();
  if (!fused) {
    Backend::qk_norm_rope_kv_write(q, k, v, q_norm, k_norm, eps, args, slot_mapping, cache);
    return;
  }
  check_on_device(q_norm, "qk_norm_rope_kv_write q_norm");
  check_on_device(k_norm, "qk_norm_rope_kv_write k_norm");
  RopeParams p = rope_params(q, k, args);
  p.kv = kv_write_params(k, v, slot_mapping, cache);
  p.q_norm = q_norm.data;
  p.k_norm = k_norm.data;
  p.norm_weight_f32 = f32;
  p.norm_eps = eps;
  launch_rope(p, q.dtype, stream_);
}

void CudaBackend::qkv_rope_kv_write(const Tensor& x, const Tensor& w, const Tensor* bias, int num_q_heads,
                                    int num_kv_heads, const RopeArgs& args, const Tensor& slot_mapping,
                                    KvCacheLayer& cache, Tensor& qkv) {
  // The fused kernel is the decode-sized GEMM's: where gemm() would not run that kernel (batch-
  // invariant mode, wider products), nor would this.
  const bool plain =
      !options_.batch_invariant && gemv_ && x.ndim == 2 && w.ndim == 2 && qkv.ndim == 2 && w.dtype == x.dtype &&
      qkv.dtype == x.dtype && (x.dtype == DType::kBF16 || x.dtype == DType::kF16) && x.shape[1] == w.shape[1] &&
      qkv.shape[0] == x.shape[0] && qkv.shape[1] == w.shape[0] && x.stride[1] == 1 && w.stride[1] == 1 &&
      qkv.stride[1] == 1 && args.rotary_dim > 0 &&
      (bias == nullptr || (bias->dtype == x.dtype && bias->numel() == w.shape[0] && bias->is_contiguous()));
  if (plain) {
    check_on_device(x, "qkv_rope_kv_write x");
    check_on_device(w, "qkv_rope_kv_write w");
    check_on_device(qkv, "qkv_rope_kv_write qkv");
    if (bias != nullptr) check_on_device(*bias, "qkv_rope_kv_write bias");
    Tensor q, k, v;
    qkv_head_views(qkv, num_q_heads, num_kv_heads, q, k, v);
    GemvRopeParams p;
    static_cast<GemvParams&>(p) = gemv_params(x, w, bias != nullptr ? bias->data : nullptr, qkv);
    p.rope = rope_params(q, k, args);
    p.rope.kv = kv_write_params(k, v, slot_mapping, cache);
    if (gemv_rope_fits(p, gemv_max_weight_bytes_)) {
      launch_gemv_rope(p, x.dtype, stream_);
      return;
    }
  }
  Backend::qkv_rope_kv_write(x, w, bias, num_q_heads, num_kv_heads, args, slot_mapping, cache, qkv);
}

// ---- GEMM

void CudaBackend::gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  check_on_device(x, "gemm x");
  check_on_device(w, "gemm w");
  check_on_device(out, "gemm out");
  FG_CHECK(
      x.ndim == 2 && w.ndim == 2 && out.ndim == 2 && x.shape[1] == w.shape[1] && out.shape[0] == x.shape[0] &&
          out.shape[1] == w.shape[0],
      "gemm: expected x [m, k], w [n, k], out [m, n]: " + x.describe() + ", " + w.describe() + ", " + out.describe());
  FG_CHECK((x.dtype == DType::kBF16 || x.dtype == DType::kF16) && w.dtype == x.dtype,
           "gemm: x and w must share a bf16/f16 dtype: " + pair_desc(x, w));
  FG_CHECK(out.dtype == x.dtype || out.dtype == DType::kF32,
           "gemm: out must be the act dtype or f32: " + out.describe());
  FG_CHECK(x.shape[1] > 0, "gemm: k must be positive");
  FG_CHECK((x.shape[1] <= 1 || (x.stride[1] == 1 && w.stride[1] == 1)) && (out.shape[1] <= 1 || out.stride[1] == 1),
           "gemm: last dims must be contiguous: " + pair_desc(x, out));
  if (bias != nullptr) {
    check_on_device(*bias, "gemm bias");
    FG_CHECK(bias->ndim == 1 && bias->shape[0] == w.shape[0] && bias->dtype == x.dtype &&
                 (bias->shape[0] <= 1 || bias->stride[0] == 1),
             "gemm: bias must be [n] contiguous in the act dtype: " + bias->describe());
  }
  GemmProblem prob;
  prob.m = int(x.shape[0]);
  prob.n = int(w.shape[0]);
  prob.k = int(x.shape[1]);
  // cuBLASLt wants ld >= rows even when a dim is 1 and its stride is meaningless.
  prob.ldx = std::max<int64_t>(x.shape[0] <= 1 ? x.shape[1] : x.stride[0], x.shape[1]);
  prob.ldw = std::max<int64_t>(w.shape[0] <= 1 ? w.shape[1] : w.stride[0], w.shape[1]);
  prob.ldo = std::max<int64_t>(out.shape[0] <= 1 ? out.shape[1] : out.stride[0], out.shape[1]);
  prob.in = x.dtype;
  prob.out = out.dtype;
  prob.bias = bias != nullptr;
  const void* bias_ptr = bias ? bias->data : nullptr;
  // Decode-sized products stream the weights through our kernel, which starts reading them before
  // the previous kernel ends (cuBLASLt's pay a ramp per call: docs/perf.md); batch-invariant mode
  // keeps one algorithm for every m.
  if (!options_.batch_invariant) {
    const GemvParams gp = gemv_params(x, w, bias_ptr, out);
    if (gemv_ && gemv_fits(gp, gemv_max_weight_bytes_)) {
      launch_gemv(gp, x.dtype, out.dtype, stream_);
      return;
    }
  }
  GemmOutcome outcome = gemm_->run(prob, x.data, w.data, bias_ptr, out.data, stream_);
  if (outcome == GemmOutcome::kDeclined) {
    launch_gemm_fallback(
        GemmFallbackParams{x.data, prob.ldx, w.data, prob.ldw, bias_ptr, out.data, prob.ldo, prob.m, prob.n, prob.k},
        x.dtype, out.dtype, stream_);
  } else if (outcome == GemmOutcome::kDoneWithoutBias) {
    launch_add_bias(AddBiasParams{out.data, prob.ldo, bias_ptr, prob.m, prob.n}, out.dtype, x.dtype, stream_);
  }
}

// ---- mixture of experts

namespace {

// Device pointers of a routing whose tensors are contiguous and match its sizes.
void check_routing(const MoeRouting& r, const char* op) {
  const std::string o = op;
  FG_CHECK(r.num_tokens >= 0 && r.num_experts > 0 && r.num_experts <= 512 && r.top_k > 0 && r.top_k <= 16 &&
               r.top_k <= r.num_experts,
           o + ": routing of " + std::to_string(r.num_experts) + " experts, top " + std::to_string(r.top_k) +
               " is outside the kernels' limits (512 experts, top 16)");
  const int64_t a = int64_t(r.num_tokens) * r.top_k;
  auto check = [&](const Tensor& t, DType dt, int64_t numel, const char* name) {
    check_on_device(t, (o + " " + name).c_str());
    FG_CHECK(t.dtype == dt && t.numel() == numel && t.is_contiguous(),
             o + ": " + name + " must be contiguous " + std::string(dtype_name(dt)) + " of " + std::to_string(numel) +
                 " elements: " + t.describe());
  };
  check(r.topk_ids, DType::kI32, a, "topk_ids");
  check(r.topk_weights, DType::kF32, a, "topk_weights");
  check(r.expert_offsets, DType::kI32, r.num_experts + 1, "expert_offsets");
  check(r.sorted_assign, DType::kI32, a, "sorted_assign");
  check(r.assign_row, DType::kI32, a, "assign_row");
}

}  // namespace

void CudaBackend::moe_route(const Tensor& router_logits, bool renormalize, MoeRouting& r) {
  check_routing(r, "moe_route");
  check_on_device(router_logits, "moe_route router_logits");
  FG_CHECK(router_logits.dtype == DType::kF32 && router_logits.ndim == 2 && router_logits.shape[0] == r.num_tokens &&
               router_logits.shape[1] == r.num_experts && (r.num_experts <= 1 || router_logits.stride[1] == 1),
           "moe_route: router_logits must be [num_tokens, num_experts] f32: " + router_logits.describe());
  MoeRouteParams p;
  p.logits = router_logits.ptr<const float>();
  p.logits_stride = r.num_tokens <= 1 ? r.num_experts : router_logits.stride[0];
  p.num_tokens = r.num_tokens;
  p.num_experts = r.num_experts;
  p.top_k = r.top_k;
  p.renormalize = renormalize;
  p.topk_ids = r.topk_ids.ptr<int32_t>();
  p.topk_weights = r.topk_weights.ptr<float>();
  p.expert_offsets = r.expert_offsets.ptr<int32_t>();
  p.sorted_assign = r.sorted_assign.ptr<int32_t>();
  p.assign_row = r.assign_row.ptr<int32_t>();
  launch_moe_route(p, stream_);
}

bool CudaBackend::supports_fp8_gemm() const {
  return true;  // our decode kernel for decode-sized products, cuBLASLt's scaled FP8 GEMMs above, else the plain kernel
}

void CudaBackend::quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales) {
  check_on_device(x, "quantize_rows_fp8 x");
  check_on_device(codes, "quantize_rows_fp8 codes");
  check_on_device(scales, "quantize_rows_fp8 scales");
  const bool grouped = fp8_quantize_scaling(x, codes, scales) == Fp8Scaling::kBlock128;
  FG_CHECK(x.dtype == act_dtype() && codes.dtype == DType::kF8E4M3 && scales.dtype == DType::kF32,
           "quantize_rows_fp8: expected act, f8_e4m3 and f32 tensors: " + pair_desc(x, codes));
  FG_CHECK((x.shape[1] <= 1 || x.stride[1] == 1) && codes.is_contiguous() && scales.is_contiguous(),
           "quantize_rows_fp8: x's rows and codes, scales must be contiguous: " + pair_desc(x, codes));
  const int64_t m = x.shape[0], k = x.shape[1];
  launch_quantize_rows_fp8(QuantizeRowsFp8Params{x.data, m <= 1 ? k : x.stride[0], static_cast<uint8_t*>(codes.data),
                                                 static_cast<float*>(scales.data), m, k, grouped},
                           x.dtype, stream_);
}

void CudaBackend::act_mul_fp8(const Tensor& gate_up, bool gelu_tanh, Tensor& out, Tensor& codes, Tensor& scales) {
  check_on_device(gate_up, "act_mul_fp8 gate_up");
  check_on_device(codes, "act_mul_fp8 codes");
  check_on_device(scales, "act_mul_fp8 scales");
  const bool grouped = fp8_quantize_scaling(out, codes, scales) == Fp8Scaling::kBlock128;
  const int64_t m = out.shape[0], k = out.shape[1];
  FG_CHECK(gate_up.ndim == 2 && gate_up.shape[0] == m && gate_up.shape[1] == 2 * k,
           "act_mul_fp8: expected gate_up [m, 2 * inter] and out [m, inter]: " + pair_desc(gate_up, out));
  FG_CHECK(gate_up.dtype == act_dtype() && out.dtype == gate_up.dtype && codes.dtype == DType::kF8E4M3 &&
               scales.dtype == DType::kF32 && (k <= 1 || gate_up.stride[1] == 1) && codes.is_contiguous() &&
               scales.is_contiguous(),
           "act_mul_fp8: expected act rows, contiguous f8_e4m3 codes and f32 scales: " + pair_desc(gate_up, codes));
  QuantizeRowsFp8Params p{gate_up.data,
                          m <= 1 ? 2 * k : gate_up.stride[0],
                          static_cast<uint8_t*>(codes.data),
                          static_cast<float*>(scales.data),
                          m,
                          k,
                          grouped};
  p.input = gelu_tanh ? Fp8Input::kGeluTanhMul : Fp8Input::kSiluMul;
  if (!launch_quantize_rows_fp8(p, gate_up.dtype, stream_))
    Backend::act_mul_fp8(gate_up, gelu_tanh, out, codes, scales);
}

void CudaBackend::add_rms_norm_fp8(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                                   Tensor& codes, Tensor& scales) {
  RmsNormParams p = add_rms_norm_params(residual, delta, weight, eps, out, "add_rms_norm_fp8");
  check_on_device(codes, "add_rms_norm_fp8 codes");
  check_on_device(scales, "add_rms_norm_fp8 scales");
  const bool grouped = fp8_quantize_scaling(out, codes, scales) == Fp8Scaling::kBlock128;
  FG_CHECK(out.dtype == act_dtype() && codes.dtype == DType::kF8E4M3 && scales.dtype == DType::kF32 &&
               codes.is_contiguous() && scales.is_contiguous(),
           "add_rms_norm_fp8: expected act rows, contiguous f8_e4m3 codes and f32 scales: " + pair_desc(out, codes));
  p.codes = static_cast<uint8_t*>(codes.data);
  p.scales = static_cast<float*>(scales.data);
  p.grouped = grouped;
  if (!launch_add_rms_norm_fp8(p, out.dtype, stream_))
    Backend::add_rms_norm_fp8(residual, delta, weight, eps, out, codes, scales);
}

void CudaBackend::gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                           Tensor& out) {
  for (const auto& [t, what] :
       {std::pair{&x, "gemm_fp8 x"}, std::pair{&x_scales, "gemm_fp8 x_scales"}, std::pair{&w, "gemm_fp8 w"},
        std::pair{&w_scales, "gemm_fp8 w_scales"}, std::pair{static_cast<const Tensor*>(&out), "gemm_fp8 out"}})
    check_on_device(*t, what);
  const bool blocks = fp8_scaling(x, x_scales, w, w_scales) == Fp8Scaling::kBlock128;
  FG_CHECK(out.ndim == 2 && out.shape[0] == x.shape[0] && out.shape[1] == w.shape[0],
           "gemm_fp8: expected out [m, n]: " + x.describe() + ", " + w.describe() + ", " + out.describe());
  FG_CHECK(x.dtype == DType::kF8E4M3 && w.dtype == DType::kF8E4M3 && x_scales.dtype == DType::kF32 &&
               w_scales.dtype == DType::kF32 && out.dtype == act_dtype(),
           "gemm_fp8: expected f8_e4m3 x and w, f32 scales, act out: " + pair_desc(x, w) + ", " + out.describe());
  FG_CHECK(x.is_contiguous() && w.is_contiguous() && x_scales.is_contiguous() && (blocks || w_scales.is_contiguous()) &&
               out.is_contiguous(),
           "gemm_fp8: every operand must be contiguous: " + pair_desc(x, w) + ", " + out.describe());
  FG_CHECK(x.shape[1] % 16 == 0, "gemm_fp8: k must be a multiple of 16, got " + std::to_string(x.shape[1]));
  FG_CHECK(x.shape[0] <= 0x7fffffff && w.shape[0] <= 0x7fffffff && x.shape[1] <= 0x7fffffff,
           "gemm_fp8: dims past int32");
  const auto* xs = static_cast<const float*>(x_scales.data);
  const auto* ws = static_cast<const float*>(w_scales.data);
  const GemmFp8Params params{static_cast<const uint8_t*>(x.data),
                             xs,
                             static_cast<const uint8_t*>(w.data),
                             ws,
                             out.data,
                             x.shape[0],
                             w.shape[0],
                             x.shape[1],
                             blocks ? fp8_block_scale_stride(x.shape[1]) : 0};
  // Decode-sized products stream the weights through our mma kernel (cuBLASLt's small-m FP8
  // kernels read them at a fraction of the bandwidth: docs/perf.md); batch-invariant mode keeps
  // one algorithm for every m.
  if (gemv_fp8_ && !options_.batch_invariant && gemv_fp8_fits(x.shape[0], w.shape[0], x.shape[1], blocks) &&
      reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0) {
    launch_gemv_fp8(params, out.dtype, stream_);
    return;
  }
  Fp8GemmProblem prob;
  prob.m = int(x.shape[0]);
  prob.n = int(w.shape[0]);
  prob.k = int(x.shape[1]);
  prob.out = out.dtype;
  prob.blocks = blocks;
  if (gemm_->run_fp8(prob, x.data, xs, w.data, ws, out.data, stream_) == GemmOutcome::kDeclined)
    launch_gemm_fp8_fallback(params, out.dtype, stream_);
}

void CudaBackend::moe_gemm(const Tensor& x, const Tensor& w, const MoeRouting& r, bool gather, Tensor& out) {
  check_routing(r, "moe_gemm");
  check_on_device(x, "moe_gemm x");
  check_on_device(w, "moe_gemm w");
  check_on_device(out, "moe_gemm out");
  const int64_t a = int64_t(r.num_tokens) * r.top_k;
  FG_CHECK(x.ndim == 2 && w.ndim == 3 && out.ndim == 2 && x.shape[0] == (gather ? r.num_tokens : a) &&
               w.shape[0] == r.num_experts && w.shape[2] == x.shape[1] && out.shape[0] == a &&
               out.shape[1] == w.shape[1],
           "moe_gemm: expected x [" + std::string(gather ? "num_tokens" : "A") +
               ", k], w [E, n, k], out [A, n]: " + x.describe() + ", " + w.describe() + ", " + out.describe());
  FG_CHECK(x.dtype == DType::kBF16 && w.dtype == x.dtype && out.dtype == x.dtype,
           "moe_gemm: x, w and out must be bf16: " + x.describe() + ", " + w.describe() + ", " + out.describe());
  FG_CHECK(w.is_contiguous() && (x.shape[1] <= 1 || x.stride[1] == 1) && (out.shape[1] <= 1 || out.stride[1] == 1),
           "moe_gemm: w must be contiguous and the rows of x and out too: " + w.describe());
  const int64_t ldx = x.shape[0] <= 1 ? x.shape[1] : x.stride[0];
  const int64_t ldo = out.shape[0] <= 1 ? out.shape[1] : out.stride[0];
  FG_CHECK(x.shape[1] % 8 == 0 && ldx % 8 == 0 && w.shape[1] % 2 == 0 && ldo % 2 == 0,
           "moe_gemm: k and x's row stride must be multiples of 8, n and out's row stride even: " + x.describe() +
               ", " + out.describe());
  FG_CHECK(reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(out.data) % 4 == 0,
           "moe_gemm: x and w must be 16-byte aligned, out 4-byte aligned");
  MoeGemmParams p;
  p.x = x.data;
  p.ldx = ldx;
  p.w = w.data;
  p.out = out.data;
  p.ldo = ldo;
  p.expert_offsets = r.expert_offsets.ptr<const int32_t>();
  p.sorted_assign = r.sorted_assign.ptr<const int32_t>();
  p.num_assign = int(a);
  p.num_experts = r.num_experts;
  p.top_k = r.top_k;
  p.n = int(w.shape[1]);
  p.k = int(w.shape[2]);
  p.gather = gather;
  p.batch_invariant = options_.batch_invariant;
  p.decode_gemv = gemv_;
  p.wgmma_ctas = moe_wgmma_ctas_;
  launch_moe_gemm(p, x.dtype, stream_);
}

void CudaBackend::moe_combine(const Tensor& y, const MoeRouting& r, Tensor& out) {
  check_routing(r, "moe_combine");
  check_on_device(y, "moe_combine y");
  check_on_device(out, "moe_combine out");
  FG_CHECK(y.ndim == 2 && out.ndim == 2 && y.shape[0] == int64_t(r.num_tokens) * r.top_k &&
               out.shape[0] == r.num_tokens && out.shape[1] == y.shape[1] && y.dtype == out.dtype &&
               (y.shape[1] <= 1 || (y.stride[1] == 1 && out.stride[1] == 1)),
           "moe_combine: expected y [A, h], out [num_tokens, h] in one act dtype: " + pair_desc(y, out));
  MoeCombineParams p;
  p.y = y.data;
  p.ldy = y.shape[0] <= 1 ? y.shape[1] : y.stride[0];
  p.out = out.data;
  p.ldo = out.shape[0] <= 1 ? out.shape[1] : out.stride[0];
  p.topk_ids = r.topk_ids.ptr<const int32_t>();
  p.topk_weights = r.topk_weights.ptr<const float>();
  p.assign_row = r.assign_row.ptr<const int32_t>();
  p.num_tokens = r.num_tokens;
  p.top_k = r.top_k;
  p.h = int(y.shape[1]);
  launch_moe_combine(p, out.dtype, stream_);
}

// ---- attention

namespace {

// The CUDA plan: one AttentionKernel (its plan buffers) over the caller's workspace.
class CudaAttentionPlan final : public AttentionPlan {
 public:
  CudaAttentionPlan(const AttentionPlanShape& shape, Buffer workspace, bool batch_invariant)
      : AttentionPlan(shape),
        workspace_(std::move(workspace)),
        kernel_(shape.max_total_q, shape.max_num_seqs, workspace_.data()) {
    kernel_.use_batch_invariant(batch_invariant);
  }
  AttentionKernel& kernel() { return kernel_; }
  const AttentionKernel& kernel() const { return kernel_; }

 private:
  Buffer workspace_;  // before kernel_: outlives it
  AttentionKernel kernel_;
};

template <class Plan>
auto& cuda_plan(Plan& plan) {
  auto* p = dynamic_cast<std::conditional_t<std::is_const_v<Plan>, const CudaAttentionPlan, CudaAttentionPlan>*>(&plan);
  FG_CHECK(p != nullptr, "attention: the plan was not made by the CUDA backend");
  return *p;
}

}  // namespace

Status CudaBackend::attention_supports(int head_dim) const {
  CUDA_CHECK(cudaSetDevice(device_));
  return AttentionKernel::supports(head_dim);
}

size_t CudaBackend::attention_workspace_bytes(const AttentionPlanShape& shape) const {
  FG_CHECK(shape.max_total_q > 0 && shape.max_num_seqs > 0, "attention plan: limits must be positive");
  CUDA_CHECK(cudaSetDevice(device_));
  return AttentionKernel::workspace_bytes(shape.max_total_q, shape.max_num_seqs);
}

std::unique_ptr<AttentionPlan> CudaBackend::make_attention_plan(const AttentionPlanShape& shape, Buffer workspace) {
  FG_CHECK(shape.num_kv_heads > 0 && shape.num_q_heads % shape.num_kv_heads == 0,
           "attention plan: num_q_heads " + std::to_string(shape.num_q_heads) + " is not a multiple of num_kv_heads " +
               std::to_string(shape.num_kv_heads));
  FG_CHECK(workspace.device() == Device::kCuda && workspace.bytes() >= attention_workspace_bytes(shape),
           "attention plan: the workspace is smaller than attention_workspace_bytes()");
  CUDA_CHECK(cudaSetDevice(device_));
  return std::make_unique<CudaAttentionPlan>(shape, std::move(workspace), options_.batch_invariant);
}

void CudaBackend::plan_attention(AttentionPlan& plan, const AttentionBatch& batch) {
  const AttentionPlanShape& sh = plan.shape();
  FG_CHECK(batch.total_q <= sh.max_total_q && batch.num_seqs <= sh.max_num_seqs,
           "plan_attention: a batch of " + std::to_string(batch.total_q) + " tokens in " +
               std::to_string(batch.num_seqs) + " sequences exceeds the plan's " + std::to_string(sh.max_total_q) +
               " / " + std::to_string(sh.max_num_seqs));
  cuda_plan(plan).kernel().plan(batch, sh.num_q_heads, sh.num_kv_heads, sh.head_dim, stream_);
}

void CudaBackend::attention(const AttentionPlan& plan, const Tensor& q, const KvCacheLayer& cache,
                            const AttentionBatch& batch, const AttentionParams& params, Tensor& out, Tensor* lse) {
  cuda_plan(plan).kernel().run(q, cache, batch, params, out, lse, stream_);
}

// ---- sampling

void CudaBackend::ensure_sample_capacity(int rows) {
  if (rows <= sample_capacity_) return;
  int capacity = std::max(rows, 2 * sample_capacity_);
  CUDA_CHECK(cudaEventSynchronize(sample_copied_));  // the old staging rows are no longer read
  sample_host_ = alloc_host(size_t(capacity) * sizeof(SampleRowParams));
  sample_device_ = alloc(size_t(capacity) * sizeof(SampleRowParams));
  sample_capacity_ = capacity;
}

void CudaBackend::mask_logits(Tensor& logits, const Tensor& rows, const Tensor& masks) {
  check_on_device(logits, "mask_logits logits");
  check_on_device(rows, "mask_logits rows");
  check_on_device(masks, "mask_logits masks");
  FG_CHECK(logits.ndim == 2 && logits.dtype == DType::kF32 && (logits.shape[1] <= 1 || logits.stride[1] == 1),
           "mask_logits: logits must be [m, vocab] f32 with contiguous rows: " + logits.describe());
  const int64_t words = (logits.shape[1] + 31) / 32;
  FG_CHECK(rows.dtype == DType::kI32 && rows.ndim == 1 && (rows.shape[0] <= 1 || rows.stride[0] == 1),
           "mask_logits: rows must be [r] i32 contiguous: " + rows.describe());
  FG_CHECK(masks.dtype == DType::kI32 && masks.ndim == 2 && masks.shape[0] == rows.shape[0] &&
               masks.shape[1] == words && masks.is_contiguous(),
           "mask_logits: masks must be [r, ceil(vocab / 32)] i32 words, contiguous: " + masks.describe());
  MaskLogitsParams p;
  p.logits = logits.ptr<float>();
  p.row_stride = logits.shape[0] <= 1 ? logits.shape[1] : logits.stride[0];
  p.vocab = int(logits.shape[1]);
  p.rows = rows.ptr<const int32_t>();
  p.masks = reinterpret_cast<const uint32_t*>(masks.data);
  p.num_rows = int(rows.shape[0]);
  p.words = int(words);
  launch_mask_logits(p, stream_);
}

void CudaBackend::logprobs(const Tensor& logits, const Tensor& rows, const Tensor& tokens, int n, Tensor& stats,
                           Tensor& top_ids, Tensor& top_lp) {
  check_on_device(logits, "logprobs logits");
  check_on_device(rows, "logprobs rows");
  check_on_device(tokens, "logprobs tokens");
  check_on_device(stats, "logprobs stats");
  FG_CHECK(logits.ndim == 2 && logits.dtype == DType::kF32 && (logits.shape[1] <= 1 || logits.stride[1] == 1),
           "logprobs: logits must be [m, vocab] f32 with contiguous rows: " + logits.describe());
  FG_CHECK(n >= 0 && n <= kMaxTopLogprobs,
           "logprobs: n " + std::to_string(n) + " outside [0, " + std::to_string(kMaxTopLogprobs) + "]");
  const int64_t r = rows.ndim == 1 ? rows.shape[0] : -1;
  FG_CHECK(rows.dtype == DType::kI32 && r >= 0 && (r <= 1 || rows.stride[0] == 1),
           "logprobs: rows must be [r] i32 contiguous: " + rows.describe());
  FG_CHECK(tokens.dtype == DType::kI32 && tokens.ndim == 1 && tokens.shape[0] == logits.shape[0] &&
               (tokens.shape[0] <= 1 || tokens.stride[0] == 1),
           "logprobs: tokens must be [m] i32 contiguous: " + tokens.describe());
  FG_CHECK(stats.dtype == DType::kF32 && stats.ndim == 2 && stats.shape[0] == r && stats.shape[1] == 2 &&
               stats.is_contiguous(),
           "logprobs: stats must be [r, 2] f32 contiguous: " + stats.describe());
  if (n > 0) {
    check_on_device(top_ids, "logprobs top_ids");
    check_on_device(top_lp, "logprobs top_lp");
    FG_CHECK(top_ids.dtype == DType::kI32 && top_ids.ndim == 2 && top_ids.shape[0] == r && top_ids.shape[1] == n &&
                 top_ids.is_contiguous() && top_lp.dtype == DType::kF32 && top_lp.ndim == 2 && top_lp.shape[0] == r &&
                 top_lp.shape[1] == n && top_lp.is_contiguous(),
             "logprobs: top_ids / top_lp must be [r, n] i32 / f32 contiguous: " + top_ids.describe() + ", " +
                 top_lp.describe());
  }
  LogprobsParams p;
  p.logits = logits.ptr<float>();
  p.row_stride = logits.shape[0] <= 1 ? logits.shape[1] : logits.stride[0];
  p.vocab = int(logits.shape[1]);
  p.rows = rows.ptr<const int32_t>();
  p.tokens = tokens.ptr<const int32_t>();
  p.num_rows = int(r);
  p.n = n;
  p.stats = stats.ptr<float>();
  p.top_ids = n > 0 ? top_ids.ptr<int32_t>() : nullptr;
  p.top_lp = n > 0 ? top_lp.ptr<float>() : nullptr;
  launch_logprobs(p, stream_);
}

void CudaBackend::sample(const Tensor& logits, std::span<const SamplingRow> rows, Tensor& out, Tensor* dist) {
  check_on_device(logits, "sample logits");
  check_on_device(out, "sample out");
  FG_CHECK(logits.ndim == 2 && logits.dtype == DType::kF32 && (logits.shape[1] <= 1 || logits.stride[1] == 1),
           "sample: logits must be [m, vocab] f32 with contiguous rows: " + logits.describe());
  FG_CHECK(int64_t(rows.size()) == logits.shape[0],
           "sample: " + std::to_string(rows.size()) + " sampling rows for " + logits.describe());
  FG_CHECK(out.dtype == DType::kI32 && out.ndim == 1 && out.shape[0] == logits.shape[0] &&
               (out.shape[0] <= 1 || out.stride[0] == 1),
           "sample: out must be [m] i32 contiguous: " + out.describe());
  int64_t dists = 0;
  if (dist != nullptr) {
    check_on_device(*dist, "sample dist");
    FG_CHECK(dist->ndim == 2 && dist->dtype == DType::kF32 && dist->shape[1] == logits.shape[1] &&
                 (dist->shape[1] <= 1 || dist->stride[1] == 1),
             "sample: dist must be [r, vocab] f32 with contiguous rows: " + dist->describe());
    dists = dist->shape[0];
    for (const SamplingRow& r : rows)
      FG_CHECK(r.dist_row < dists,
               "sample: distribution row " + std::to_string(r.dist_row) + " of " + std::to_string(dists));
  }
  int m = int(rows.size());
  if (m == 0) return;
  ensure_sample_capacity(m);
  CUDA_CHECK(cudaEventSynchronize(sample_copied_));  // the previous copy has left the staging rows
  auto* host = static_cast<SampleRowParams*>(sample_host_.data());
  bool all_greedy = true;
  for (int i = 0; i < m; ++i) {
    host[i] = SampleRowParams{rows[i].temperature, rows[i].top_k,   rows[i].top_p,   rows[i].min_p,
                              rows[i].seed,        rows[i].counter, rows[i].dist_row};
    all_greedy = all_greedy && !(rows[i].temperature > 0.0f);
  }
  CUDA_CHECK(cudaMemcpyAsync(sample_device_.data(), host, size_t(m) * sizeof(SampleRowParams), cudaMemcpyHostToDevice,
                             stream_));
  CUDA_CHECK(cudaEventRecord(sample_copied_, stream_));
  SampleParams p;
  p.logits = logits.ptr<const float>();
  p.row_stride = logits.shape[0] <= 1 ? logits.shape[1] : logits.stride[0];
  p.vocab = int(logits.shape[1]);
  p.rows = m;
  p.settings = static_cast<const SampleRowParams*>(sample_device_.data());
  p.out = out.ptr<int32_t>();
  p.all_greedy = all_greedy;
  if (dists > 0) {
    p.dist = dist->ptr<float>();
    p.dist_stride = dists <= 1 ? dist->shape[1] : dist->stride[0];
  }
  launch_sample(p, stream_);
}

// ---- graphs

namespace {

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, CudaAttentionPlan& plan, const GraphAttentionShape& bounds)
      : exec_(exec), plan_(plan), bounds_(bounds) {}
  ~CudaGraph() override {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }
  const CudaAttentionPlan& plan() const { return plan_; }
  const GraphAttentionShape& bounds() const { return bounds_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  CudaAttentionPlan& plan_;     // the plan its attention launches read (outlives the graph)
  GraphAttentionShape bounds_;  // the batches it may be replayed for
};

}  // namespace

std::unique_ptr<Graph> CudaBackend::capture_graph(const std::function<void()>& record, AttentionPlan& plan,
                                                  const GraphAttentionShape& bounds) {
  // The attention kernels loop over the plan's work items (counts read from device memory), but
  // their grid sizes are fixed when recorded: the plan sizes them for every batch within the
  // bounds and records only the launches such batches need.
  CudaAttentionPlan& p = cuda_plan(plan);
  const AttentionPlanShape& sh = plan.shape();
  FG_CHECK(bounds.num_seqs > 0 && bounds.num_seqs <= sh.max_num_seqs && bounds.page_size > 0,
           "capture_graph: bounds of " + std::to_string(bounds.num_seqs) + " sequences do not fit the plan's " +
               std::to_string(sh.max_num_seqs));
  p.kernel().begin_capture(bounds, sh.num_q_heads, sh.num_kv_heads, sh.head_dim, stream_);
  struct EndCapture {
    AttentionKernel& k;
    ~EndCapture() { k.end_capture(); }
  } end_capture{p.kernel()};
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  record();
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(exec, p, bounds);
}

void CudaBackend::replay_graph(Graph& graph) {
  auto* g = dynamic_cast<CudaGraph*>(&graph);
  FG_CHECK(g != nullptr, "replay_graph: the graph was not recorded by the CUDA backend");
  FG_CHECK(g->plan().kernel().plan_within(g->bounds()),
           "replay_graph: the batch planned into the graph's plan exceeds the bounds the graph was recorded for");
  CUDA_CHECK(cudaGraphLaunch(g->exec(), stream_));
}

}  // namespace fg::cuda

namespace fg {

Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index, const BackendOptions& options) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return unsupported(std::string("no CUDA GPU found: ") + cudaGetErrorString(err));
  }
  if (count == 0) return unsupported("no CUDA GPU found: the CUDA driver reports no devices");
  if (device_index < 0 || device_index >= count) {
    return invalid_argument("CUDA device " + std::to_string(device_index) + " does not exist (" +
                            std::to_string(count) + " found)");
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device_index);
  if (err == cudaSuccess) err = cudaSetDevice(device_index);
  if (err == cudaSuccess) err = cudaFree(nullptr);  // creates the context: fails early on a broken driver
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return unsupported("CUDA device " + std::to_string(device_index) + " is unusable: " + cudaGetErrorString(err));
  }
  if (prop.major < 8) {
    return unsupported("CUDA device " + std::to_string(device_index) + " (" + prop.name + ", sm_" +
                       std::to_string(prop.major) + std::to_string(prop.minor) +
                       ") is too old: flashgen needs sm_80 or newer");
  }
  return std::unique_ptr<Backend>(std::make_unique<cuda::CudaBackend>(device_index, options));
}

}  // namespace fg
