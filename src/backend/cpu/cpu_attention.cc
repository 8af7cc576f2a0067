// CPU backend: the one attention op of DESIGN.md over the paged KV cache, and its (empty) plan.
//
// For each sequence s, q rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) are its q_len new tokens and
// kv_len = seqlens_kv[s] counts its cached tokens including them. Query i sits at position
// p = kv_len - q_len + i; kv position j lives in page block_table[s][j / page_size] at offset
// j % page_size. q head h reads kv head h / (num_q_heads / num_kv_heads). A query sees j when
// (!causal || j <= p) and (window == 0 || p - j < window).
//
// Per (token, head): score_j = scale * (q . k_j), then softcap * tanh(score_j / softcap) when
// softcap > 0; two passes in f32: m = max score, then l = sum exp(score_j - m) and
// acc = sum exp(score_j - m) * v_j; out = acc / l, lse = log(l) + m. Every query sees at least
// its own position, so an empty row cannot occur with valid metadata; should one ever be asked
// for, it gets out = 0 and lse = -inf.
//
// An fp8 cache (backend.h's KvCacheLayer) is read as e4m3 * scale in f32, exactly the values the
// CUDA kernels compute with, so its results equal those of an f32 cache holding those values; a
// bf16 cache (--kv-cache-dtype bf16 here) likewise as its bf16 values.
//
// The CPU plan (CpuAttentionPlan) holds the sequence of every q row; planning validates the
// metadata like attention does, so a batch-builder bug fails at the first step in CI rather than
// as wrong logits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

using cpu::check_dim;
using cpu::check_view;
using cpu::row;

namespace {

// The CPU plan: which sequence each q row belongs to, for the batch planned last.
class CpuAttentionPlan final : public AttentionPlan {
 public:
  explicit CpuAttentionPlan(const AttentionPlanShape& shape) : AttentionPlan(shape) {}
  std::vector<int32_t> token_seq;  // [total_q]
  bool planned = false;
};

// Checks the batch metadata tensors (shapes, prefix sums, kv >= q lengths, the declared maxima)
// and, when token_seq is given, fills it with the sequence index of every q row. Aborts on a
// malformed batch.
void validate_batch(const char* op, const AttentionBatch& batch, std::vector<int32_t>* token_seq) {
  const int64_t num_seqs = batch.num_seqs;
  FG_CHECK(num_seqs >= 0 && batch.total_q >= 0 && batch.page_size >= 1,
           std::string(op) + ": batch has num_seqs " + std::to_string(num_seqs) + ", total_q " +
               std::to_string(batch.total_q) + ", page_size " + std::to_string(batch.page_size));
  check_view(op, "batch.cu_seqlens_q", batch.cu_seqlens_q, DType::kI32, 1);
  check_view(op, "batch.seqlens_kv", batch.seqlens_kv, DType::kI32, 1);
  check_view(op, "batch.block_table", batch.block_table, DType::kI32, 2);
  check_dim(op, "batch.cu_seqlens_q", batch.cu_seqlens_q, 0, num_seqs + 1);
  check_dim(op, "batch.seqlens_kv", batch.seqlens_kv, 0, num_seqs);
  check_dim(op, "batch.block_table", batch.block_table, 0, num_seqs);
  const int32_t* cu = batch.cu_seqlens_q.ptr<int32_t>();
  const int32_t* kv = batch.seqlens_kv.ptr<int32_t>();
  const int64_t max_pages = batch.block_table.shape[1];
  FG_CHECK(cu[0] == 0 && cu[num_seqs] == batch.total_q,
           std::string(op) + ": cu_seqlens_q must run from 0 to total_q = " + std::to_string(batch.total_q) + ", got " +
               std::to_string(cu[0]) + " .. " + std::to_string(cu[num_seqs]));
  if (token_seq) token_seq->resize(size_t(batch.total_q));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = int64_t(cu[s + 1]) - cu[s];
    const std::string where = std::string(op) + ": sequence " + std::to_string(s) + " has q_len " +
                              std::to_string(q_len) + " and kv_len " + std::to_string(kv[s]);
    FG_CHECK(q_len >= 0 && q_len <= batch.max_q_len,
             where + " (q_len must be in [0, max_q_len = " + std::to_string(batch.max_q_len) + "])");
    FG_CHECK(kv[s] >= q_len && kv[s] <= batch.max_kv_len,
             where + " (kv_len must count the new tokens and be at most max_kv_len = " +
                 std::to_string(batch.max_kv_len) + ")");
    FG_CHECK((int64_t(kv[s]) + batch.page_size - 1) / batch.page_size <= max_pages,
             where + ": more pages than block_table " + batch.block_table.describe() + " holds at page_size " +
                 std::to_string(batch.page_size));
    if (token_seq)
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t) (*token_seq)[size_t(t)] = int32_t(s);
  }
}

}  // namespace

