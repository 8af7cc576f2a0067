// CPU backend: the sampling rule of backend/sampling_rule.h, row by row.
//
// Precision choices (the rule lets only softmax rounding differ between backends):
//  - p_i = exp(logits_i / T - max) / sum, each term in f32, the sum accumulated in double, the
//    quotient rounded to f32;
//  - cumulative sums (top_p, the kept mass, the final walk) are in double over those f32 p.
// A row with no finite logit maximum (all -inf, a +inf or NaN) cannot form a distribution; it
// falls back to the greedy rule so one bad row never stops a batch.
//
// Every filter of the rule keeps a prefix of one order (p descending, lower id on ties), so the
// candidates are sorted lazily: only as far into that order as the filters and the walk reach.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"
#include "backend/sampling_rule.h"

namespace fg {

namespace {

// The rule's order: higher probability first, lower id on ties (a strict total order).
struct RuleOrder {
  const float* p;
  bool operator()(int32_t a, int32_t b) const { return p[a] > p[b] || (p[a] == p[b] && a < b); }
};

// Candidate ids whose first sorted() entries are in final rule order; at(i) extends that
// prefix geometrically (nth_element then sort of the next chunk) when i is past it. A front set
// by narrow() (every id in [0, front) before every id after it in the rule's order) bounds the
// selections while the prefix stays inside it, so they do not rescan the whole vocabulary.
class LazyOrder {
 public:
  LazyOrder(int32_t* ids, int64_t size, const float* p) : ids_(ids), size_(size), front_(size), less_{p} {}

  int32_t at(int64_t i) {
    if (i >= sorted_) extend(i + 1);
    return ids_[i];
  }
  int32_t* ids() { return ids_; }
  int64_t size() const { return size_; }
  int64_t sorted() const { return sorted_; }
  void set_front(int64_t front) { front_ = front; }

 private:
  void extend(int64_t want) {
    int64_t n = std::min(size_, std::max({want, 2 * sorted_, int64_t(64)}));
    if (want <= front_) n = std::min(n, front_);  // the front alone holds what is asked for
    const int64_t end = n <= front_ ? front_ : size_;
    int32_t* mid = ids_ + n;
    if (n < end) std::nth_element(ids_ + sorted_, mid, ids_ + end, less_);
    std::sort(ids_ + sorted_, mid, less_);
    sorted_ = n;
  }

