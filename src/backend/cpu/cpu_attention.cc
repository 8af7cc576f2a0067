// CPU backend: the one attention op of DESIGN.md over the paged KV cache, and its (empty) plan.
//
// For each sequence s, q rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) are its q_len new tokens and
// kv_len = seqlens_kv[s] counts its cached tokens including them. Query i sits at position
// p = kv_len - q_len + i; kv position j lives in page block_table[s][j / page_size] at offset
// j % page_size. q head h reads kv head h / (num_q_heads / num_kv_heads). A query sees j when
// (!causal || j <= p) and (window == 0 || p - j < window).
//
// Per (token, head): score_j = scale * (q . k_j) (the dot product in head_dim order), then
// softcap * tanh(score_j / softcap) when softcap > 0; two passes in f32: m = max score, then
// p_j = exp(score_j - m) (cpu_attention_kernels.h: within 2 ulp of std::exp), l = sum of p_j in key
// order and acc = sum of p_j * v_j in key order; out = acc / l, lse = log(l) + m. So a row's result
// depends on the row and its keys alone, never on the batch. Every query sees at least its own
// position, so an empty row cannot occur with valid metadata; should one ever be asked for, it
// gets out = 0 and lse = -inf.
//
// The work: items of up to kItemRows rows (a run of one sequence's tokens x the q heads of one kv
// head, which read the same keys), each over key blocks of kAttnStep: the block's keys transposed
// into a scratch tile for the scores, its value rows read in place (f32 rows of a padded width) or
// decoded, both by the vector kernels of cpu_attention_kernels.h.
//
// An fp8 cache (backend.h's KvCacheLayer) is read as e4m3 * scale in f32, exactly the values the
// CUDA kernels compute with, so its results equal those of an f32 cache holding those values; a
// bf16 cache (--kv-cache-dtype bf16 here) likewise as its bf16 values.
//
// The CPU plan (CpuAttentionPlan) has nothing to precompute; planning validates the metadata
// like attention does, so a batch-builder bug fails at the first step in CI rather than
// as wrong logits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_attention_kernels.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

using cpu::AttentionKernels;
using cpu::check_dim;
using cpu::check_view;
using cpu::kAttnStep;
using cpu::row;

