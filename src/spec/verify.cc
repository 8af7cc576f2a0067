// verify_greedy, verify_sampled (see verify.h).
#include "spec/verify.h"

#include <algorithm>

#include "backend/sampling_rule.h"
#include "core/status.h"

namespace fg::spec {

namespace {

// Streams of random draws kept apart from the sampler's own (seed, position) stream.
constexpr uint64_t kAcceptStream = 0x5bd1e9955bd1e995ull;
constexpr uint64_t kResidualStream = 0x27d4eb2f165667c5ull;

// A token from weights w (not necessarily normalized; at least one positive) with draw u in [0, 1).
int32_t draw(const std::vector<double>& w, double total, float u) {
  const double target = double(u) * total;
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0) continue;
    cum += w[i];
    last = int32_t(i);
    if (cum > target) return int32_t(i);
  }
  return last;  // rounding left the walk short: the last candidate
}

}  // namespace

Verdict verify_greedy(std::span<const int32_t> draft, std::span<const int32_t> choices) {
  FG_CHECK(choices.size() == draft.size() + 1, "verify_greedy: one choice per draft and one more");
  Verdict v;
  size_t i = 0;
  while (i < draft.size() && draft[i] == choices[i]) {
    v.tokens.push_back(draft[i]);
    ++i;
  }
  v.accepted = int(i);
  v.tokens.push_back(choices[i]);
  return v;
}

Verdict verify_sampled(std::span<const int32_t> draft, std::span<const float* const> p, std::span<const float* const> q,
                       int64_t vocab, uint64_t seed, uint64_t position) {
  const size_t k = draft.size();
  FG_CHECK(p.size() == k + 1 && (q.empty() || q.size() == k) && vocab > 0,
           "verify_sampled: k + 1 target rows and k (or no) proposer rows");
  Verdict v;
  std::vector<double> w(static_cast<size_t>(vocab));
  for (size_t i = 0; i <= k; ++i) {
    const uint64_t pos = position + i;
    const float* pi = p[i];
    if (i == k) {  // every draft accepted: the bonus token comes from p_k itself
      double total = 0.0;
      for (int64_t t = 0; t < vocab; ++t) total += (w[size_t(t)] = pi[t]);
      v.tokens.push_back(draw(w, total, sample_uniform(seed ^ kResidualStream, pos)));
      break;
    }
    const int32_t d = draft[i];
    FG_CHECK(d >= 0 && d < vocab, "verify_sampled: draft token outside the vocabulary");
    const double qd = q.empty() ? 1.0 : double(q[i][d]);
    const double pd = double(pi[d]);
    const double u = double(sample_uniform(seed ^ kAcceptStream, pos));
    if (qd > 0.0 && u * qd < pd) {  // accept with probability min(1, p/q)
      v.tokens.push_back(d);
      ++v.accepted;
      continue;
    }
    // Rejected: a sample of norm(max(p - q, 0)). It has mass whenever p != q; if rounding leaves
    // none (p == q where the draft was rejected, probability ~0), p itself is the fallback.
    double total = 0.0;
    for (int64_t t = 0; t < vocab; ++t) {
      const double qt = q.empty() ? (t == d ? 1.0 : 0.0) : double(q[i][t]);
      total += (w[size_t(t)] = std::max(0.0, double(pi[t]) - qt));
    }
    if (!(total > 0.0)) {
      total = 0.0;
      for (int64_t t = 0; t < vocab; ++t) total += (w[size_t(t)] = pi[t]);
    }
    v.tokens.push_back(draw(w, total, sample_uniform(seed ^ kResidualStream, pos)));
    break;
  }
  return v;
}

}  // namespace fg::spec