  int32_t* ids_;
  int64_t size_;
  int64_t front_;
  int64_t sorted_ = 0;
  RuleOrder less_;
};

int exponent_of(float p) {  // p >= 0: its exponent bits, monotone in p
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  return int(bits >> 23);
}

// Moves to the front of a not yet sorted order the candidates of the highest exponents of p that
// hold at least `need_count` of them and `need_mass` of their mass (by scratch's per-exponent
// counts and sums, with a margin over the order's own double sums; a front too short only costs
// time: the order then reaches past it). Every candidate of a higher exponent has a larger p, so
// the front precedes the rest in the rule's order.
void narrow(LazyOrder& order, const CpuSampleScratch& scratch, const float* p, int64_t need_count, double need_mass) {
  if (order.sorted() != 0) return;
  int64_t count = 0;
  double mass = 0.0;
  int e = 255;
  for (; e > 0; --e) {
    count += scratch.exp_count[size_t(e)];
    mass += scratch.exp_mass[size_t(e)];
    if (count >= need_count && mass >= need_mass + 1e-9) break;
  }
  if (count >= order.size()) return;
  int32_t* ids = order.ids();
  const int32_t* mid = std::partition(ids, ids + order.size(), [&](int32_t id) { return exponent_of(p[id]) >= e; });
  order.set_front(mid - ids);
}

// Rule step 1: argmax, the lowest id on ties.
int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

// Below this many logits (rows x vocab) a step samples on the calling thread: handing rows to
// helpers costs more than the rows themselves for small vocabularies. Rows are independent and
// each worker has its own scratch, so the result is the same either way.
constexpr int64_t kParallelSampleLogits = int64_t(1) << 20;

}  // namespace

namespace {

// Rule steps 2-3 for a row with temperature > 0: fills scratch.probs with p and returns the kept
// candidates (the first `keep` of `order`, in rule order) and their mass. Returns false when the
// row has no finite maximum (the caller falls back to the greedy rule).
struct Kept {
  int64_t keep = 0;
  double mass = 0.0;
};
bool kept_candidates(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                     LazyOrder& order_out, Kept& kept) {
  // Rule step 2: p = softmax(logits / temperature).
  scratch.probs.resize(size_t(vocab));
  float* p = scratch.probs.data();
  float z_max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = logits[i] / row.temperature;
    z_max = std::max(z_max, p[i]);
  }
  if (!std::isfinite(z_max)) return false;
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp(p[i] - z_max);
    sum += p[i];
  }
  float p_max = 0.0f;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = float(double(p[i]) / sum);
    p_max = std::max(p_max, p[i]);
  }

  // Rule step 3. min_p first: it needs no order, and only shrinks the prefix the others see.
  scratch.order.resize(size_t(vocab));
  int32_t* ids = scratch.order.data();
  // Clamped at p_max so that the top candidate survives even a (meaningless) min_p > 1.
  const float min_p_floor = row.min_p > 0.0f ? std::min(row.min_p * p_max, p_max) : -1.0f;
  int64_t count = 0;
  scratch.exp_count.fill(0);
  scratch.exp_mass.fill(0.0);
  for (int64_t i = 0; i < vocab; ++i) {
    if (p[i] >= min_p_floor) {
      ids[count++] = int32_t(i);
      const int e = exponent_of(p[i]);
      ++scratch.exp_count[size_t(e)];
      scratch.exp_mass[size_t(e)] += p[i];
    }
  }
  order_out = LazyOrder(ids, count, p);
  LazyOrder& order = order_out;
  int64_t keep = count;
  if (row.top_k > 0) keep = std::min<int64_t>(keep, row.top_k);
  if (keep < count || row.top_p < 1.0f)
    narrow(order, scratch, p, keep < count ? keep : 0, row.top_p < 1.0f ? double(row.top_p) : 0.0);
  double kept_mass = -1.0;
  if (row.top_p < 1.0f) {
    double cum = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      cum += p[order.at(i)];
      if (cum >= double(row.top_p)) {
        keep = i + 1;  // the first candidate is always kept
        break;
      }
    }
    kept_mass = cum;
  }
  if (kept_mass < 0.0) {
    kept_mass = 0.0;
    if (keep == count) {
      for (int64_t i = 0; i < count; ++i) kept_mass += p[ids[i]];  // id order: no sort needed
    } else {
      for (int64_t i = 0; i < keep; ++i) kept_mass += p[order.at(i)];
    }
  }
  kept.keep = keep;
  kept.mass = kept_mass;
  return true;
}

// Rule steps 1-3 for a row: false where it has no distribution (greedy, or no finite logit), and
// dist (when given, [vocab]) then gets a point mass on the argmax; else the kept candidates, and
// dist gets p / (kept mass) for them and 0 elsewhere.
bool kept_with_distribution(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                            LazyOrder& order, Kept& kept, float* dist) {
  FG_CHECK(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(), "sample: vocab " + std::to_string(vocab));
  const bool has = row.temperature > 0.0f && kept_candidates(logits, vocab, row, scratch, order, kept);
  if (dist == nullptr) return has;
  std::fill(dist, dist + vocab, 0.0f);
  if (!has) {
    dist[argmax(logits, vocab)] = 1.0f;
    return false;
  }
  // Each kept candidate's share depends on it alone, so a row that keeps every survivor (top_p 1,
  // no top_k below the survivors: the API's defaults) takes them as the ids stand, without the
  // sort the rule's order would cost (15 ms a row of 128k logits).
  const float* p = scratch.probs.data();
  for (int64_t i = 0; i < kept.keep; ++i) {
    const int32_t id = kept.keep == order.size() ? order.ids()[i] : order.at(i);
    dist[id] = float(double(p[id]) / kept.mass);
  }
  return true;
}

}  // namespace

