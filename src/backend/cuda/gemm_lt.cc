// GemmLt (gemm_lt.h). Row-major out = x @ w^T is column-major D(n x m) = op(A) * B with
// A = w stored (k x n, ld = ldw) transposed, B = x stored (k x m, ld = ldx), D ld = ldo; a bias of
// length n is then a per-row vector of D, which is what the BIAS epilogue adds.
#include "backend/cuda/gemm_lt.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/status.h"

namespace fg::cuda {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: FG_CHECK(false, "gemm: unsupported dtype " + std::string(dtype_name(t)));
  }
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address.
int alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % uintptr_t(align) != 0) align >>= 1;
  return align;
}

}  // namespace

GemmLt::GemmLt(Mode mode, size_t workspace_bytes) : mode_(mode), workspace_bytes_(workspace_bytes) {
  if (const char* env = std::getenv("FG_BATCH_INVARIANT_GEMM_M"); env != nullptr && mode_ == Mode::kBatchInvariant) {
    char* end = nullptr;
    const long m = std::strtol(env, &end, 10);
    FG_CHECK(end != env && *end == '\0' && m >= 1 && m <= 65536,
             std::string("FG_BATCH_INVARIANT_GEMM_M must be a row count in [1, 65536], got '") + env + "'");
    invariant_ref_m_ = int(m);
  }
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  if (workspace_bytes_ > 0) CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmLt::~GemmLt() {
  for (auto& [key, plan] : plans_) destroy(plan);
  for (auto& [key, plan] : fp8_plans_) destroy(plan);
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
}

void GemmLt::destroy(Plan& plan) {
  if (plan.a) (void)cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) (void)cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) (void)cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.op) (void)cublasLtMatmulDescDestroy(plan.op);
  plan = Plan{};
}

bool GemmLt::make_descriptors(const GemmProblem& prob, bool epilogue, Plan& plan) {
  cudaDataType_t in = cuda_type(prob.in);
  cudaDataType_t out = cuda_type(prob.out);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t trans_a = CUBLAS_OP_T;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (epilogue) {
    cublasLtEpilogue_t bias_epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = in;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias_epilogue, sizeof(bias_epilogue)));
    if (cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)) !=
        CUBLAS_STATUS_SUCCESS) {
      destroy(plan);
      return false;
    }
    plan.bias_in_epilogue = true;
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in, uint64_t(prob.k), uint64_t(prob.n), prob.ldw));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in, uint64_t(prob.k), uint64_t(prob.m), prob.ldx));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out, uint64_t(prob.n), uint64_t(prob.m), prob.ldo));
  return true;
}

namespace {

// A preference for the heuristic: at most `workspace` bytes, operands aligned as given, and only
// algorithms whose reduction schemes are in `reductions`.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference(uint64_t workspace, uint32_t align_w, uint32_t align_x, uint32_t align_o, uint32_t reductions) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_x);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_o);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_o);
    set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  }
  ~Preference() { (void)cublasLtMatmulPreferenceDestroy(pref); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class V>
  void set(cublasLtMatmulPreferenceAttributes_t attr, V value) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  }
};

// Whether an algorithm reduces each output element within one CTA, in k order (no split-K).
bool single_pass(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                           &written) != CUBLAS_STATUS_SUCCESS)
    return false;
  return splits <= 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE;
}

constexpr int kInvariantAlign = 16;  // bytes; batch-invariant operands are at least this aligned

}  // namespace

GemmLt::Plan GemmLt::make_plan(const GemmProblem& prob, int align_x, int align_w, int align_o, int align_bias,
                               bool try_epilogue) {
  (void)align_bias;  // part of the cache key: the epilogue reads the bias vector
  Plan plan;
  if (make_descriptors(prob, try_epilogue, plan)) choose_algo(plan, align_x, align_w, align_o);
  return plan;
}

bool GemmLt::make_fp8_descriptors(const Fp8GemmProblem& prob, const float* x_scales, const float* w_scales,
                                  Plan& plan) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t trans_a = CUBLAS_OP_T;  // FP8 tensor cores take only the "TN" layout
  cublasOperation_t trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  // D (n x m, column-major) = op(A) (n x k) * B (k x m): A's scale vector has one entry per row of
  // D (the n output channels), B's one per column (the m tokens). With 128-blocks, A (k x n,
  // k innermost) has one scale per 128 x 128 block, for each block column of n the ceil(k / 128)
  // k-blocks' scales at a stride padded to 4; B (k x m) one per 128 k-values of a token, for each
  // k-block the m tokens' scales in a row.
  const int32_t a_mode =
      prob.blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const int32_t b_mode =
      prob.blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)) !=
          CUBLAS_STATUS_SUCCESS) {
    destroy(plan);
    return false;
  }
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, uint64_t(prob.k), uint64_t(prob.n), prob.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, uint64_t(prob.k), uint64_t(prob.m), prob.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, cuda_type(prob.out), uint64_t(prob.n), uint64_t(prob.m), prob.n));
  return true;
}

