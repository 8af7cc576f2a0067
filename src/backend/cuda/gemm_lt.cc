// GemmLt (gemm_lt.h). Row-major out = x @ w^T is column-major D(n x m) = op(A) * B with
// A = w stored (k x n, ld = ldw) transposed, B = x stored (k x m, ld = ldx), D ld = ldo; a bias of
// length n is then a per-row vector of D, which is what the BIAS epilogue adds.
#include "backend/cuda/gemm_lt.h"

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

GemmLt::GemmLt(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
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

GemmLt::Plan GemmLt::make_plan(const GemmProblem& prob, int align_x, int align_w, int align_o, int align_bias,
                               bool try_epilogue) {
  Plan plan;
  cudaDataType_t in = cuda_type(prob.in);
  cudaDataType_t out = cuda_type(prob.out);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t trans_a = CUBLAS_OP_T;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (try_epilogue) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = in;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)) !=
        CUBLAS_STATUS_SUCCESS) {
      destroy(plan);
      return plan;
    }
    plan.bias_in_epilogue = true;
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in, uint64_t(prob.k), uint64_t(prob.n), prob.ldw));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in, uint64_t(prob.k), uint64_t(prob.m), prob.ldx));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out, uint64_t(prob.n), uint64_t(prob.m), prob.ldo));
  (void)align_bias;  // part of the cache key: the epilogue reads the bias vector
  choose_algo(plan, align_x, align_w, align_o);
  return plan;
}

GemmLt::Plan GemmLt::make_fp8_plan(const Fp8GemmProblem& prob, int align_x, int align_w, int align_o,
                                   const float* x_scales, const float* w_scales) {
  Plan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t trans_a = CUBLAS_OP_T;  // FP8 tensor cores take only the "TN" layout
  cublasOperation_t trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  // D (n x m, column-major) = op(A) (n x k) * B (k x m): A's scale vector has one entry per row of
  // D (the n output channels), B's one per column (the m tokens).
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)) !=
          CUBLAS_STATUS_SUCCESS) {
    destroy(plan);
    return plan;
  }
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, uint64_t(prob.k), uint64_t(prob.n), prob.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, uint64_t(prob.k), uint64_t(prob.m), prob.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, cuda_type(prob.out), uint64_t(prob.n), uint64_t(prob.m), prob.n));
  choose_algo(plan, align_x, align_w, align_o);
  return plan;
}

void GemmLt::choose_algo(Plan& plan, int align_x, int align_w, int align_o) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes_;
  uint32_t ax = uint32_t(align_x), aw = uint32_t(align_w), ao = uint32_t(align_o);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof(aw)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof(ax)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ao, sizeof(ao)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ao, sizeof(ao)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    destroy(plan);
    return;
  }
  plan.algo = result.algo;
  plan.ok = true;
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
    if (prob.bias) plan = make_plan(prob, ax, aw, ao, ab, /*try_epilogue=*/true);
    if (!plan.ok) plan = make_plan(prob, ax, aw, ao, ab, /*try_epilogue=*/false);
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

GemmOutcome GemmLt::run_fp8(const Fp8GemmProblem& prob, const void* x, const float* x_scales, const void* w,
                            const float* w_scales, void* out, cudaStream_t stream) {
  if (prob.m == 0 || prob.n == 0) return GemmOutcome::kDone;
  const int ax = alignment_of(x), aw = alignment_of(w), ao = alignment_of(out);
  Fp8Key key{prob.m, prob.n, prob.k, int(prob.out), ax, aw, ao};
  auto it = fp8_plans_.find(key);
  if (it == fp8_plans_.end()) it = fp8_plans_.emplace(key, make_fp8_plan(prob, ax, aw, ao, x_scales, w_scales)).first;
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