size_t CpuBackend::attention_workspace_bytes(const AttentionPlanShape&) const {
  return 0;
}

std::unique_ptr<AttentionPlan> CpuBackend::make_attention_plan(const AttentionPlanShape& shape, Buffer) {
  FG_CHECK(shape.num_q_heads > 0 && shape.num_kv_heads > 0 && shape.num_q_heads % shape.num_kv_heads == 0 &&
               shape.head_dim > 0,
           "make_attention_plan: num_q_heads " + std::to_string(shape.num_q_heads) +
               " must be a positive multiple of num_kv_heads " + std::to_string(shape.num_kv_heads) + ", head_dim " +
               std::to_string(shape.head_dim) + " positive");
  return std::make_unique<CpuAttentionPlan>(shape);
}

void CpuBackend::plan_attention(AttentionPlan& plan, const AttentionBatch& batch) {
  auto* p = dynamic_cast<CpuAttentionPlan*>(&plan);
  FG_CHECK(p != nullptr, "plan_attention: the plan was not made by the CPU backend");
  validate_batch("plan_attention", batch, &p->token_seq);
  p->planned = true;
  // The host copies must agree with the device metadata the kernels read.
  const int64_t num_seqs = batch.num_seqs;
  FG_CHECK(int64_t(batch.host_cu_seqlens_q.size()) == num_seqs + 1 && int64_t(batch.host_seqlens_kv.size()) == num_seqs,
           "plan_attention: host metadata has " + std::to_string(batch.host_cu_seqlens_q.size()) +
               " cu_seqlens_q and " + std::to_string(batch.host_seqlens_kv.size()) + " seqlens_kv entries for " +
               std::to_string(num_seqs) + " sequences");
  const int32_t* cu = batch.cu_seqlens_q.ptr<int32_t>();
  const int32_t* kv = batch.seqlens_kv.ptr<int32_t>();
  for (int64_t s = 0; s <= num_seqs; ++s)
    FG_CHECK(batch.host_cu_seqlens_q[size_t(s)] == cu[s],
             "plan_attention: host_cu_seqlens_q[" + std::to_string(s) + "] differs from the device copy");
  for (int64_t s = 0; s < num_seqs; ++s)
    FG_CHECK(batch.host_seqlens_kv[size_t(s)] == kv[s],
             "plan_attention: host_seqlens_kv[" + std::to_string(s) + "] differs from the device copy");
}

namespace {

// One layer's cache as plain pointers and element strides: [num_pages, page_size, kv_heads, head_dim],
// f32, bf16 or e4m3 bytes with a scale per kv head (fp8).
struct PagedKv {
  const char* k;
  const char* v;
  int64_t k_page, k_slot, k_head;  // strides of k in elements
  int64_t v_page, v_slot, v_head;  // strides of v in elements
  int64_t page_size;
  int64_t elem_bytes;    // 4 (f32), 2 (bf16) or 1 (e4m3)
  const float* k_scale;  // [kv_heads] (fp8), else null
  const float* v_scale;
};

// Everything one (token, head) row needs. Keys [lo, hi] (inclusive) are the visible range.
struct AttentionRow {
  const float* q;        // [head_dim]
  const int32_t* pages;  // block_table row of the sequence
  int64_t kv_head;
  int64_t lo, hi;
};

// Calls fn(j, k_row, v_row) for every visible key j in order, walking the pages (rows as stored).
template <class Fn>
inline void for_each_key(const PagedKv& kv, const AttentionRow& r, Fn&& fn) {
  const int64_t first_page = r.lo / kv.page_size, last_page = r.hi / kv.page_size;
  const int64_t es = kv.elem_bytes;
  for (int64_t pi = first_page; pi <= last_page; ++pi) {
    const int64_t page = r.pages[pi];
    const int64_t begin = pi == first_page ? r.lo % kv.page_size : 0;
    const int64_t end = pi == last_page ? r.hi % kv.page_size : kv.page_size - 1;
    const char* k = kv.k + (page * kv.k_page + r.kv_head * kv.k_head) * es;
    const char* v = kv.v + (page * kv.v_page + r.kv_head * kv.v_head) * es;
    for (int64_t o = begin; o <= end; ++o) fn(pi * kv.page_size + o, k + o * kv.k_slot * es, v + o * kv.v_slot * es);
  }
}

// The f32 values of every e4m3 code (exact), for the fp8 cache's rows.
const float* e4m3_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(256);
    for (int i = 0; i < 256; ++i) t[size_t(i)] = f8e4m3_to_f32(uint8_t(i));
    return t;
  }();
  return table.data();
}

