// The one attention kernel of flashgen on CUDA: queries of any length per sequence (cu_seqlens_q)
// against a paged KV cache (block_table, seqlens_kv, any page size), GQA packing, split-KV with a
// log-sum-exp merge. The host plans the work partition once per step (plan), into fixed-size
// buffers carved from a workspace its owner provides, so the per-layer run() only reads them and
// CUDA graph replays stay valid. One AttentionKernel is one plan (the CUDA backend's AttentionPlan
// wraps one): two models on one GPU each hold their own.
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
  // Device bytes of the workspace for batches of up to max_total_q tokens and max_num_seqs
  // sequences on the current device (plan items, merge list, split-KV partial outputs).
  static size_t workspace_bytes(int max_total_q, int max_num_seqs);
  // Whether the kernels run heads of head_dim on the current device: they are built for 64, 128
  // and 256; 256 needs 136 KB of shared memory per block (sm_80 and sm_90 have it, sm_86/89 do
  // not). Unsupported with a message naming the limit otherwise; plan() aborts with it.
  static Status supports(int head_dim);
  // Plans into `workspace` (device memory of at least workspace_bytes(), 256-byte aligned, owned
  // by the caller and outliving this object); allocates its pinned staging once, never on the
  // step path. max_total_q / max_num_seqs bound the batches that plan() accepts.
  AttentionKernel(int max_total_q, int max_num_seqs, void* workspace);
  ~AttentionKernel();
  AttentionKernel(const AttentionKernel&) = delete;
  AttentionKernel& operator=(const AttentionKernel&) = delete;

  // Once per step, before the layers: choose tiles, splits and their order from the host copies
  // of the batch metadata and upload the plan asynchronously on `stream`.
  void plan(const AttentionBatch& batch, int num_q_heads, int num_kv_heads, int head_dim, cudaStream_t stream);

  // Whether plan() gives unsplit 128-row prefill tiles to a specialised prefill kernel (below;
  // the mma.sync one needs a page size that is a power of two >= 8; at head_dim 256 only the wgmma
  // one exists); on by default. Off sends every tile to the general kernel (benches compare the
  // two). Takes effect at the next plan().
  void use_prefill_kernel(bool on);

  // Whether the prefill kernel is the Hopper one (attention_wgmma_kernel.cuh: wgmma, any page
  // size) rather than the mma.sync one. On by default where available: a build with sm_90a code
  // on an sm_90 device; use_wgmma(true) elsewhere leaves it off. Takes effect at the next plan().
  void use_wgmma(bool on);
  bool wgmma_active() const;

  // Batch-invariant mode (BackendOptions::batch_invariant): every tile is a 16-row tile of the
  // general kernel and no KV range is split, so a query row's reduction order (its keys in the
  // 16-row tile's blocks at multiples of the block size, 64 keys or 128 with fp8 pages at head_dim
  // 128, each block over the tile's four key warps, merged in warp order; blocks a row cannot see
  // add exact zeros) is the same whatever else the step holds, how many tokens its sequence adds in
  // this step, or which graph bucket replays it. (Tile kinds differ in how keys are spread over
  // warps, and splits depend on the step's total work; prefill kernels are other kernels.) Off by
  // default; takes effect at the next plan().
  void use_batch_invariant(bool on);

  // Before a graph is recorded for batches within `bounds`: makes run() record launch widths that
  // run any plan of such a batch in one round (a CTA per (tile, kv head) of the largest one; where
  // a plan can split, a CTA per resident slot and the merge CTAs its splits can need:
  // attention_plan.h) and only the launches such batches can need (no prefill kernel unless
  // enough of them can make 128-row tiles, no merge unless one can split: too short a max_kv_len,
  // or min_num_seqs filling the resident slots), and plans a one-token batch for the recording
  // (the widths do not depend on the plan it records). end_capture() lifts the bounds. Only launch
  // widths depend on this, never results.
  void begin_capture(const GraphAttentionShape& bounds, int num_q_heads, int num_kv_heads, int head_dim,
                     cudaStream_t stream);
  void end_capture();
  // Whether the current plan's batch is within `bounds` and needs no launch a graph recorded for
  // them leaves out (checked before a graph replays).
  bool plan_within(const GraphAttentionShape& bounds) const;

  // Once per layer. Shapes as Backend::attention. act dtype bf16 or f16. Launches the prefill
  // kernel (when the plan has tiles for it), the general kernel, and the split-KV merge.
  void run(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, const AttentionParams& params,
           Tensor& out, Tensor* lse, cudaStream_t stream) const;

 private:
  std::unique_ptr<AttentionPlanState> state_;
};

}  // namespace fg::cuda
