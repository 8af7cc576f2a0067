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

// dst row i = src row indices[i] - index_base (or row i when indices is null), `row_bytes` bytes
// each; with num_src_rows >= 0, an index outside [index_base, index_base + num_src_rows) writes a
// row of zero bytes (a vocabulary shard's lookup). Used by embedding, embedding_shard and
// gather_rows; dtype-agnostic (moves bytes).
struct GatherRowsParams {
  const void* src = nullptr;
  int64_t src_row_stride_bytes = 0;
  const int32_t* indices = nullptr;  // [rows] i32
  void* dst = nullptr;
  int64_t dst_row_stride_bytes = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t index_base = 0;
  int64_t num_src_rows = -1;  // < 0: every index is valid (unchecked)
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
  bool weight_f32 = false;  // weight is f32 (else the act dtype)
  float eps = 1e-6f;
  bool fused_add = false;
  // FP8 output instead of `out` (launch_add_rms_norm_fp8): e4m3 codes [rows, cols] contiguous and
  // f32 scales, per row ([rows]) or, with `grouped`, per row and 128 columns ([ceil(cols / 128),
  // rows], group-major); out describes the rows' shape only.
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  bool grouped = false;
};
void launch_rms_norm(const RmsNormParams& p, DType act, cudaStream_t stream);
// The fused residual add + RMSNorm with its output quantized as Backend::quantize_rows_fp8 would
// quantize the act-dtype output (bit for bit), in one launch; false (nothing launched) where the
// row layout does not allow it (rows up to 1024 columns or beyond the vector kernel's 16,384, or
// not in 16-byte vectors): the caller then runs the two ops.
bool launch_add_rms_norm_fp8(const RmsNormParams& p, DType act, cudaStream_t stream);

// Paged KV write: for token i with slot s = slots[i] >= 0, page = s / page_size, offset = s %
// page_size, cache[page, offset, h, :] = src[i, h, :] for k and v. Moves `elem_bytes` elements;
// with k_scale set (an fp8 cache) stores e4m3(src * (1 / scale[h])) instead, rounded to nearest
// even and saturating (cvt.satfinite: the host's f32_to_f8e4m3 bit for bit), src being `act`.
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
  const float* k_scale = nullptr;  // fp8 cache: [num_kv_heads] f32; null: a plain copy
  const float* v_scale = nullptr;
  DType act = DType::kBF16;  // the dtype of k and v (read when quantizing)
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
  const int32_t* positions = nullptr;        // [n] i32
  const float* inv_freq = nullptr;           // [num_tables, rotary_dim / 2] f32, or null with per_token_base
  const int32_t* per_token_table = nullptr;  // [n] i32: each token's row of inv_freq, or null (row 0)
  const float* per_token_base = nullptr;     // [n] f32 or null
  bool neox = true;
  float attention_scaling = 1.0f;
  // With kv.slots set, the rotated k rows and the kv.v rows also go into the paged cache (kv.k is
  // unused): rope and kv_write in one launch.
  KvWriteParams kv;
  // With q_norm set (needs kv.slots, and head_dim / 2 a multiple of 32 up to 128): each head of q
  // and of k is first RMS-normalized over head_dim with its weight (q_norm for q heads, k_norm for
  // kv heads, [head_dim] in f32 or the act dtype) and rounded to the act dtype, as rms_norm does.
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  bool norm_weight_f32 = false;
  float norm_eps = 0.0f;
};
// Whether launch_rope takes q/k norms for this head_dim (one warp, two or four per head).
constexpr bool rope_takes_qk_norm(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
void launch_rope(const RopeParams& p, DType act, cudaStream_t stream);

// out[i, j] = act(x[i, j]) * x[i, inter + j] with act = silu, or gelu with the tanh approximation
// when gelu_tanh. x: [n, 2 * inter] (row stride x_stride).
struct SiluMulParams {
  const void* x = nullptr;
  int64_t x_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  int64_t n = 0;
  int64_t inter = 0;
  bool gelu_tanh = false;
};
void launch_silu_mul(const SiluMulParams& p, DType act, cudaStream_t stream);

// In place on x (f32 or act): x = x * scale, or with cap > 0, x = cap * tanh(x / cap) (scale unused).
struct ScaleParams {
  RowView x;
  float scale = 1.0f;
  float cap = 0.0f;
};
void launch_scale(const ScaleParams& p, DType dtype, cudaStream_t stream);

// ---- mixture of experts (moe.cu); backend.h's MoeRouting describes the arrays.

// Sets the grouped GEMM kernels' shared-memory limits on the current device (once per backend,
// before any launch or graph capture); returns the CTAs of the Hopper grouped GEMM's persistent
// grid (the SM count), 0 where it cannot run (moe.cu).
int init_moe_kernels();

// Softmax and top-k per token, then the assignments sorted by expert.
struct MoeRouteParams {
  const float* logits = nullptr;  // [num_tokens, num_experts] f32, row stride logits_stride
  int64_t logits_stride = 0;
  int num_tokens = 0;
  int num_experts = 0;  // <= 512
  int top_k = 0;        // <= 16
  bool renormalize = true;
  int32_t* topk_ids = nullptr;        // [num_tokens, top_k] contiguous
  float* topk_weights = nullptr;      // [num_tokens, top_k] contiguous
  int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  int32_t* sorted_assign = nullptr;   // [num_tokens * top_k]
  int32_t* assign_row = nullptr;      // [num_tokens * top_k]
};
void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream);

