// The one attention kernel of flashgen on CUDA: queries of any length per sequence (cu_seqlens_q)
// against a paged KV cache (block_table, seqlens_kv, any page size), GQA packing, split-KV with a
// log-sum-exp merge. The host plans the work partition once per step (plan), into fixed-size
// buffers it owns, so the per-layer run() only reads them and CUDA graph replays stay valid.
// Contract: backend/backend.h (Backend::attention) and DESIGN.md.
// Included by the CUDA backend only; never by the engine or the model.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"

namespace fg::cuda {

struct AttentionPlanState;  // defined in attention.cu

class AttentionKernel {
 public:
  // Allocates the plan/workspace buffers once (cudaMalloc / pinned host memory) — never on the
  // step path. max_total_q / max_num_seqs bound the batches that plan() accepts.
  AttentionKernel(int max_total_q, int max_num_seqs);
  ~AttentionKernel();
  AttentionKernel(const AttentionKernel&) = delete;
  AttentionKernel& operator=(const AttentionKernel&) = delete;

  // Once per step, before the layers: choose tiles, splits and their order from the host copies
  // of the batch metadata and upload the plan asynchronously on `stream`.
  void plan(const AttentionBatch& batch, int num_q_heads, int num_kv_heads, int head_dim, cudaStream_t stream);

  // Whether plan() gives unsplit 128-row prefill tiles to a specialised prefill kernel (below;
  // the mma.sync one needs a page size that is a power of two >= 8); on by default. Off sends every
  // tile to the general kernel (benches compare the two). Takes effect at the next plan().
  void use_prefill_kernel(bool on);

  // Whether the prefill kernel is the Hopper one (attention_wgmma_kernel.cuh: wgmma, any page
  // size) rather than the mma.sync one. On by default where available: a build with sm_90a code
  // on an sm_90 device; use_wgmma(true) elsewhere leaves it off. Takes effect at the next plan().
  void use_wgmma(bool on);
  bool wgmma_active() const;

  // While a graph is recorded for batches of at most max_q_len new tokens and max_kv_len keys per
  // sequence (GraphAttentionShape), run() records only the launches such batches can need: no
  // prefill kernel when max_q_len x group packs at most 64 rows (no 128-row tile can occur), no
  // merge when max_kv_len is too short to be split. (0, 0): no bounds, every launch is recorded.
  void set_graph_bounds(int max_q_len, int max_kv_len);
  // Whether the current plan's batch is within such bounds (checked before a graph replays).
  bool plan_within(int max_q_len, int max_kv_len) const;

  // Once per layer. Shapes as Backend::attention. act dtype bf16 or f16. Launches the prefill
  // kernel (when the plan has tiles for it), the general kernel, and the split-KV merge.
  void run(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, const AttentionParams& params,
           Tensor& out, Tensor* lse, cudaStream_t stream);

 private:
  std::unique_ptr<AttentionPlanState> state_;
};

}  // namespace fg::cuda
