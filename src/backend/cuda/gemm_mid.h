// The bf16 GEMMs of a few dozen to a few hundred token rows on Hopper (gemm_mid.cu): a speculative
// verification step (batch x (1 + k) rows), a mid-size decode batch, a short prefill chunk. Those
// products sit between the weight stream of gemv.h (a handful of rows) and compute-bound prefill:
// every weight must still be read once at the memory's rate while the tensor cores do up to as
// much work as the bytes take time (the H200's ridge point is ~180 rows), and cuBLASLt's tiles
// leave SMs idle there (its o projection of Llama-3.1-8B at 160 rows ran on 64 CTAs of 132:
// docs/perf.md). Host-callable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/gemv.h"
#include "core/dtype.h"

namespace fg::cuda {

constexpr int64_t kGemmMidMaxRows = 256;

// One per backend: the split-K partial sums' workspace and the tiles' arrival counters, allocated
// once (graphs replay its launches; the counters return to zero at the end of every launch).
class GemmMid {
 public:
  // Null where the kernel cannot run: the build has no sm_90a code or the device is not sm_90.
  static std::unique_ptr<GemmMid> create();
  ~GemmMid();
  GemmMid(const GemmMid&) = delete;
  GemmMid& operator=(const GemmMid&) = delete;

  // Whether the kernel takes the problem: bf16 x and w, out bf16 or f32, 1 <= m <= kGemmMidMaxRows,
  // k a multiple of 8 up to 2^22, x and w rows on 16-byte boundaries, n up to 2^20.
  bool fits(const GemvParams& p, DType in, DType out) const;
  // out[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]); needs fits(p, bf16, out).
  void run(const GemvParams& p, DType out, cudaStream_t stream);
  // The gated MLP's gate/up projection and activation in one kernel: w (p.n rows) is [gate | up],
  // p.out [m, n / 2] bf16 (row stride p.ldo) = act(gate) * up with gate and up rounded to bf16 as a
  // stored gate_up would be, act SiLU or (gelu) GELU(tanh), silu_mul's / gelu_tanh_mul's
  // arithmetic. fits_gated: fits(p, in, bf16) with n even.
  bool fits_gated(const GemvParams& p, DType in) const;
  void run_gated(const GemvParams& p, bool gelu, cudaStream_t stream);

 private:
  GemmMid(int sms, float* workspace, int* counters);
  int sms_;
  float* workspace_;  // [sms][2][128 x kGemmMidMaxRows] f32 partial tiles
  int* counters_;     // [kMaxTiles] arrivals per 128-row weight tile
};

}  // namespace fg::cuda