GemmLt::Plan GemmLt::make_fp8_plan(const Fp8GemmProblem& prob, int align_x, int align_w, int align_o,
                                   const float* x_scales, const float* w_scales) {
  Plan plan;
  if (make_fp8_descriptors(prob, x_scales, w_scales, plan)) choose_algo(plan, align_x, align_w, align_o);
  return plan;
}

void GemmLt::choose_algo(Plan& plan, int align_x, int align_w, int align_o) {
  Preference pref(workspace_bytes_, uint32_t(align_w), uint32_t(align_x), uint32_t(align_o),
                  CUBLASLT_REDUCTION_SCHEME_MASK);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref.pref, 1, &result, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    destroy(plan);
    return;
  }
  plan.algo = result.algo;
  plan.ok = true;
}

bool GemmLt::first_single_pass(const Plan& probe, cublasLtMatmulAlgo_t& algo) {
  Preference pref(0, kInvariantAlign, kInvariantAlign, kInvariantAlign, CUBLASLT_REDUCTION_SCHEME_NONE);
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle_, probe.op, probe.a, probe.b, probe.c, probe.c, pref.pref, kCandidates,
                                     results, &found) != CUBLAS_STATUS_SUCCESS)
    return false;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize != 0 || !single_pass(results[i].algo))
      continue;
    algo = results[i].algo;
    return true;
  }
  return false;
}

bool GemmLt::algo_runs(const Plan& plan) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, &plan.algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes_;
}

GemmLt::Plan GemmLt::make_invariant_plan(const GemmProblem& prob) {
  const ShapeKey shape{prob.n, prob.k, prob.ldw, int(prob.in), int(prob.out), prob.bias};
  auto it = shape_algos_.find(shape);
  if (it == shape_algos_.end()) {
    // The shape's algorithm, chosen at invariant_ref_m_ contiguous rows: the first heuristic answer
    // without a cross-CTA reduction, with the bias in the epilogue when some such algorithm takes it.
    GemmProblem ref = prob;
    ref.m = invariant_ref_m_;
    ref.ldx = prob.k;
    ref.ldo = prob.n;
    ShapeAlgo chosen;
    bool ok = false;
    for (int epilogue = prob.bias ? 1 : 0; epilogue >= 0 && !ok; --epilogue) {
      Plan probe;
      if (!make_descriptors(ref, epilogue == 1, probe)) continue;
      ok = first_single_pass(probe, chosen.algo);
      chosen.bias_in_epilogue = probe.bias_in_epilogue;
      destroy(probe);
    }
    FG_CHECK(ok, "batch-invariant gemm: cuBLASLt offers no single-pass algorithm for n=" + std::to_string(prob.n) +
                     " k=" + std::to_string(prob.k) + " (" + std::string(dtype_name(prob.in)) + " -> " +
                     std::string(dtype_name(prob.out)) + (prob.bias ? ", bias" : "") + ")");
    it = shape_algos_.emplace(shape, chosen).first;
  }
  Plan plan;
  FG_CHECK(make_descriptors(prob, it->second.bias_in_epilogue, plan),
           "batch-invariant gemm: cuBLASLt refuses at m=" + std::to_string(prob.m) +
               " the bias epilogue it took for the shape");
  plan.algo = it->second.algo;
  // (The algorithm's configuration, split-K 1 included, is fixed; only the workspace it asks for
  // may vary with m.)
  FG_CHECK(algo_runs(plan), "batch-invariant gemm: the algorithm chosen for n=" + std::to_string(prob.n) +
                                " k=" + std::to_string(prob.k) + " does not run at m=" + std::to_string(prob.m) +
                                " (ldx " + std::to_string(prob.ldx) + ", ldo " + std::to_string(prob.ldo) + ")");
  plan.ok = true;
  return plan;
}

