// CPU backend: the mixture-of-experts ops (backend.h). The reference of the routing and the
// grouped GEMM the CUDA kernels are tested against, following transformers' f32 arithmetic:
//   route:   p = softmax(logits) in f32 (max-subtracted), the top_k by probability (ties: the
//            lower expert id), w_j = p_j / sum of the chosen p when renormalizing;
//            assignments sorted by expert, stable (ascending assignment within an expert);
//   gemm:    for each expert, its rows gathered into one contiguous block and one sgemm with
//            that expert's weights (what transformers' per-expert loop computes); in
//            batch-invariant mode the block goes through gemm() instead, whose GEMV then sums
//            each row alone, whatever rows its expert got;
//   combine: out[t] = 0 + w * y for each chosen expert in ascending expert id, each product
//            rounded to f32 before the add (transformers' index_add_ order).
// Never approximates: these results are what CUDA's grouped GEMM must reproduce.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

using cpu::check_dim;
using cpu::check_view;
using cpu::kParallelMinWork;
using cpu::row;

namespace {

constexpr int kMaxTopK = 16;  // backend.h's precondition of moe_route

// Checks the routing tensors against its sizes (every op reads them).
void check_routing(const char* op, const MoeRouting& r) {
  FG_CHECK(r.num_tokens >= 0 && r.num_experts > 0 && r.top_k > 0 && r.top_k <= r.num_experts && r.top_k <= kMaxTopK,
           std::string(op) + ": routing of " + std::to_string(r.num_tokens) + " tokens, " +
               std::to_string(r.num_experts) + " experts, top " + std::to_string(r.top_k) + " is invalid");
  const int64_t a = int64_t(r.num_tokens) * r.top_k;
  check_view(op, "topk_ids", r.topk_ids, DType::kI32, 2);
  check_dim(op, "topk_ids", r.topk_ids, 0, r.num_tokens);
  check_dim(op, "topk_ids", r.topk_ids, 1, r.top_k);
  check_view(op, "topk_weights", r.topk_weights, DType::kF32, 2);
  check_dim(op, "topk_weights", r.topk_weights, 0, r.num_tokens);
  check_dim(op, "topk_weights", r.topk_weights, 1, r.top_k);
  check_view(op, "expert_offsets", r.expert_offsets, DType::kI32, 1);
  check_dim(op, "expert_offsets", r.expert_offsets, 0, r.num_experts + 1);
  check_view(op, "sorted_assign", r.sorted_assign, DType::kI32, 1);
  check_dim(op, "sorted_assign", r.sorted_assign, 0, a);
  check_view(op, "assign_row", r.assign_row, DType::kI32, 1);
  check_dim(op, "assign_row", r.assign_row, 0, a);
}

}  // namespace

void CpuBackend::moe_route(const Tensor& router_logits, bool renormalize, MoeRouting& r) {
  check_routing("moe_route", r);
  check_view("moe_route", "router_logits", router_logits, DType::kF32, 2);
  check_dim("moe_route", "router_logits", router_logits, 0, r.num_tokens);
  check_dim("moe_route", "router_logits", router_logits, 1, r.num_experts);
  const int E = r.num_experts, k = r.top_k, T = r.num_tokens;
  std::vector<float> probs(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    const float* x = row<float>(router_logits, t);
    float m = -INFINITY;
    for (int e = 0; e < E; ++e) m = std::max(m, x[e]);
    double sum = 0.0;
    for (int e = 0; e < E; ++e) {
      probs[size_t(e)] = float(std::exp(double(x[e] - m)));
      sum += probs[size_t(e)];
    }
    const float inv_sum = float(sum);
    for (float& p : probs) p = p / inv_sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return probs[size_t(a)] > probs[size_t(b)] || (probs[size_t(a)] == probs[size_t(b)] && a < b);
    });
    int32_t* ids = row<int32_t>(r.topk_ids, t);
    float* w = row<float>(r.topk_weights, t);
    float chosen = 0.0f;
    for (int j = 0; j < k; ++j) {
      ids[j] = order[size_t(j)];
      w[j] = probs[size_t(order[size_t(j)])];
      chosen += w[j];
    }
    if (renormalize)
      for (int j = 0; j < k; ++j) w[j] = w[j] / chosen;
  }
  // Counting sort of the assignments by expert (stable).
  int32_t* offsets = r.expert_offsets.ptr<int32_t>();
  std::fill(offsets, offsets + E + 1, 0);
  const int64_t A = int64_t(T) * k;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) ++offsets[row<int32_t>(r.topk_ids, t)[j] + 1];
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> cursor(offsets, offsets + E);
  int32_t* sorted = r.sorted_assign.ptr<int32_t>();
  int32_t* assign_row = r.assign_row.ptr<int32_t>();
  for (int64_t a = 0; a < A; ++a) {
    const int32_t e = row<int32_t>(r.topk_ids, a / k)[a % k];
    const int32_t pos = cursor[size_t(e)]++;
    sorted[pos] = int32_t(a);
    assign_row[a] = pos;
  }
}

