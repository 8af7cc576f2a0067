// GEMMs through cuBLASLt: out[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), bf16/f16 inputs, f32
// accumulation, bf16/f16/f32 output; and the FP8 GEMM (run_fp8): e4m3 x and w with a scale per row
// of x and per row of w, applied by cuBLASLt's outer-vector scale mode
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUDA 12.9+ on sm_90), bf16/f16 output. The algorithm is chosen once per
// problem (shapes, strides, dtypes, pointer alignment, bias) with cublasLtMatmulAlgoGetHeuristic and cached with its
// descriptors; the workspace is allocated once. Host-only code.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace fg::cuda {

struct GemmProblem {
  int m = 0;
  int n = 0;
  int k = 0;
  int64_t ldx = 0;          // row stride of x [m, k], elements
  int64_t ldw = 0;          // row stride of w [n, k]
  int64_t ldo = 0;          // row stride of out [m, n]
  DType in = DType::kBF16;  // x and w (and bias)
  DType out = DType::kBF16;
  bool bias = false;
};

// out[m, n] = (x[m, k] @ w[n, k]^T) * x_scales[m] (per row) * w_scales[n] (per column); x, w
// e4m3 with contiguous rows (row stride k), out contiguous.
struct Fp8GemmProblem {
  int m = 0;
  int n = 0;
  int k = 0;
  DType out = DType::kBF16;
};

enum class GemmOutcome {
  kDone,             // out = x @ w^T (+ bias)
  kDoneWithoutBias,  // out = x @ w^T; the bias could not go through the epilogue: add it
  kDeclined,         // nothing enqueued: cuBLASLt offers no algorithm for this problem
};

class GemmLt {
 public:
  explicit GemmLt(size_t workspace_bytes = size_t(32) << 20);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues the product on `stream`. x, w, bias: device pointers as GemmProblem describes.
  GemmOutcome run(const GemmProblem& prob, const void* x, const void* w, const void* bias, void* out,
                  cudaStream_t stream);
  // The FP8 product; kDeclined when this cuBLASLt has no algorithm (or no outer-vector scaling)
  // for it. x_scales: [m] f32, w_scales: [n] f32, device pointers.
  GemmOutcome run_fp8(const Fp8GemmProblem& prob, const void* x, const float* x_scales, const void* w,
                      const float* w_scales, void* out, cudaStream_t stream);

 private:
  struct Plan {
    bool ok = false;
    bool bias_in_epilogue = false;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, int, bool, int, int, int, int>;
  Plan make_plan(const GemmProblem& prob, int align_x, int align_w, int align_o, int align_bias, bool try_epilogue);
  // The scale pointers are set before the algorithm is chosen (run_fp8 sets them again per call).
  Plan make_fp8_plan(const Fp8GemmProblem& prob, int align_x, int align_w, int align_o, const float* x_scales,
                     const float* w_scales);
  // The heuristic's first algorithm for a plan whose descriptors are set (plan.ok when found).
  void choose_algo(Plan& plan, int align_x, int align_w, int align_o);
  static void destroy(Plan& plan);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  using Fp8Key = std::tuple<int, int, int, int, int, int, int>;  // m, n, k, out dtype, alignments
  std::map<Fp8Key, Plan> fp8_plans_;
};

}  // namespace fg::cuda
