// The GEMMs for decode-sized products (gemv.cu, one kernel template): the product is a stream of
// the weights, read with 16-byte loads ahead of tensor-core products (bf16/f16 through a ring of
// groups in shared memory, e4m3 one group ahead in registers: gemv_kernel.cuh; the weights as the
// 16-row mma operand, the tokens as the 8-column one), and the first weights load
// before the kernel waits for the one that writes x (launch.cuh), so a decode step's projections
// do not pay a ramp per call. Warps add their partial sums in a fixed order: a token's row is the
// same bits whatever m (up to the kernel's limit) it is computed in. Host-callable.
//  - launch_gemv: out[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), x and w bf16 or f16 (one dtype), f32
//    accumulation, out in that dtype or f32; at most kGemvMaxRows rows of x and weights of at most
//    kGemvMaxWeightBytes: where it beat cuBLASLt on an H200 (docs/perf.md; larger weights stream
//    faster through cuBLASLt, and at 16 rows the qkv projection did).
//  - launch_gemv_rope: the qkv projection of a layer with RoPE and the KV write in its epilogue
//    (GemvRopeParams): a CTA's 16 weight rows are 8 rotated pairs (i, i + head_dim / 2) of one
//    head, so each pair's two sums meet in one thread, which rounds them as the GEMM's output,
//    rotates q and k heads as rope.cu does and writes k and v rows into the paged cache.
//  - launch_gemv_fp8: the FP8 GEMM of fp8_kernels.h's GemmFp8Params (e4m3 x and w, per-channel or
//    128-block scales) for at most kGemvFp8MaxRows rows, where cuBLASLt's small-m FP8 kernels
//    read the weights at a fraction of the bandwidth.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace fg::cuda {

struct GemvParams {
  const void* x = nullptr;
  int64_t ldx = 0;  // row strides in elements
  const void* w = nullptr;
  int64_t ldw = 0;
  const void* bias = nullptr;  // [n] in x's dtype, or null
  void* out = nullptr;
  int64_t ldo = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

constexpr int64_t kGemvMaxRows = 8;
constexpr int64_t kGemvMaxWeightBytes = int64_t(64) << 20;

// Whether the kernel takes the problem: 1 <= m <= kGemvMaxRows, n * k * 2 <= max_weight_bytes,
// k a multiple of 8, x and w rows on 16-byte boundaries.
bool gemv_fits(const GemvParams& p, int64_t max_weight_bytes = kGemvMaxWeightBytes);

// On the current device: the code it runs has the kernel's tensor-core path (sm_80 or newer for
// bf16/f16, sm_89 or newer for e4m3).
bool gemv_supported();
// Sets the bf16/f16 kernels' shared-memory limits on the current device (gemv_supported()); before
// any launch_gemv or launch_gemv_rope there.
void init_gemv_kernels();
bool gemv_fp8_supported();

// in: bf16 or f16; out: in or f32. Needs gemv_fits(p) and gemv_supported().
void launch_gemv(const GemvParams& p, DType in, DType out, cudaStream_t stream);

// launch_gemv's problem (out = qkv [m, (num_q_heads + 2 num_kv_heads) * head_dim], act dtype)
// and rope.cu's parameters for its q, k and v heads (rope.kv: the cache and slots; rope.q / k and
// kv.k / v are not read: the values come from the product).
struct GemvRopeParams : GemvParams {
  RopeParams rope;
};
// gemv_fits(p, max_weight_bytes), out in x's dtype, rotary_dim == head_dim, a multiple of 16, neox pairs, no q/k
// norms, n == (num_q_heads + 2 num_kv_heads) * head_dim.
bool gemv_rope_fits(const GemvRopeParams& p, int64_t max_weight_bytes = kGemvMaxWeightBytes);
void launch_gemv_rope(const GemvRopeParams& p, DType act, cudaStream_t stream);

// Whether launch_gemv_fp8 takes m rows against n weight rows of k columns: m <= kGemvFp8MaxRows
// (above 16 rows only weights of at most kGemvMaxWeightBytes: larger ones, Llama-3.1-8B's gate_up,
// stream faster through cuBLASLt there, docs/perf.md), k % 16 == 0, and with 128-block scales
// (blocks) a CTA's table of (token, group) factors within the 48 KiB of shared memory a kernel
// gets by default (k up to 177,920 at m <= 8, 80,768 at m <= 16, 32,128 at m <= 32).
constexpr int64_t kGemvFp8MaxRows = 32;
bool gemv_fp8_fits(int64_t m, int64_t n, int64_t k, bool blocks);
// x, w contiguous and 16-byte aligned, gemv_fp8_fits(m, n, k, w_scale_stride > 0); out as
// launch_gemm_fp8_fallback. Needs gemv_fp8_supported().
void launch_gemv_fp8(const GemmFp8Params& p, DType out, cudaStream_t stream);

}  // namespace fg::cuda