int32_t cpu_sample_row(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                       float* dist) {
  LazyOrder order(nullptr, 0, nullptr);
  Kept kept;
  if (!kept_with_distribution(logits, vocab, row, scratch, order, kept, dist)) return argmax(logits, vocab);
  const float* p = scratch.probs.data();
  // Rule step 4: walk the kept candidates in order until the cumulative p exceeds u * kept mass.
  const double target = double(sample_uniform(row.seed, row.counter)) * kept.mass;
  if (kept.keep == order.size()) narrow(order, scratch, p, 0, target);  // unsorted yet: the walk needs the top
  double cum = 0.0;
  for (int64_t i = 0; i < kept.keep; ++i) {
    const int32_t id = order.at(i);
    cum += p[id];
    if (cum > target) return id;
  }
  return order.at(kept.keep - 1);
}

void cpu_sampling_distribution(const float* logits, int64_t vocab, const SamplingRow& row, CpuSampleScratch& scratch,
                               float* dist) {
  LazyOrder order(nullptr, 0, nullptr);
  Kept kept;
  (void)kept_with_distribution(logits, vocab, row, scratch, order, kept, dist);
}

void CpuBackend::mask_logits(Tensor& logits, const Tensor& rows, const Tensor& masks) {
  cpu::check_view("mask_logits", "logits", logits, DType::kF32, 2);
  cpu::check_view("mask_logits", "rows", rows, DType::kI32, 1);
  cpu::check_view("mask_logits", "masks", masks, DType::kI32, 2);
  const int64_t m = logits.shape[0], vocab = logits.shape[1], r = rows.shape[0];
  const int64_t words = (vocab + 31) / 32;
  cpu::check_dim("mask_logits", "masks", masks, 0, r);
  cpu::check_dim("mask_logits", "masks", masks, 1, words);
  const int32_t* idx = rows.ptr<int32_t>();
  for (int64_t i = 0; i < r; ++i) {
    FG_CHECK(idx[i] >= 0 && idx[i] < m,
             "mask_logits: row " + std::to_string(idx[i]) + " outside the logits " + logits.describe());
    float* row = cpu::row<float>(logits, idx[i]);
    const auto* bits = reinterpret_cast<const uint32_t*>(cpu::row<int32_t>(masks, i));
    for (int64_t t = 0; t < vocab; ++t)
      if (!((bits[t >> 5] >> (t & 31)) & 1u)) row[t] = -std::numeric_limits<float>::infinity();
  }
}