namespace {

// The CPU plan: the batch planned last has been validated (and had total_q rows).
class CpuAttentionPlan final : public AttentionPlan {
 public:
  explicit CpuAttentionPlan(const AttentionPlanShape& shape) : AttentionPlan(shape) {}
  int64_t total_q = 0;  // of the batch planned last
  bool planned = false;
};

// Checks the batch metadata tensors (shapes, prefix sums, kv >= q lengths, the declared maxima).
// Aborts on a malformed batch.
void validate_batch(const char* op, const AttentionBatch& batch) {
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
  validate_batch("plan_attention", batch);
  p->total_q = batch.total_q;
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

// Query rows per work item at most: the tokens of one sequence times the q heads of one kv head,
// which share every key they read (the kernels hold four rows in registers per pass over a key).
constexpr int64_t kItemRows = 32;
// Scores an item may hold (rows x keys), so that its buffer stays in the L2 at long contexts.
constexpr int64_t kItemScores = int64_t(1) << 18;

// One work item: tokens [t0, t1) of sequence s (consecutive q rows), every q head of kv head g.
struct Item {
  int32_t s, g;
  int64_t t0, t1;
};

// A thread's buffers, grown as needed and kept across items, layers and steps (the pool's threads
// and the engine thread live as long as the backend), so a step allocates nothing here.
struct Scratch {
  std::vector<float> q, k, kt, v, s, acc, zeros;
  std::vector<const float*> k_rows, v_rows;
  std::vector<int64_t> lo, hi;
  std::vector<float> m, l;
};

template <class T>
T* sized(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// The item's rows (token-major: row (t - t0) * group + i is q head g * group + i of token t) over
// their keys, in three passes over key blocks of kAttnStep: scores (keys transposed into kt), then
// per row the mask, scale, softcap and max, exp and sum over its own keys, then the weighted sum of
// value rows. Keys of the item's range that a row does not see get p = 0, which adds exact zeros.
void attend_item(const AttentionKernels& kern, const PagedKv& kv, const Item& it, const Tensor& q, const int32_t* pages,
                 int64_t kv_len, int64_t q_len, int64_t cu0, int64_t group, const AttentionParams& params, Tensor& out,
                 Tensor* lse, Scratch& w) {
  const int64_t head_dim = q.shape[2];
  const int64_t dim_pad = (head_dim + kAttnStep - 1) / kAttnStep * kAttnStep;
  const int64_t rows = (it.t1 - it.t0) * group;
  int64_t* lo = sized(w.lo, rows);
  int64_t* hi = sized(w.hi, rows);
  float* qbuf = sized(w.q, rows * head_dim);
  for (int64_t t = it.t0; t < it.t1; ++t) {
    const int64_t p = kv_len - q_len + (t - cu0);
    const int64_t row_hi = params.causal ? p : kv_len - 1;
    const int64_t row_lo = params.sliding_window > 0 ? std::max<int64_t>(0, p - params.sliding_window + 1) : 0;
    for (int64_t i = 0; i < group; ++i) {
      const int64_t r = (t - it.t0) * group + i;
      lo[r] = row_lo;
      hi[r] = row_hi;
      std::memcpy(qbuf + r * head_dim, row<float>(q, t, it.g * group + i), size_t(head_dim) * sizeof(float));
    }
  }
  int64_t first = lo[0], last = hi[0];
  for (int64_t r = 1; r < rows; ++r) {
    first = std::min(first, lo[r]);
    last = std::max(last, hi[r]);
  }
  const int64_t keys = std::max<int64_t>(0, last - first + 1);
  const int64_t keys_pad = (keys + kAttnStep - 1) / kAttnStep * kAttnStep;
  float* s = sized(w.s, rows * std::max<int64_t>(keys_pad, 1));
  float* kt = sized(w.kt, head_dim * kAttnStep);
  float* vbuf = sized(w.v, kAttnStep * dim_pad);
  const float** v_rows = sized(w.v_rows, kAttnStep);
  const float** k_rows = sized(w.k_rows, kAttnStep);
  float* kbuf = sized(w.k, kAttnStep * head_dim);
  const int64_t es = kv.elem_bytes;
  const float* k_scale = kv.k_scale ? kv.k_scale + it.g : nullptr;
  const float* v_scale = kv.v_scale ? kv.v_scale + it.g : nullptr;
  auto key_row = [&](const char* base, int64_t page_stride, int64_t slot_stride, int64_t head_stride, int64_t j) {
    const int64_t page = pages[j / kv.page_size];
    return base + (page * page_stride + (j % kv.page_size) * slot_stride + it.g * head_stride) * es;
  };

  // Scores: s[r][j] = q_r . k_(first + j), the block's key rows (f32 in place, else decoded;
  // a zero row past the last key) transposed into kt.
  float* zeros = sized(w.zeros, dim_pad);
  std::fill(zeros, zeros + dim_pad, 0.0f);
  for (int64_t b0 = 0; b0 < keys_pad; b0 += kAttnStep) {
    const int64_t nb = std::min(kAttnStep, keys - b0);
    for (int64_t j = 0; j < kAttnStep; ++j) {
      if (j >= nb) {
        k_rows[j] = zeros;
        continue;
      }
      const char* kr = key_row(kv.k, kv.k_page, kv.k_slot, kv.k_head, first + b0 + j);
      k_rows[j] =
          es == 4 ? reinterpret_cast<const float*>(kr) : row_values(kr, es, head_dim, k_scale, kbuf + j * head_dim);
    }
    kern.transpose(k_rows, head_dim, kt, kAttnStep);
    kern.scores(qbuf, head_dim, int(rows), kt, kAttnStep, head_dim, kAttnStep, s + b0, keys_pad);
  }

  // Per row: mask, scale, softcap, max; then p = exp(score - max) and l = the sum over its keys.
  float* m = sized(w.m, rows);
  float* l = sized(w.l, rows);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * keys_pad;
    if (hi[r] < lo[r]) {
      std::fill(sr, sr + keys, 0.0f);
      m[r] = kNegInf;
      l[r] = 0.0f;
      continue;
    }
    const int64_t a = lo[r] - first, b = hi[r] - first + 1;  // the row's keys
    std::fill(sr, sr + a, kNegInf);
    std::fill(sr + b, sr + keys, kNegInf);
    const float scale = params.scale, cap = params.softcap;
    for (int64_t j = a; j < b; ++j) sr[j] *= scale;
    if (cap > 0.0f)
      for (int64_t j = a; j < b; ++j) sr[j] = cap * std::tanh(sr[j] / cap);
    float mr = sr[a];
    for (int64_t j = a + 1; j < b; ++j) mr = std::max(mr, sr[j]);
    m[r] = mr;
    kern.exp_shifted(sr, keys, mr);
    float lr = 0.0f;
    for (int64_t j = a; j < b; ++j) lr += sr[j];
    l[r] = lr;
  }

  // Values: acc[r] = sum_j p[r][j] v_(first + j), rows decoded (and padded) where not f32 of a
  // padded width.
  float* acc = sized(w.acc, rows * dim_pad);
  std::fill(acc, acc + rows * dim_pad, 0.0f);
  const bool direct = es == 4 && dim_pad == head_dim;
  for (int64_t b0 = 0; b0 < keys; b0 += kAttnStep) {
    const int64_t nb = std::min(kAttnStep, keys - b0);
    for (int64_t j = 0; j < nb; ++j) {
      const char* vr = key_row(kv.v, kv.v_page, kv.v_slot, kv.v_head, first + b0 + j);
      if (direct) {
        v_rows[j] = reinterpret_cast<const float*>(vr);
        continue;
      }
      float* dst = vbuf + j * dim_pad;
      const float* vals = row_values(vr, es, head_dim, v_scale, dst);
      if (vals != dst) std::memcpy(dst, vals, size_t(head_dim) * sizeof(float));
      std::fill(dst + head_dim, dst + dim_pad, 0.0f);
      v_rows[j] = dst;
    }
    kern.accumulate(s + b0, keys_pad, int(rows), v_rows, nb, dim_pad, acc, dim_pad);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = it.t0 + r / group, h = it.g * group + r % group;
    float* o = row<float>(out, t, h);
    if (hi[r] < lo[r]) {
      std::fill(o, o + head_dim, 0.0f);
      if (lse != nullptr) row<float>(*lse, t)[h] = kNegInf;
      continue;
    }
    for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[r * dim_pad + d] / l[r];
    if (lse != nullptr) row<float>(*lse, t)[h] = std::log(l[r]) + m[r];
  }
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
  validate_batch("attention", batch);
  FG_CHECK(p->total_q == batch.total_q && plan.shape().num_q_heads == q_heads &&
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

  // Items: per sequence and kv head, runs of tokens whose rows (tokens x group) fit kItemRows and
  // whose scores fit kItemScores.
  std::vector<Item> items;
  int64_t work = 0;
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    const int64_t q_len = cu[s + 1] - cu[s];
    if (q_len == 0) continue;
    const int64_t keys = seqlens_kv[s] + kAttnStep;
    const int64_t tokens = std::max<int64_t>(1, std::min(kItemRows, kItemScores / keys) / group);
    work += q_len * seqlens_kv[s];
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t t0 = cu[s]; t0 < cu[s + 1]; t0 += tokens)
        items.push_back({int32_t(s), int32_t(g), t0, std::min<int64_t>(t0 + tokens, cu[s + 1])});
  }
  work *= q_heads * head_dim;
  const AttentionKernels& kern = cpu::attention_kernels();
  // Serial below about a tenth of a millisecond of work.
  cpu::parallel_items(pool_, int64_t(items.size()), work, cpu::kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    thread_local Scratch scratch;
    for (int64_t i = i0; i < i1; ++i) {
      const Item& it = items[size_t(i)];
      attend_item(kern, kv, it, q, row<int32_t>(bt, it.s), seqlens_kv[it.s], cu[it.s + 1] - cu[it.s], cu[it.s], group,
                  params, out, lse, scratch);
    }
  });
}

}  // namespace fg