void CpuBackend::moe_gemm(const Tensor& x, const Tensor& w, const MoeRouting& r, bool gather, Tensor& out) {
  check_routing("moe_gemm", r);
  check_view("moe_gemm", "x", x, DType::kF32, 2);
  check_view("moe_gemm", "w", w, DType::kF32, 3);
  check_view("moe_gemm", "out", out, DType::kF32, 2);
  const int64_t A = int64_t(r.num_tokens) * r.top_k;
  const int64_t k = x.shape[1], n = w.shape[1];
  check_dim("moe_gemm", "x", x, 0, gather ? r.num_tokens : A);
  check_dim("moe_gemm", "w", w, 0, r.num_experts);
  check_dim("moe_gemm", "w", w, 2, k);
  check_dim("moe_gemm", "out", out, 0, A);
  check_dim("moe_gemm", "out", out, 1, n);
  FG_CHECK(w.stride[1] == k && w.stride[0] == n * k, cpu::arg_message("moe_gemm", "w", "contiguous", w));
  const int32_t* offsets = r.expert_offsets.ptr<int32_t>();
  const int32_t* sorted = r.sorted_assign.ptr<int32_t>();
  FG_CHECK(offsets[0] == 0 && offsets[r.num_experts] == A, "moe_gemm: expert_offsets do not cover the assignments");
  std::vector<float> block;
  for (int e = 0; e < r.num_experts; ++e) {
    const int64_t r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows <= 0) continue;
    // The expert's rows, contiguous (transformers' hidden_states[token_idx]).
    block.resize(size_t(rows * k));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t src = gather ? sorted[r0 + i] / r.top_k : r0 + i;
      FG_CHECK(src >= 0 && src < x.shape[0], "moe_gemm: sorted_assign points outside x");
      std::memcpy(block.data() + i * k, row<float>(x, src), size_t(k) * 4);
    }
    float* o = row<float>(out, r0);
    const int64_t ldo = out.stride[0];
    if (options_.batch_invariant) {
      const Tensor xb = Tensor::contiguous(block.data(), DType::kF32, Device::kCpu, {rows, k});
      const Tensor we = Tensor::contiguous(w.ptr<float>() + int64_t(e) * n * k, DType::kF32, Device::kCpu, {n, k});
      Tensor ob = Tensor::contiguous(o, DType::kF32, Device::kCpu, {rows, n});
      if (rows > 1) ob.stride[0] = ldo;
      gemm(xb, we, nullptr, ob);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i) std::memset(o + i * ldo, 0, size_t(n) * 4);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n), int(k), 1.0f, block.data(), int(k),
                w.ptr<float>() + int64_t(e) * n * k, int(k), 0.0f, o, int(std::max<int64_t>(ldo, n)));
  }
}

void CpuBackend::moe_combine(const Tensor& y, const MoeRouting& r, Tensor& out) {
  check_routing("moe_combine", r);
  check_view("moe_combine", "y", y, DType::kF32, 2);
  check_view("moe_combine", "out", out, DType::kF32, 2);
  const int64_t h = y.shape[1];
  check_dim("moe_combine", "y", y, 0, int64_t(r.num_tokens) * r.top_k);
  check_dim("moe_combine", "out", out, 0, r.num_tokens);
  check_dim("moe_combine", "out", out, 1, h);
  const int k = r.top_k;
  const int32_t* assign_row = r.assign_row.ptr<int32_t>();
  const int64_t tokens = r.num_tokens;
  cpu::parallel_items(pool_, tokens, tokens * k * h, kParallelMinWork, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t* ids = row<int32_t>(r.topk_ids, t);
      const float* w = row<float>(r.topk_weights, t);
      int order[kMaxTopK];
      for (int j = 0; j < k; ++j) order[j] = j;
      std::sort(order, order + k, [&](int a, int b) { return ids[a] < ids[b]; });
      float* o = row<float>(out, t);
      std::fill(o, o + h, 0.0f);
      for (int jj = 0; jj < k; ++jj) {
        const int j = order[jj];
        const float* src = row<float>(y, assign_row[t * k + j]);
        for (int64_t c = 0; c < h; ++c) {
          const float product = src[c] * w[j];
          o[c] = o[c] + product;
        }
      }
    }
  });
}

}  // namespace fg
