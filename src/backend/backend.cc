// Backend selection by name, and attention plans with their workspace from the backend itself.
// The CUDA factory lives in backend/cuda when it is built; otherwise
// asking for cuda is a clear error rather than a silent fallback.
#include "backend/backend.h"

namespace fg {

#if !defined(FG_WITH_CUDA)
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index, const BackendOptions& options) {
  (void)device_index;
  (void)options;
  return unsupported("this flashgen was built without the CUDA backend (nvcc was not found at build time)");
}
#endif

int64_t fp8_block_scale_stride(int64_t k) {
  return ((k + kFp8Block - 1) / kFp8Block + 3) / 4 * 4;
}

Fp8Scaling fp8_quantize_scaling(const Tensor& x, const Tensor& codes, const Tensor& scales) {
  FG_CHECK(x.ndim == 2 && codes.ndim == 2 && codes.shape[0] == x.shape[0] && codes.shape[1] == x.shape[1],
           "quantize_rows_fp8: expected x [m, k] and codes [m, k]: " + x.describe() + ", " + codes.describe());
  const int64_t m = x.shape[0], groups = (x.shape[1] + kFp8Block - 1) / kFp8Block;
  if (scales.ndim == 1 && scales.shape[0] == m) return Fp8Scaling::kPerChannel;
  FG_CHECK(scales.ndim == 2 && scales.shape[0] == groups && scales.shape[1] == m,
           "quantize_rows_fp8: expected scales [m] or [ceil(k / 128), m] for x " + x.describe() + ", got " +
               scales.describe());
  return Fp8Scaling::kBlock128;
}

Fp8Scaling fp8_scaling(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales) {
  FG_CHECK(x.ndim == 2 && w.ndim == 2 && x.shape[1] == w.shape[1],
           "gemm_fp8: expected x [m, k] and w [n, k]: " + x.describe() + ", " + w.describe());
  const int64_t m = x.shape[0], n = w.shape[0], k = x.shape[1];
  if (x_scales.ndim == 1 && w_scales.ndim == 1) {
    FG_CHECK(x_scales.shape[0] == m && w_scales.shape[0] == n,
             "gemm_fp8: per-channel scales must be x_scales [m], w_scales [n]: " + x_scales.describe() + ", " +
                 w_scales.describe());
    return Fp8Scaling::kPerChannel;
  }
  const int64_t kb = (k + kFp8Block - 1) / kFp8Block, nb = (n + kFp8Block - 1) / kFp8Block;
  FG_CHECK(x_scales.ndim == 2 && w_scales.ndim == 2 && x_scales.shape[0] == kb && x_scales.shape[1] == m &&
               x_scales.is_contiguous() && w_scales.shape[0] == nb && w_scales.shape[1] == kb &&
               (kb == 1 || w_scales.stride[1] == 1) && (nb == 1 || w_scales.stride[0] == fp8_block_scale_stride(k)),
           "gemm_fp8: 128-block scales must be x_scales [ceil(k / 128), m] contiguous and w_scales [ceil(n / 128), "
           "ceil(k / 128)] with row stride " +
               std::to_string(fp8_block_scale_stride(k)) + ": " + x_scales.describe() + ", " + w_scales.describe());
  return Fp8Scaling::kBlock128;
}

void Backend::quantize_rows_fp8(const Tensor&, Tensor&, Tensor&) {
  FG_CHECK(false, name() + " has no FP8 GEMMs (supports_fp8_gemm() is false)");
}

void Backend::gemm_fp8(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  FG_CHECK(false, name() + " has no FP8 GEMMs (supports_fp8_gemm() is false)");
}

void qkv_head_views(const Tensor& qkv, int num_q_heads, int num_kv_heads, Tensor& q, Tensor& k, Tensor& v) {
  const int heads = num_q_heads + 2 * num_kv_heads;
  FG_CHECK(qkv.ndim == 2 && num_q_heads > 0 && num_kv_heads >= 0 && qkv.shape[1] % heads == 0,
           "qkv: expected [n, (num_q_heads + 2 num_kv_heads) * head_dim]: " + qkv.describe());
  const int64_t d = qkv.shape[1] / heads;
  auto heads_at = [&](int64_t head0, int count) {
    Tensor t = qkv;
    t.data = static_cast<char*>(qkv.data) + head0 * d * qkv.stride[1] * int64_t(dtype_size(qkv.dtype));
    t.ndim = 3;
    t.shape = {qkv.shape[0], count, d, 0};
    t.stride = {qkv.stride[0], d * qkv.stride[1], qkv.stride[1], 0};
    return t;
  };
  q = heads_at(0, num_q_heads);
  k = heads_at(num_q_heads, num_kv_heads);
  v = heads_at(num_q_heads + num_kv_heads, num_kv_heads);
}

void Backend::qkv_rope_kv_write(const Tensor& x, const Tensor& w, const Tensor* bias, int num_q_heads, int num_kv_heads,
                                const RopeArgs& args, const Tensor& slot_mapping, KvCacheLayer& cache, Tensor& qkv) {
  gemm(x, w, bias, qkv);
  Tensor q, k, v;
  qkv_head_views(qkv, num_q_heads, num_kv_heads, q, k, v);
  rope_kv_write(q, k, v, args, slot_mapping, cache);
}

void Backend::add_rms_norm_fp8(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                               Tensor& codes, Tensor& scales) {
  add_rms_norm(residual, delta, weight, eps, out);
  quantize_rows_fp8(out, codes, scales);
}

void Backend::act_mul_fp8(const Tensor& gate_up, bool gelu_tanh, Tensor& out, Tensor& codes, Tensor& scales) {
  if (gelu_tanh)
    gelu_tanh_mul(gate_up, out);
  else
    silu_mul(gate_up, out);
  quantize_rows_fp8(out, codes, scales);
}

std::unique_ptr<AttentionPlan> make_attention_plan(Backend& backend, const AttentionPlanShape& shape) {
  return backend.make_attention_plan(shape, backend.alloc(backend.attention_workspace_bytes(shape)));
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend(options);
  if (name == "cuda") return make_cuda_backend(0, options);
  if (name == "auto") {
    auto cuda = make_cuda_backend(0, options);
    if (cuda.is_ok()) return std::move(cuda).value();
    return make_cpu_backend(options);
  }
  return invalid_argument("unknown backend '" + name + "' (expected cpu, cuda or auto)");
}

}  // namespace fg
