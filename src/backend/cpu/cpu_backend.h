// The CPU reference backend: every op of backend/backend.h implemented plainly and exactly
// (f32 activations, f32 or wider accumulation), parallelised with OpenMP where that pays. It is
// the oracle every CUDA kernel is tested against and the backend CI runs models on, so exactness
// comes first; it must never take shortcuts that change results (no fast-math, no approximate
// exp/tanh, no reduced precision). Weight matrices stay as the checkpoint stores them (f32, f16,
// bf16, or GGUF's quantized blocks), so a decode step reads a quarter to an eighth of the bytes
// an f32 copy would; gemm and embedding compute with their exact f32 values (cpu_gemm.cc).
//
// Reach it through make_cpu_backend(); the class is public (and not final) only so tests can name
// it, or derive a variant (one that keeps FP8 codes, to run the FP8 ops as a model's GEMMs).
// Ops are synchronous (the "stream" is the calling thread, helped by the backend's WorkerPool of
// default_cpu_threads() threads); synchronize() is a no-op.
// Not thread-safe, like every Backend: one engine thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_pool.h"

namespace fg {

// Per-thread scratch of sample(): probabilities and the candidate order of one logits row.
struct CpuSampleScratch {
  std::vector<float> probs;    // [vocab] softmax of logits / temperature
  std::vector<int32_t> order;  // candidate ids, sorted lazily into the sampling rule's order
  // The candidates' count and mass by the exponent of p (p >= 0: its bits >> 23), so the sort can
  // start on the few exponents that hold a prefix of the order (cpu_sample.cc's narrow()).
  std::array<int64_t, 256> exp_count{};
  std::array<double, 256> exp_mass{};
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options = {});

  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  const BackendOptions& options() const override { return options_; }
  DType act_dtype() const override { return DType::kF32; }
  // Every stored dtype the weight kernels read as it is (f32, f16, bf16, block-quantized).
  DType weight_dtype(DType stored) const override;

  Buffer alloc(size_t bytes) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                 size_t rows) override;
  void synchronize() override {}
  Buffer alloc_host(size_t bytes) override;

  void convert(const Tensor& src, Tensor& dst) override;
  void fill_uniform(Tensor& t, float lo, float hi, uint64_t seed) override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out) override;
  void rope(Tensor& q, Tensor& k, const RopeArgs& args) override;
  void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  bool supports_fp8_gemm() const override { return true; }
  void quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales) override;
  void gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales, Tensor& out) override;
  void silu_mul(const Tensor& x, Tensor& out) override;
  void gelu_tanh_mul(const Tensor& x, Tensor& out) override;
  void scale(Tensor& x, float s) override;
  void softcap(Tensor& x, float cap) override;
  void moe_route(const Tensor& router_logits, bool renormalize, MoeRouting& routing) override;
  void moe_gemm(const Tensor& x, const Tensor& w, const MoeRouting& routing, bool gather, Tensor& out) override;
  void moe_combine(const Tensor& y, const MoeRouting& routing, Tensor& out) override;
  void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) override;
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

 private:
  BackendOptions options_;
  cpu::WorkerPool pool_;                          // every parallel loop of the backend
  std::vector<CpuSampleScratch> sample_scratch_;  // one per worker of pool_ (sample)
  std::vector<float> gemm_scratch_;               // [threads, tile, k] f32: weight tiles decoded for sgemm
};

// The sampling rule of backend/sampling_rule.h applied to one row of logits (exposed for tests
// and host-side callers). logits: [vocab] f32, contiguous. Returns the chosen token id; dist, when
// given ([vocab]), gets cpu_sampling_distribution's values from the same pass.
int32_t cpu_sample_row(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                       float* dist = nullptr);
// The distribution cpu_sample_row draws from: dist [vocab] gets p / (kept mass) for the tokens the
// rule keeps and 0 elsewhere (a point mass on the argmax for greedy rows): CpuBackend::sample's
// distributions, which speculative decoding's rejection sampling verifies drafts against.
void cpu_sampling_distribution(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                               float* dist);

}  // namespace fg