// The grouped GEMM: sorted row r of expert e: out[r] = x_r @ w[e]^T (f32 accumulation), x_r = x[r]
// or x[sorted_assign[r] / top_k] when gather.
struct MoeGemmParams {
  const void* x = nullptr;  // [rows of x, k] act, row stride ldx (elements, a multiple of 8)
  int64_t ldx = 0;
  const void* w = nullptr;  // [num_experts, n, k] act, contiguous
  void* out = nullptr;      // [num_assign, n] act, row stride ldo (even)
  int64_t ldo = 0;
  const int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  const int32_t* sorted_assign = nullptr;   // [num_assign] (read when gather)
  int num_assign = 0;
  int num_experts = 0;
  int top_k = 1;
  int n = 0;  // even
  int k = 0;  // a multiple of 8
  bool gather = false;
  bool batch_invariant = false;  // one kernel for every step (else chosen from the rows per expert)
  bool decode_gemv = true;       // up to 16 rows per expert: gemv_kernel.cuh's stream where k allows (moe.cu)
  int wgmma_ctas = 0;            // > 0: the Hopper wgmma kernel, with this many CTAs, where moe.cu picks it
};
void launch_moe_gemm(const MoeGemmParams& p, DType act, cudaStream_t stream);

// out[t] = sum over j (ascending expert id) of topk_weights[t, j] * y[assign_row[t * top_k + j]].
struct MoeCombineParams {
  const void* y = nullptr;  // [num_tokens * top_k, h] act, row stride ldy
  int64_t ldy = 0;
  void* out = nullptr;  // [num_tokens, h] act, row stride ldo
  int64_t ldo = 0;
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  const int32_t* assign_row = nullptr;
  int num_tokens = 0;
  int top_k = 0;
  int h = 0;
};
void launch_moe_combine(const MoeCombineParams& p, DType act, cudaStream_t stream);

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
  int32_t dist_row;  // the row of SampleParams::dist that gets this row's distribution (-1: none)
};

// One token per logits row by the rule of backend/sampling_rule.h.
struct SampleParams {
  const float* logits = nullptr;  // [rows, vocab] f32, row stride `row_stride`
  int64_t row_stride = 0;
  int vocab = 0;
  int rows = 0;
  const SampleRowParams* settings = nullptr;  // [rows], device
  int32_t* out = nullptr;                     // [rows] i32
  bool all_greedy = false;                    // every row's temperature <= 0 (an arg-max)
  float* dist = nullptr;                      // [r, vocab] f32, row stride `dist_stride`
  int64_t dist_stride = 0;
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

// Log-probabilities of selected logits rows (backend.h's Backend::logprobs).
struct LogprobsParams {
  const float* logits = nullptr;  // [m, vocab] f32, row stride `row_stride`
  int64_t row_stride = 0;
  int vocab = 0;
  const int32_t* rows = nullptr;    // [num_rows]
  const int32_t* tokens = nullptr;  // [m]
  int num_rows = 0;
  int n = 0;                   // top entries per row
  float* stats = nullptr;      // [num_rows, 2]
  int32_t* top_ids = nullptr;  // [num_rows, n]
  float* top_lp = nullptr;     // [num_rows, n]
};
void launch_logprobs(const LogprobsParams& p, cudaStream_t stream);

}  // namespace fg::cuda
