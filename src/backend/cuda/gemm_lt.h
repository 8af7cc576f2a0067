// GEMMs through cuBLASLt: out[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), bf16/f16 inputs, f32
// accumulation, bf16/f16/f32 output; and the FP8 GEMM (run_fp8): e4m3 x and w with a scale per row
// of x and per row of w, applied by cuBLASLt's outer-vector scale mode
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUDA 12.9+ on sm_90) or 128-block scales, bf16/f16 output. The algorithm
// is chosen once per problem (shapes, strides, dtypes, pointer alignment, bias) with cublasLtMatmulAlgoGetHeuristic and
// cached with its descriptors; the workspace is allocated once. Host-only code.
//
// Batch-invariant mode (Mode::kBatchInvariant): a row's result must not depend on m. cuBLASLt's
// heuristic picks other kernels (tiles, split-K) for other m, and a split-K or stream-K kernel
// adds a row's partial sums in an order that depends on the grid. So the algorithm is chosen once
// per weight shape (n, k, dtypes, bias) from the heuristic at a reference row count (kInvariantRefM below), restricted
// to kernels without a K reduction across CTAs (reduction scheme none, split-K 1, chosen with no workspace), and used
// for every m, checked with cublasLtMatmulAlgoCheck at each new m (the configuration is fixed; only the workspace it
// asks for may vary); operands must be 16-byte aligned (the alignment it was chosen for). A shape for which that fails
// aborts: there is no second algorithm that would keep the rows already computed valid.
//
// FP8 products (run_fp8) take the heuristic's first answer in Mode::kHeuristic; in batch-invariant
// mode they get one single-pass algorithm per weight shape as above, or are declined at every m of
// the shape.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
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
// e4m3 with contiguous rows (row stride k), out contiguous. With `blocks`, the scales are
// Backend::gemm_fp8's 128-block ones instead (x: one per row and 128 columns, cuBLASLt's
// VEC128_32F; w: one per 128 x 128 block, BLK128x128_32F; CUDA 12.9+ on sm_90).
struct Fp8GemmProblem {
  int m = 0;
  int n = 0;
  int k = 0;
  DType out = DType::kBF16;
  bool blocks = false;
};

enum class GemmOutcome {
  kDone,             // out = x @ w^T (+ bias)
  kDoneWithoutBias,  // out = x @ w^T; the bias could not go through the epilogue: add it
  kDeclined,         // nothing enqueued: cuBLASLt offers no algorithm for this problem
};

class GemmLt {
 public:
  enum class Mode {
    kHeuristic,       // cuBLASLt's first heuristic answer for each problem
    kBatchInvariant,  // one algorithm per weight shape for every m (above)
  };
  // Rows of the problem the batch-invariant algorithm of a shape is chosen for, by default: the
  // decode batch of the throughput regime (a full batch of 256 sequences), where most steps of a
  // busy server are; prefill chunks then run on that tile (full-size at 256 rows), and small
  // decode batches on a tile wider than they would get. FG_BATCH_INVARIANT_GEMM_M (1..65536)
  // overrides it, for measuring the trade-off (docs/perf.md); every m still gets the one algorithm.
  static constexpr int kInvariantRefM = 256;

  explicit GemmLt(Mode mode = Mode::kHeuristic, size_t workspace_bytes = size_t(32) << 20);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues the product on `stream`. x, w, bias: device pointers as GemmProblem describes.
  GemmOutcome run(const GemmProblem& prob, const void* x, const void* w, const void* bias, void* out,
                  cudaStream_t stream);
  // The FP8 product; kDeclined when this cuBLASLt has no algorithm (or not the scale mode) for
  // it. x_scales, w_scales: device pointers to f32 scales as Fp8GemmProblem says.
  GemmOutcome run_fp8(const Fp8GemmProblem& prob, const void* x, const float* x_scales, const void* w,
                      const float* w_scales, void* out, cudaStream_t stream);
  // Whether this cuBLASLt offers an FP8 algorithm with per-channel (blocks false) or 128-block
  // scales on the current device, asked for a 256 x 256 x 256 product (sm_90 with CUDA 12.9+ has
  // both; other devices may have neither, where the FP8 GEMM of many rows is the plain kernel).
  bool has_fp8_scaling(bool blocks);

 private:
  struct Plan {
    bool ok = false;
    bool bias_in_epilogue = false;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, int, bool, int, int, int, int>;
  // A weight shape of batch-invariant mode: n, k, ldw, in, out, bias.
  using ShapeKey = std::tuple<int, int, int64_t, int, int, bool>;
  // Fills plan's op (with the bias epilogue when asked) and its three layouts for `prob`; false,
  // with nothing left to destroy, when cuBLASLt refuses the epilogue.
  static bool make_descriptors(const GemmProblem& prob, bool epilogue, Plan& plan);
  Plan make_plan(const GemmProblem& prob, int align_x, int align_w, int align_o, int align_bias, bool try_epilogue);
  Plan make_invariant_plan(const GemmProblem& prob);
  // make_invariant_plan for the FP8 product (ok = false, at every m, for a shape declined).
  Plan make_invariant_fp8_plan(const Fp8GemmProblem& prob, const float* x_scales, const float* w_scales);
  // Fills plan's op (the problem's scale modes, scales at these pointers) and layouts for `prob`;
  // false, with nothing left to destroy, when this cuBLASLt has not those scale modes.
  static bool make_fp8_descriptors(const Fp8GemmProblem& prob, const float* x_scales, const float* w_scales,
                                   Plan& plan);
  // The scale pointers are set before the algorithm is chosen (run_fp8 sets them again per call).
  Plan make_fp8_plan(const Fp8GemmProblem& prob, int align_x, int align_w, int align_o, const float* x_scales,
                     const float* w_scales);
  // The heuristic's first algorithm for a plan whose descriptors are set (plan.ok when found).
  void choose_algo(Plan& plan, int align_x, int align_w, int align_o);
  // The heuristic's first answer for probe's descriptors with no workspace and no cross-CTA
  // reduction, for 16-byte aligned operands (batch-invariant mode); false when there is none.
  bool first_single_pass(const Plan& probe, cublasLtMatmulAlgo_t& algo);
  // Whether plan.algo runs for plan's descriptors within the workspace.
  bool algo_runs(const Plan& plan);
  static void destroy(Plan& plan);

  Mode mode_ = Mode::kHeuristic;
  int invariant_ref_m_ = kInvariantRefM;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  // Batch-invariant mode: each weight shape's algorithm and whether its bias is in the epilogue.
  struct ShapeAlgo {
    cublasLtMatmulAlgo_t algo{};
    bool bias_in_epilogue = false;
  };
  std::map<ShapeKey, ShapeAlgo> shape_algos_;
  using Fp8Key = std::tuple<int, int, int, int, bool, int, int, int>;  // m, n, k, out dtype, blocks, alignments
  std::map<Fp8Key, Plan> fp8_plans_;
  // Batch-invariant mode: each FP8 weight shape's algorithm (n, k, out dtype, blocks), none when
  // declined.
  using Fp8ShapeKey = std::tuple<int, int, int, bool>;
  std::map<Fp8ShapeKey, std::optional<cublasLtMatmulAlgo_t>> fp8_shape_algos_;
};

}  // namespace fg::cuda