// A cache row as f32 values: the row itself (f32 cache), or bf16 / e4m3 * scale decoded into
// `scratch` (exact: scales are powers of two).
inline const float* row_values(const char* row, int64_t es, int64_t head_dim, const float* scale, float* scratch) {
  if (es == 4) return reinterpret_cast<const float*>(row);
  if (es == 2) {
    const auto* b = reinterpret_cast<const uint16_t*>(row);
    for (int64_t d = 0; d < head_dim; ++d) scratch[d] = bf16_to_f32(b[d]);
    return scratch;
  }
  const float* table = e4m3_table();
  const float s = *scale;
  const auto* codes = reinterpret_cast<const uint8_t*>(row);
  for (int64_t d = 0; d < head_dim; ++d) scratch[d] = table[codes[d]] * s;
  return scratch;
}

// Writes out[head_dim] and returns the lse of one row. scores: scratch of at least hi - lo + 1;
// row: scratch of head_dim (an fp8 cache's decoded rows).
float attend_row(const PagedKv& kv, const AttentionRow& r, const AttentionParams& params, int64_t head_dim,
                 float* scores, float* row, float* out) {
  if (r.hi < r.lo) {
    std::fill(out, out + head_dim, 0.0f);
    return -std::numeric_limits<float>::infinity();
  }
  const float* q = r.q;
  const float* k_scale = kv.k_scale ? kv.k_scale + r.kv_head : nullptr;
  const float* v_scale = kv.v_scale ? kv.v_scale + r.kv_head : nullptr;
  float m = -std::numeric_limits<float>::infinity();
  for_each_key(kv, r, [&](int64_t j, const char* k_row, const char*) {
    const float* k = row_values(k_row, kv.elem_bytes, head_dim, k_scale, row);
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * k[d];
    float score = params.scale * dot;
    if (params.softcap > 0.0f) score = params.softcap * std::tanh(score / params.softcap);
    scores[j - r.lo] = score;
    m = std::max(m, score);
  });
  std::fill(out, out + head_dim, 0.0f);
  float l = 0.0f;
  for_each_key(kv, r, [&](int64_t j, const char*, const char* v_row) {
    const float* v = row_values(v_row, kv.elem_bytes, head_dim, v_scale, row);
    const float p = std::exp(scores[j - r.lo] - m);
    l += p;
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) out[d] += p * v[d];
  });
  for (int64_t d = 0; d < head_dim; ++d) out[d] /= l;
  return std::log(l) + m;
}

}  // namespace

