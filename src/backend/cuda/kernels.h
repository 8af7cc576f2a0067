// Launch helpers of the CUDA backend's kernels (everything but attention): one plain params
// struct per kernel and one host function that picks the template instance for the dtypes and
// launches it on a stream. Host code (cuda_backend.cc) builds the params from Tensor views; the
// kernels themselves live in the .cu files and never see a Tensor.
// Pointers here are device pointers; strides are in elements unless the name says bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace fg::cuda {

// A matrix of `rows` x `cols` elements whose rows may be spread over two strided levels, so that
// 2D views [n, cols] (inner = 1) and 3D per-head views [n, heads, cols] (inner = heads) share one
// kernel: row r starts at data + (r / inner) * stride_outer + (r % inner) * stride_inner. Columns
// are contiguous.
struct RowView {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inner = 1;
  int64_t stride_outer = 0;
  int64_t stride_inner = 0;
};

// dst = src elementwise with a dtype change (f32/f16/bf16 each way). Same rows and cols.
struct ConvertParams {
  RowView src;
  RowView dst;
};
void launch_convert(const ConvertParams& p, DType src, DType dst, cudaStream_t stream);

// t[r, c] = f32(double(f32(hi - lo)) * sample_uniform(seed, r * cols + c) + lo), rounded to t's
// dtype: the counter is the element's row-major index in the logical shape and the arithmetic is
// the CPU backend's, so both backends fill identical bits.
struct FillUniformParams {
  RowView t;
  float lo = 0.0f;
  float hi = 1.0f;
  uint64_t seed = 0;
};
void launch_fill_uniform(const FillUniformParams& p, DType dtype, cudaStream_t stream);

// dst row i = src row indices[i] (or row i when indices is null), `row_bytes` bytes each.
// Used by embedding and gather_rows; dtype-agnostic (moves bytes).
struct GatherRowsParams {
  const void* src = nullptr;
  int64_t src_row_stride_bytes = 0;
  const int32_t* indices = nullptr;  // [rows] i32
  void* dst = nullptr;
  int64_t dst_row_stride_bytes = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
};
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);

// out = x / sqrt(mean(x^2) + eps) * weight per row (f32 math). With `residual` set (fused form):
// residual += delta first (rounded to the act dtype), then the norm of the updated residual.
// x is unused in the fused form. weight: [cols] act. out may alias x or delta.
struct RmsNormParams {
  RowView x;
  RowView residual;
  RowView delta;
  RowView out;
  const void* weight = nullptr;
  float eps = 1e-6f;
  bool fused_add = false;
};
void launch_rms_norm(const RmsNormParams& p, DType act, cudaStream_t stream);

// Paged KV write: for token i with slot s = slots[i] >= 0, page = s / page_size, offset = s %
// page_size, cache[page, offset, h, :] = src[i, h, :] for k and v. Moves `elem_bytes` elements.
struct KvWriteParams {
  const void* k = nullptr;
  int64_t k_stride_token = 0;
  int64_t k_stride_head = 0;
  const void* v = nullptr;
  int64_t v_stride_token = 0;
  int64_t v_stride_head = 0;
  const int32_t* slots = nullptr;  // [n] i32
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t cache_stride_page = 0;  // same layout for k_cache and v_cache
  int64_t cache_stride_slot = 0;
  int64_t cache_stride_head = 0;
  int n = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  int elem_bytes = 2;
};
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream);

// Rotary embedding in place on q [n, num_q_heads, head_dim] and k [n, num_kv_heads, head_dim].
struct RopeParams {
  void* q = nullptr;
  int64_t q_stride_token = 0;
  int64_t q_stride_head = 0;
  int num_q_heads = 0;
  void* k = nullptr;
  int64_t k_stride_token = 0;
  int64_t k_stride_head = 0;
  int num_kv_heads = 0;
  int n = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  const int32_t* positions = nullptr;     // [n] i32
  const float* inv_freq = nullptr;        // [rotary_dim / 2] f32, or null with per_token_base
  const float* per_token_base = nullptr;  // [n] f32 or null
  bool neox = true;
  float attention_scaling = 1.0f;
  // With kv.slots set, the rotated k rows and the kv.v rows also go into the paged cache (kv.k is
  // unused): rope and kv_write in one launch.
  KvWriteParams kv;
};
void launch_rope(const RopeParams& p, DType act, cudaStream_t stream);

// out[i, j] = silu(x[i, j]) * x[i, inter + j]. x: [n, 2 * inter] (row stride x_stride).
struct SiluMulParams {
  const void* x = nullptr;
  int64_t x_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  int64_t n = 0;
  int64_t inter = 0;
};
void launch_silu_mul(const SiluMulParams& p, DType act, cudaStream_t stream);

// out[i, j] += bias[j]. out: [m, n] (row stride), dtype f32/f16/bf16; bias: [n] act.
struct AddBiasParams {
  void* out = nullptr;
  int64_t out_stride = 0;
  const void* bias = nullptr;
  int64_t m = 0;
  int64_t n = 0;
};
void launch_add_bias(const AddBiasParams& p, DType out, DType bias, cudaStream_t stream);

// A plain tiled GEMM for shapes cuBLASLt declines: out = x @ w^T (+ bias), f32 accumulation.
// x: [m, k] (row stride ldx); w: [n, k] (row stride ldw); out: [m, n] (row stride ldo).
struct GemmFallbackParams {
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* w = nullptr;
  int64_t ldw = 0;
  const void* bias = nullptr;  // [n] or null
  void* out = nullptr;
  int64_t ldo = 0;
  int m = 0;
  int n = 0;
  int k = 0;
};
void launch_gemm_fallback(const GemmFallbackParams& p, DType in, DType out, cudaStream_t stream);

// One logits row's sampling settings as the device reads them (backend.h's SamplingRow).
struct SampleRowParams {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint64_t counter;
};

// One token per logits row by the rule of backend/sampling_rule.h.
struct SampleParams {
  const float* logits = nullptr;  // [rows, vocab] f32, row stride `row_stride`
  int64_t row_stride = 0;
  int vocab = 0;
  int rows = 0;
  const SampleRowParams* settings = nullptr;  // [rows], device
  int32_t* out = nullptr;                     // [rows] i32
};
void launch_sample(const SampleParams& p, cudaStream_t stream);

// Constrained generation: logits[rows[i], t] = -inf where bit t of masks[i] is clear.
struct MaskLogitsParams {
  float* logits = nullptr;  // [m, vocab] f32, row stride `row_stride`
  int64_t row_stride = 0;
  int vocab = 0;
  const int32_t* rows = nullptr;    // [num_rows]
  const uint32_t* masks = nullptr;  // [num_rows, words]
  int num_rows = 0;
  int words = 0;
};
void launch_mask_logits(const MaskLogitsParams& p, cudaStream_t stream);

}  // namespace fg::cuda