GemmLt::Plan GemmLt::make_invariant_fp8_plan(const Fp8GemmProblem& prob, const float* x_scales, const float* w_scales) {
  const Fp8ShapeKey shape{prob.n, prob.k, int(prob.out), prob.blocks};
  auto it = fp8_shape_algos_.find(shape);
  if (it == fp8_shape_algos_.end()) {
    // As make_invariant_plan: chosen once at invariant_ref_m_ rows, single-pass, no workspace. A
    // shape with no such algorithm (or a cuBLASLt without the scale mode) is declined at
    // every m, so the backend's fallback kernel (one thread per output, k in order) runs it for all.
    Fp8GemmProblem ref = prob;
    ref.m = invariant_ref_m_;
    std::optional<cublasLtMatmulAlgo_t> chosen;
    Plan probe;
    cublasLtMatmulAlgo_t algo{};
    if (make_fp8_descriptors(ref, x_scales, w_scales, probe) && first_single_pass(probe, algo)) chosen = algo;
    destroy(probe);
    it = fp8_shape_algos_.emplace(shape, chosen).first;
  }
  Plan plan;
  if (!it->second) return plan;
  FG_CHECK(make_fp8_descriptors(prob, x_scales, w_scales, plan),
           "batch-invariant fp8 gemm: cuBLASLt refuses at m=" + std::to_string(prob.m) +
               " the scale modes it took for the shape");
  plan.algo = *it->second;
  FG_CHECK(algo_runs(plan), "batch-invariant fp8 gemm: the algorithm chosen for n=" + std::to_string(prob.n) +
                                " k=" + std::to_string(prob.k) + " does not run at m=" + std::to_string(prob.m));
  plan.ok = true;
  return plan;
}

GemmOutcome GemmLt::run(const GemmProblem& prob, const void* x, const void* w, const void* bias, void* out,
                        cudaStream_t stream) {
  if (prob.m == 0 || prob.n == 0) return GemmOutcome::kDone;
  int ax = alignment_of(x), aw = alignment_of(w), ao = alignment_of(out);
  int ab = prob.bias ? alignment_of(bias) : 256;
  Key key{prob.m, prob.n, prob.k, prob.ldx, prob.ldw, prob.ldo, int(prob.in), int(prob.out), prob.bias, ax, aw, ao, ab};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    Plan plan;
    if (mode_ == Mode::kBatchInvariant) {
      FG_CHECK(ax >= kInvariantAlign && aw >= kInvariantAlign && ao >= kInvariantAlign &&
                   (!prob.bias || ab >= kInvariantAlign),
               "batch-invariant gemm: operands must be 16-byte aligned (x " + std::to_string(ax) + ", w " +
                   std::to_string(aw) + ", out " + std::to_string(ao) + ")");
      plan = make_invariant_plan(prob);
    } else {
      if (prob.bias) plan = make_plan(prob, ax, aw, ao, ab, /*try_epilogue=*/true);
      if (!plan.ok) plan = make_plan(prob, ax, aw, ao, ab, /*try_epilogue=*/false);
    }
    it = plans_.emplace(key, plan).first;
  }
  Plan& plan = it->second;
  if (!plan.ok) return GemmOutcome::kDeclined;
  if (plan.bias_in_epilogue) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, w, plan.a, x, plan.b, &beta, out, plan.c, out, plan.c,
                              &plan.algo, workspace_, workspace_bytes_, stream));
  return (prob.bias && !plan.bias_in_epilogue) ? GemmOutcome::kDoneWithoutBias : GemmOutcome::kDone;
}

bool GemmLt::has_fp8_scaling(bool blocks) {
  Fp8GemmProblem prob;
  prob.m = prob.n = prob.k = 256;
  prob.blocks = blocks;
  // The heuristic reads no scale: any aligned device pointer stands for them.
  const auto* scales = workspace_ != nullptr ? static_cast<const float*>(workspace_) : nullptr;
  Plan plan = make_fp8_plan(prob, 256, 256, 256, scales, scales);
  const bool ok = plan.ok;
  destroy(plan);
  return ok;
}

GemmOutcome GemmLt::run_fp8(const Fp8GemmProblem& prob, const void* x, const float* x_scales, const void* w,
                            const float* w_scales, void* out, cudaStream_t stream) {
  if (prob.m == 0 || prob.n == 0) return GemmOutcome::kDone;
  const int ax = alignment_of(x), aw = alignment_of(w), ao = alignment_of(out);
  Fp8Key key{prob.m, prob.n, prob.k, int(prob.out), prob.blocks, ax, aw, ao};
  auto it = fp8_plans_.find(key);
  if (it == fp8_plans_.end()) {
    Plan plan;
    if (mode_ == Mode::kBatchInvariant) {
      FG_CHECK(ax >= kInvariantAlign && aw >= kInvariantAlign && ao >= kInvariantAlign,
               "batch-invariant fp8 gemm: operands must be 16-byte aligned (x " + std::to_string(ax) + ", w " +
                   std::to_string(aw) + ", out " + std::to_string(ao) + ")");
      plan = make_invariant_fp8_plan(prob, x_scales, w_scales);
    } else {
      plan = make_fp8_plan(prob, ax, aw, ao, x_scales, w_scales);
    }
    it = fp8_plans_.emplace(key, plan).first;
  }
  Plan& plan = it->second;
  if (!plan.ok) return GemmOutcome::kDeclined;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, w, plan.a, x, plan.b, &beta, out, plan.c, out, plan.c,
                              &plan.algo, workspace_, workspace_bytes_, stream));
  return GemmOutcome::kDone;
}

}  // namespace fg::cuda