void CpuBackend::attention(const AttentionPlan& plan, const Tensor& q, const KvCacheLayer& cache,
                           const AttentionBatch& batch, const AttentionParams& params, Tensor& out, Tensor* lse) {
  const auto* p = dynamic_cast<const CpuAttentionPlan*>(&plan);
  FG_CHECK(p != nullptr && p->planned, "attention: the plan was not made by the CPU backend or never planned");
  check_view("attention", "q", q, DType::kF32, 3);
  check_view("attention", "out", out, DType::kF32, 3);
  const bool fp8 = cpu::check_kv_cache("attention", cache) == DType::kF8E4M3;
  const int64_t total_q = q.shape[0], q_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t num_pages = cache.k.shape[0], kv_heads = cache.k.shape[2];
  check_dim("attention", "q", q, 0, batch.total_q);
  for (int d = 0; d < 3; ++d) check_dim("attention", "out", out, d, q.shape[d]);
  check_dim("attention", "cache.k", cache.k, 1, batch.page_size);
  check_dim("attention", "cache.k", cache.k, 3, head_dim);
  FG_CHECK(kv_heads > 0 && q_heads % kv_heads == 0,
           "attention: q heads of " + q.describe() + " must be a multiple of the kv heads of " + cache.k.describe());
  FG_CHECK(params.sliding_window >= 0 && params.softcap >= 0.0f,
           "attention: sliding_window " + std::to_string(params.sliding_window) + " and softcap " +
               std::to_string(params.softcap) + " must be >= 0");
  if (lse != nullptr) {
    check_view("attention", "lse", *lse, DType::kF32, 2);
    check_dim("attention", "lse", *lse, 0, total_q);
    check_dim("attention", "lse", *lse, 1, q_heads);
  }
  validate_batch("attention", batch, nullptr);
  FG_CHECK(int64_t(p->token_seq.size()) == batch.total_q && plan.shape().num_q_heads == q_heads &&
               plan.shape().num_kv_heads == kv_heads && plan.shape().head_dim == head_dim,
           "attention: the batch or the heads differ from those the plan was made and planned for");
  const int32_t* cu = batch.cu_seqlens_q.ptr<int32_t>();
  const int32_t* seqlens_kv = batch.seqlens_kv.ptr<int32_t>();
  const Tensor& bt = batch.block_table;
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t* pages = row<int32_t>(bt, s);
    for (int64_t pi = 0; pi * batch.page_size < seqlens_kv[s]; ++pi)
      FG_CHECK(pages[pi] >= 0 && pages[pi] < num_pages, "attention: block_table[" + std::to_string(s) + "][" +
                                                            std::to_string(pi) + "] = " + std::to_string(pages[pi]) +
                                                            " is not a page of the cache " + cache.k.describe());
  }
  if (total_q == 0) return;

  const PagedKv kv{static_cast<const char*>(cache.k.data),
                   static_cast<const char*>(cache.v.data),
                   cache.k.stride[0],
                   cache.k.stride[1],
                   cache.k.stride[2],
                   cache.v.stride[0],
                   cache.v.stride[1],
                   cache.v.stride[2],
                   batch.page_size,
                   int64_t(dtype_size(cache.k.dtype)),
                   fp8 ? cache.k_scale.ptr<float>() : nullptr,
                   fp8 ? cache.v_scale.ptr<float>() : nullptr};
  const int64_t group = q_heads / kv_heads;
  const int64_t window = params.sliding_window;
  int64_t max_kv = 1;
  for (int64_t s = 0; s < batch.num_seqs; ++s) max_kv = std::max<int64_t>(max_kv, seqlens_kv[s]);
  const int32_t* token_seq = p->token_seq.data();

  // Serial below about a tenth of a millisecond of work.
  int64_t work = 0;
  for (int64_t s = 0; s < batch.num_seqs; ++s) work += int64_t(cu[s + 1] - cu[s]) * seqlens_kv[s];
  work *= q_heads * head_dim;
  // Items are (token, head) rows of very different lengths: chunks of a few rows balance them.
  const int64_t items = total_q * q_heads;
  cpu::parallel_items(pool_, items, work, cpu::kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> scores(static_cast<size_t>(max_kv)), row_scratch(static_cast<size_t>(head_dim));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / q_heads, h = item % q_heads;
      const int64_t s = token_seq[t];
      const int64_t q_len = cu[s + 1] - cu[s], kv_len = seqlens_kv[s];
      const int64_t p = kv_len - q_len + (t - cu[s]);
      AttentionRow r;
      r.q = row<float>(q, t, h);
      r.pages = row<int32_t>(bt, s);
      r.kv_head = h / group;
      r.hi = params.causal ? p : kv_len - 1;
      r.lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      const float l = attend_row(kv, r, params, head_dim, scores.data(), row_scratch.data(), row<float>(out, t, h));
      if (lse != nullptr) row<float>(*lse, t)[h] = l;
    }
  });
}

}  // namespace fg