void CpuBackend::logprobs(const Tensor& logits, const Tensor& rows, const Tensor& tokens, int n, Tensor& stats,
                          Tensor& top_ids, Tensor& top_lp) {
  cpu::check_view("logprobs", "logits", logits, DType::kF32, 2);
  cpu::check_view("logprobs", "rows", rows, DType::kI32, 1);
  cpu::check_view("logprobs", "tokens", tokens, DType::kI32, 1);
  cpu::check_view("logprobs", "stats", stats, DType::kF32, 2);
  const int64_t m = logits.shape[0], vocab = logits.shape[1], r = rows.shape[0];
  FG_CHECK(n >= 0 && n <= kMaxTopLogprobs,
           "logprobs: n " + std::to_string(n) + " outside [0, " + std::to_string(kMaxTopLogprobs) + "]");
  cpu::check_dim("logprobs", "tokens", tokens, 0, m);
  cpu::check_dim("logprobs", "stats", stats, 0, r);
  cpu::check_dim("logprobs", "stats", stats, 1, 2);
  if (n > 0) {
    cpu::check_view("logprobs", "top_ids", top_ids, DType::kI32, 2);
    cpu::check_view("logprobs", "top_lp", top_lp, DType::kF32, 2);
    for (const Tensor* t : {&top_ids, &top_lp}) {
      cpu::check_dim("logprobs", "top", *t, 0, r);
      cpu::check_dim("logprobs", "top", *t, 1, n);
    }
  }
  std::vector<int32_t> ids(size_t(n > 0 ? vocab : 0));
  for (int64_t i = 0; i < r; ++i) {
    const int32_t ri = rows.ptr<int32_t>()[i * rows.stride[0]];
    FG_CHECK(ri >= 0 && ri < m, "logprobs: row " + std::to_string(ri) + " outside the logits " + logits.describe());
    const int32_t token = tokens.ptr<int32_t>()[ri * tokens.stride[0]];
    const float* row = cpu::row<float>(logits, ri);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < vocab; ++t) mx = std::max(mx, row[t]);
    double sum = 0.0;
    for (int64_t t = 0; t < vocab; ++t) sum += std::exp(double(row[t] - mx));
    const float lse = mx + float(std::log(sum));
    float* st = cpu::row<float>(stats, i);
    st[0] = token >= 0 && token < vocab ? row[token] - lse : std::numeric_limits<float>::quiet_NaN();
    st[1] = lse;
    if (n == 0) continue;
    for (int64_t t = 0; t < vocab; ++t) ids[size_t(t)] = int32_t(t);
    const int64_t k = std::min<int64_t>(n, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
    int32_t* out_ids = cpu::row<int32_t>(top_ids, i);
    float* out_lp = cpu::row<float>(top_lp, i);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    bool ended = false;  // from the first masked (-inf) entry on, none
    for (int j = 0; j < n; ++j) {
      ended = ended || j >= k || row[ids[size_t(j)]] == kNegInf;
      out_ids[j] = ended ? -1 : ids[size_t(j)];
      out_lp[j] = ended ? kNegInf : row[ids[size_t(j)]] - lse;
    }
  }
}

void CpuBackend::sample(const Tensor& logits, std::span<const SamplingRow> rows, Tensor& out, Tensor* dist) {
  cpu::check_view("sample", "logits", logits, DType::kF32, 2);
  cpu::check_view("sample", "out", out, DType::kI32, 1);
  const int64_t m = logits.shape[0], vocab = logits.shape[1];
  FG_CHECK(int64_t(rows.size()) == m,
           "sample: " + std::to_string(rows.size()) + " sampling rows for logits " + logits.describe());
  cpu::check_dim("sample", "out", out, 0, m);
  if (m == 0) return;
  FG_CHECK(vocab > 0, "sample: logits " + logits.describe() + " have no vocab");
  int64_t dists = 0;
  if (dist != nullptr) {
    cpu::check_view("sample", "dist", *dist, DType::kF32, 2);
    cpu::check_dim("sample", "dist", *dist, 1, vocab);
    dists = dist->shape[0];
    for (const SamplingRow& r : rows)
      FG_CHECK(r.dist_row < dists,
               "sample: distribution row " + std::to_string(r.dist_row) + " of " + std::to_string(dists));
  }
  int32_t* o = out.ptr<int32_t>();
  auto sample_rows = [&](int64_t i0, int64_t i1, int worker) {
    for (int64_t i = i0; i < i1; ++i) {
      const SamplingRow& r = rows[size_t(i)];
      // The row's distribution from the same kept set its token is drawn from.
      float* d = dist != nullptr && r.dist_row >= 0 ? cpu::row<float>(*dist, r.dist_row) : nullptr;
      o[i] = cpu_sample_row(cpu::row<float>(logits, i), vocab, r, sample_scratch_[size_t(worker)], d);
    }
  };
  if (m > 1 && (m * vocab >= kParallelSampleLogits || dists > 0)) {
    pool_.parallel_for(m, 1, sample_rows);
  } else {
    sample_rows(0, m, 0);
  }
}

}  // namespace fg
