// CudaBackend: the fast implementation of backend/backend.h on one NVIDIA GPU. bf16 activations,
// f32 accumulation, one stream, one device arena; every op is a kernel launch (or a cuBLASLt
// GEMM) enqueued on that stream. Reached through fg::make_cuda_backend(); the engine and the
// model see only fg::Backend and must never include this header.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/device_arena.h"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.h"

namespace fg::cuda {

class CudaBackend final : public Backend {
 public:
  // Each cudaMalloc of the arena takes at least this much.
  static constexpr size_t kArenaSlabBytes = size_t(1) << 30;

  // The device must exist and be usable (make_cuda_backend checks that first).
  CudaBackend(int device_index, const BackendOptions& options);
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  const BackendOptions& options() const override { return options_; }
  DType act_dtype() const override { return DType::kBF16; }
  // FP8 matrices stay e4m3 codes (for gemm_fp8) where cuBLASLt has some FP8 scale mode here;
  // everything else bf16.
  DType weight_dtype(DType stored) const override {
    return stored == DType::kF8E4M3 && (fp8_channel_ || fp8_blocks_) ? DType::kF8E4M3 : act_dtype();
  }
  bool keeps_fp8_codes(Fp8Scaling scaling) const override {
    return scaling == Fp8Scaling::kBlock128 ? fp8_blocks_ : fp8_channel_;
  }

  Buffer alloc(size_t bytes) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                 size_t rows) override;
  void bind_thread() override;
  void synchronize() override;
  Buffer alloc_host(size_t bytes) override;
  // cudaMemGetInfo of this device: what --gpu-memory-fraction sizes the KV cache from.
  MemoryInfo memory_info() override;

  void convert(const Tensor& src, Tensor& dst) override;
  void fill_uniform(Tensor& t, float lo, float hi, uint64_t seed) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out) override;
  void rope(Tensor& q, Tensor& k, const RopeArgs& args) override;
  void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  bool supports_fp8_gemm() const override;
  void quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales) override;
  void gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales, Tensor& out) override;
  void add_rms_norm_fp8(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                        Tensor& codes, Tensor& scales) override;
  void act_mul_fp8(const Tensor& gate_up, bool gelu_tanh, Tensor& out, Tensor& codes, Tensor& scales) override;
  void silu_mul(const Tensor& x, Tensor& out) override;
  void gelu_tanh_mul(const Tensor& x, Tensor& out) override;
  void scale(Tensor& x, float s) override;
  void softcap(Tensor& x, float cap) override;
  // Mixture of experts (moe.cu): routing in two launches (top-k per token, then one block sorts
  // the assignments by expert), a tensor-core grouped GEMM whose tiles find their expert in the
  // offsets on the device (no host round trip: graph-capturable), and the weighted combine.
  void moe_route(const Tensor& router_logits, bool renormalize, MoeRouting& routing) override;
  void moe_gemm(const Tensor& x, const Tensor& w, const MoeRouting& routing, bool gather, Tensor& out) override;
  void moe_combine(const Tensor& y, const MoeRouting& routing, Tensor& out) override;
  void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) override;
  void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const RopeArgs& args, const Tensor& slot_mapping,
                     KvCacheLayer& cache) override;
  void qk_norm_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                             float eps, const RopeArgs& args, const Tensor& slot_mapping, KvCacheLayer& cache) override;
  // In the decode-sized GEMM's epilogue where it takes the product (gemv.h, launch_gemv_rope).
  void qkv_rope_kv_write(const Tensor& x, const Tensor& w, const Tensor* bias, int num_q_heads, int num_kv_heads,
                         const RopeArgs& args, const Tensor& slot_mapping, KvCacheLayer& cache, Tensor& qkv) override;
  // Plans are AttentionKernels (attention.h) over the caller's workspace.
  Status attention_supports(int head_dim) const override;
  size_t attention_workspace_bytes(const AttentionPlanShape& shape) const override;
  std::unique_ptr<AttentionPlan> make_attention_plan(const AttentionPlanShape& shape, Buffer workspace) override;
  void plan_attention(AttentionPlan& plan, const AttentionBatch& batch) override;
  void attention(const AttentionPlan& plan, const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch,
                 const AttentionParams& params, Tensor& out, Tensor* lse) override;
  void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) override;
  void sample(const Tensor& logits, std::span<const SamplingRow> rows, Tensor& out, Tensor* dist = nullptr) override;
  void mask_logits(Tensor& logits, const Tensor& rows, const Tensor& masks) override;
  void logprobs(const Tensor& logits, const Tensor& rows, const Tensor& tokens, int n, Tensor& stats, Tensor& top_ids,
                Tensor& top_lp) override;

  // CUDA graphs: stream capture (thread-local mode) on the backend's stream, instantiated once.
  bool supports_graphs() const override { return true; }
  std::unique_ptr<Graph> capture_graph(const std::function<void()>& record, AttentionPlan& plan,
                                       const GraphAttentionShape& bounds) override;
  void replay_graph(Graph& graph) override;

  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_; }
  const DeviceArena& arena() const { return *arena_; }

 private:
  void ensure_sample_capacity(int rows);
  // embedding (ids trusted) and embedding_shard (ids outside the table's rows give zeros).
  void lookup_rows(const Tensor& ids, const Tensor& table, int64_t first_id, bool zero_outside, Tensor& out);
  void gated_act(const Tensor& x, Tensor& out, bool gelu_tanh);

  int device_ = 0;
  BackendOptions options_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DeviceArena> arena_;
  std::unique_ptr<GemmLt> gemm_;
  // Decode-sized bf16/f16 products through launch_gemv (gemv.h), and the grouped expert GEMM's
  // decode tiles through the same kernel (moe.cu); FG_GEMV=0 (for measuring them) leaves them to
  // cuBLASLt and the grouped GEMM's 16 x 64 mma tiles.
  bool gemv_ = false;
  int64_t gemv_max_weight_bytes_ = kGemvMaxWeightBytes;  // FG_GEMV_MAX_MB overrides it (measurements)
  bool gemv_fp8_ = false;                                // decode-sized FP8 products through launch_gemv_fp8 (gemv.h)
  // The Hopper grouped GEMM's persistent CTAs for all but the smallest decode steps
  // (MoeGemmParams::wgmma_ctas; 0 where it cannot run, and with FG_MOE_WGMMA=0 for measuring: the
  // weight stream and mma.sync tiles then).
  int moe_wgmma_ctas_ = 0;
  // cuBLASLt's FP8 scale modes on this device (GemmLt::has_fp8_scaling): per-channel (outer
  // vectors) and 128-blocks; what keeps_fp8_codes answers.
  bool fp8_channel_ = false;
  bool fp8_blocks_ = false;
  // Sampling settings staging: pinned host rows copied into device rows before each launch.
  Buffer sample_host_;
  Buffer sample_device_;
  int sample_capacity_ = 0;
  cudaEvent_t sample_copied_ = nullptr;  // the last staging copy has left sample_host_
};

}  // namespace fg::cuda
