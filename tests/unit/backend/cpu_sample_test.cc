// The CPU backend's sampling against backend/sampling_rule.h: greedy ties, determinism in
// (seed, counter) whatever shares the batch, top_k / top_p / min_p filtering, a statistical check
// of the sampled frequencies against the filtered distribution, and an exact comparison with a
// naive full-sort implementation of the rule written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/sampling_rule.h"
#include "backend_test_util.h"

namespace fg {
namespace {

// Samples one row of logits through the backend op.
int32_t sample_one(Backend& be, std::vector<float>& logits, const SamplingRow& row) {
  Tensor l = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {1, int64_t(logits.size())});
  std::vector<int32_t> out(1, -1);
  Tensor o = test::view_of(out);
  be.sample(l, std::span<const SamplingRow>(&row, 1), o);
  return out[0];
}

// The rule's probabilities, computed the way the backend documents (f32 terms, double sum).
std::vector<float> rule_probs(const std::vector<float>& logits, float temperature) {
  std::vector<float> p(logits.size());
  float z_max = -INFINITY;
  for (size_t i = 0; i < p.size(); ++i) z_max = std::max(z_max, p[i] = logits[i] / temperature);
  double sum = 0.0;
  for (float& x : p) sum += (x = std::exp(x - z_max));
  for (float& x : p) x = float(double(x) / sum);
  return p;
}

// The kept candidates of rule step 3, in order, by a full sort.
std::vector<int32_t> naive_kept(const std::vector<float>& p, const SamplingRow& row) {
  std::vector<int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  if (row.top_k > 0 && size_t(row.top_k) < ids.size()) ids.resize(size_t(row.top_k));
  if (row.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += p[size_t(ids[i])];
      if (cum >= double(row.top_p)) {
        ids.resize(i + 1);
        break;
      }
    }
  }
  if (row.min_p > 0.0f) {
    const float floor = row.min_p * p[size_t(ids[0])];
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t id) { return p[size_t(id)] < floor; }), ids.end());
  }
  return ids;
}

int32_t naive_sample(const std::vector<float>& logits, const SamplingRow& row) {
  const std::vector<float> p = rule_probs(logits, row.temperature);
  const std::vector<int32_t> kept = naive_kept(p, row);
  double mass = 0.0;
  for (int32_t id : kept) mass += p[size_t(id)];
  const double target = double(sample_uniform(row.seed, row.counter)) * mass;
  double cum = 0.0;
  for (int32_t id : kept)
    if ((cum += p[size_t(id)]) > target) return id;
  return kept.back();
}

TEST(CpuSample, GreedyTakesTheLowestIdOnTies) {
  auto be = make_cpu_backend();
  std::vector<float> logits = test::random_floats(97, 1);
  logits[41] = 5.0f;
  logits[17] = 5.0f;
  logits[80] = 4.999f;
  for (float t : {0.0f, -1.0f}) {
    SamplingRow row;
    row.temperature = t;
    row.seed = 3;
    EXPECT_EQ(sample_one(*be, logits, row), 17);
  }
}

// logprobs: the log-softmax of the selected rows, the value at each row's token, and the top n
// by value (lower id on ties) that stop at the first masked token.
TEST(CpuSample, LogprobsAreTheLogSoftmaxAndItsTopEntries) {
  auto be = make_cpu_backend();
  const int64_t vocab = 6;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {1.0f,  3.0f, -kInf, 3.0f,  0.5f, 2.0f,    // row 0: a tie at 3 (ids 1 and 3)
                               -kInf, 0.0f, -kInf, -kInf, 1.0f, -kInf};  // row 1: two tokens left
  Tensor l = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {2, vocab});
  std::vector<int32_t> rows = {1, 0}, tokens = {5, 4};  // tokens: one per logits row
  const int n = 4;
  std::vector<float> stats(4), top_lp(8);
  std::vector<int32_t> top_ids(8);
  Tensor rt = test::view_of(rows), tt = test::view_of(tokens);
  Tensor st = Tensor::contiguous(stats.data(), DType::kF32, Device::kCpu, {2, 2});
  Tensor it = Tensor::contiguous(top_ids.data(), DType::kI32, Device::kCpu, {2, n});
  Tensor lt = Tensor::contiguous(top_lp.data(), DType::kF32, Device::kCpu, {2, n});
  be->logprobs(l, rt, tt, n, st, it, lt);
  // Selected row 0 is logits row 1: log(e^0 + e^1), its token 4 (logit 1).
  const double lse1 = std::log(std::exp(0.0) + std::exp(1.0));
  EXPECT_NEAR(stats[1], lse1, 1e-6);
  EXPECT_NEAR(stats[0], 1.0 - lse1, 1e-6);
  EXPECT_EQ(top_ids[0], 4);
  EXPECT_EQ(top_ids[1], 1);
  EXPECT_EQ(top_ids[2], -1);
  EXPECT_EQ(top_ids[3], -1);
  EXPECT_TRUE(std::isinf(top_lp[2]) && top_lp[2] < 0);
  EXPECT_NEAR(top_lp[1], 0.0 - lse1, 1e-6);
  // Selected row 1 is logits row 0, its token 5 (logit 2); the tie lists id 1 before id 3.
  double z = 0.0;
  for (int t = 0; t < 6; ++t) z += std::exp(double(logits[size_t(t)]));
  EXPECT_NEAR(stats[3], std::log(z), 1e-6);
  EXPECT_NEAR(stats[2], 2.0 - std::log(z), 1e-6);
  EXPECT_EQ(top_ids[4], 1);
  EXPECT_EQ(top_ids[5], 3);
  EXPECT_EQ(top_ids[6], 5);
  EXPECT_EQ(top_ids[7], 0);
  EXPECT_EQ(top_lp[4], top_lp[5]);
  // Probabilities of the listed tokens add up to at most 1.
  double mass = 0.0;
  for (int j = 4; j < 8; ++j) mass += std::exp(double(top_lp[size_t(j)]));
  EXPECT_LT(mass, 1.0);
  EXPECT_GT(mass, 0.9);
  // A token outside the vocabulary (a sampler bug the caller reports afterwards) reads nothing.
  tokens[1] = int32_t(vocab);
  be->logprobs(l, rt, tt, 0, st, it, lt);
  EXPECT_TRUE(std::isnan(stats[0]));
  EXPECT_NEAR(stats[1], lse1, 1e-6);
}

TEST(CpuSample, SameSeedAndCounterGiveTheSameTokenInAnyBatch) {
  auto be = make_cpu_backend();
  const int64_t vocab = 1001;
  std::vector<float> logits = test::random_floats(size_t(4 * vocab), 2, -2.0f, 2.0f);
  std::vector<SamplingRow> rows(4);
  for (int i = 0; i < 4; ++i) {
    rows[size_t(i)].temperature = 0.8f + 0.1f * float(i);
    rows[size_t(i)].top_k = i == 1 ? 50 : 0;
    rows[size_t(i)].top_p = i == 2 ? 0.9f : 1.0f;
    rows[size_t(i)].min_p = i == 3 ? 0.05f : 0.0f;
    rows[size_t(i)].seed = 1000 + uint64_t(i);
    rows[size_t(i)].counter = 7;
  }
  // Logits rows padded to a larger stride, as a gather from a bigger buffer would leave them.
  test::PaddedF32 strided({4, vocab}, 13, 3);
  strided.for_each([&](int64_t i, int64_t j, int64_t) { strided.at(i, j) = logits[size_t(i * vocab + j)]; });
  std::vector<int32_t> out(4, -1);
  Tensor o = test::view_of(out);
  be->sample(strided.view, rows, o);
  for (int i = 0; i < 4; ++i) {
    std::vector<float> one(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    EXPECT_EQ(out[size_t(i)], sample_one(*be, one, rows[size_t(i)])) << "row " << i;
    EXPECT_EQ(out[size_t(i)], naive_sample(one, rows[size_t(i)])) << "row " << i;
  }
  std::vector<int32_t> again(4, -1);
  Tensor a = test::view_of(again);
  be->sample(strided.view, rows, a);
  EXPECT_EQ(out, again);
}

TEST(CpuSample, DifferentCountersVary) {
  auto be = make_cpu_backend();
  std::vector<float> logits = test::random_floats(64, 4, -1.0f, 1.0f);
  std::set<int32_t> seen;
  SamplingRow row;
  row.temperature = 1.0f;
  row.seed = 42;
  for (uint64_t c = 0; c < 64; ++c) {
    row.counter = c;
    seen.insert(sample_one(*be, logits, row));
  }
  EXPECT_GE(seen.size(), 16u);
}

TEST(CpuSample, TopKOneAndTinyTopPAreGreedy) {
  auto be = make_cpu_backend();
  std::vector<float> logits = test::random_floats(5003, 5, -3.0f, 3.0f);
  SamplingRow greedy;
  const int32_t best = sample_one(*be, logits, greedy);
  for (uint64_t c = 0; c < 50; ++c) {
    SamplingRow k1;
    k1.temperature = 1.5f;
    k1.top_k = 1;
    k1.seed = 9;
    k1.counter = c;
    ASSERT_EQ(sample_one(*be, logits, k1), best);
    SamplingRow p0 = k1;
    p0.top_k = 0;
    p0.top_p = 1e-6f;
    ASSERT_EQ(sample_one(*be, logits, p0), best);
  }
}

TEST(CpuSample, FiltersKeepOnlyTheirCandidates) {
  auto be = make_cpu_backend();
  // Probabilities at temperature 1: ids 3, 0, 2, 1 in that order, then two tiny ones.
  std::vector<float> logits = {1.0f, 0.5f, 0.8f, 1.6f, -4.0f, -4.5f};
  const std::vector<float> p = rule_probs(logits, 1.0f);
  struct Case {
    int top_k;
    float top_p, min_p;
    std::set<int32_t> allowed;
  };
  const double p3 = p[3], p0 = p[0];
  const float top_p_two = float(p3 + 0.5 * p0);  // reached by ids {3, 0}, not by 3 alone
  ASSERT_GT(double(top_p_two), p3);
  ASSERT_LE(double(top_p_two), p3 + p0);
  for (const Case& c : {Case{2, 1.0f, 0.0f, {3, 0}}, Case{0, top_p_two, 0.0f, {3, 0}},
                        Case{0, 1.0f, float(p[1] / p[3]) * 1.01f, {3, 0, 2}}, Case{3, 1.0f, 0.5f, {3, 0}},
                        Case{3, 1.0f, 0.4f, {3, 0, 2}}}) {
    std::set<int32_t> seen;
    for (uint64_t counter = 0; counter < 400; ++counter) {
      SamplingRow row;
      row.temperature = 1.0f;
      row.top_k = c.top_k;
      row.top_p = c.top_p;
      row.min_p = c.min_p;
      row.seed = 11;
      row.counter = counter;
      seen.insert(sample_one(*be, logits, row));
    }
    EXPECT_EQ(seen, c.allowed) << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
  }
  // The top candidate survives any filter setting.
  SamplingRow extreme;
  extreme.temperature = 1.0f;
  extreme.min_p = 2.0f;
  extreme.top_p = 0.0f;
  EXPECT_EQ(sample_one(*be, logits, extreme), 3);
}

// Frequencies over many counters follow the filtered, renormalised distribution. sample_uniform is
// a fixed function, so this is deterministic; the bound (6 standard deviations) would also hold
// for any other seed with overwhelming probability.
TEST(CpuSample, FrequenciesMatchTheFilteredDistribution) {
  auto be = make_cpu_backend();
  std::vector<float> logits = {0.3f, 1.2f, -0.5f, 0.9f, 0.0f, 2.0f, -1.0f, 0.6f};
  SamplingRow row;
  row.temperature = 0.7f;
  row.top_k = 6;
  row.top_p = 0.95f;
  row.seed = 2024;
  const std::vector<float> p = rule_probs(logits, row.temperature);
  const std::vector<int32_t> kept = naive_kept(p, row);
  ASSERT_GE(kept.size(), 3u);  // the filters leave a real choice
  double mass = 0.0;
  for (int32_t id : kept) mass += p[size_t(id)];
  const int n = 40000;
  std::vector<int> count(logits.size(), 0);
  for (int c = 0; c < n; ++c) {
    row.counter = uint64_t(c);
    ++count[size_t(sample_one(*be, logits, row))];
  }
  for (size_t id = 0; id < logits.size(); ++id) {
    const bool is_kept = std::find(kept.begin(), kept.end(), int32_t(id)) != kept.end();
    const double want = is_kept ? p[id] / mass : 0.0;
    const double got = double(count[id]) / n;
    EXPECT_NEAR(got, want, 6.0 * std::sqrt(want * (1.0 - want) / n) + 1e-9) << "token " << id;
  }
}

TEST(CpuSample, LargeVocabMatchesNaiveRuleExactly) {
  auto be = make_cpu_backend();
  const int64_t vocab = 32003;
  std::vector<float> logits = test::random_floats(size_t(vocab), 6, -4.0f, 4.0f);
  logits[123] = logits[456] = 6.0f;  // a tie at the top
  CpuSampleScratch scratch;
  struct Case {
    float t;
    int top_k;
    float top_p, min_p;
  };
  for (const Case& c : {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.7f, 40, 1.0f, 0.0f}, Case{1.0f, 0, 0.9f, 0.0f},
                        Case{1.3f, 0, 1.0f, 0.1f}, Case{0.9f, 500, 0.8f, 0.02f}}) {
    for (uint64_t counter = 0; counter < 24; ++counter) {
      SamplingRow row{c.t, c.top_k, c.top_p, c.min_p, 77, counter};
      ASSERT_EQ(cpu_sample_row(logits.data(), vocab, row, scratch), naive_sample(logits, row))
          << "t " << c.t << " top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p << " counter "
          << counter;
    }
  }
}

// Rows shaped like a language model's (a few dozen logits far above a broad bulk): the candidates
// of the highest exponents of p are sorted first (narrow()), and a top-p boundary, a top-k cut or
// the walk may fall inside the front or past it. Every draw is still the naive rule's, and the
// distribution is p / kept mass on exactly the kept candidates.
TEST(CpuSample, PeakedRowsMatchNaiveRuleExactly) {
  const int64_t vocab = 50021;
  std::vector<float> logits = test::random_floats(size_t(vocab), 8, -3.0f, 3.0f);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<float> high(7.0f, 12.0f);
  for (int i = 0; i < 40; ++i) logits[size_t(pick(rng))] = high(rng);
  logits[size_t(pick(rng))] = 12.5f;
  logits[7] = logits[9] = 12.5f;  // ties at the top: lower id first
  CpuSampleScratch scratch;
  std::vector<float> dist(static_cast<size_t>(vocab));
  struct Case {
    float t;
    int top_k;
    float top_p, min_p;
  };
  for (const Case& c :
       {Case{1.0f, 0, 1.0f, 0.0f}, Case{1.0f, 1, 1.0f, 0.0f}, Case{1.0f, 3, 1.0f, 0.0f}, Case{0.8f, 50, 1.0f, 0.0f},
        Case{1.0f, 0, 0.5f, 0.0f}, Case{1.0f, 0, 0.9f, 0.0f}, Case{1.0f, 0, 0.999f, 0.0f}, Case{2.0f, 0, 0.95f, 0.0f},
        Case{1.0f, 20, 0.9f, 0.05f}, Case{1.5f, 0, 1.0f, 0.001f}}) {
    SCOPED_TRACE("t " + std::to_string(c.t) + " top_k " + std::to_string(c.top_k) + " top_p " +
                 std::to_string(c.top_p) + " min_p " + std::to_string(c.min_p));
    for (uint64_t counter = 0; counter < 32; ++counter) {
      SamplingRow row{c.t, c.top_k, c.top_p, c.min_p, 91, counter};
      ASSERT_EQ(cpu_sample_row(logits.data(), vocab, row, scratch), naive_sample(logits, row)) << counter;
    }
    SamplingRow row{c.t, c.top_k, c.top_p, c.min_p, 91, 0};
    cpu_sampling_distribution(logits.data(), vocab, row, scratch, dist.data());
    const std::vector<float> p = rule_probs(logits, c.t);
    const std::vector<int32_t> kept = naive_kept(p, row);
    double mass = 0.0;
    for (int32_t id : kept) mass += p[size_t(id)];
    std::vector<float> want(size_t(vocab), 0.0f);
    for (int32_t id : kept) want[size_t(id)] = float(double(p[size_t(id)]) / mass);
    int64_t differ = 0;
    for (int64_t i = 0; i < vocab; ++i) differ += (want[size_t(i)] == 0.0f) != (dist[size_t(i)] == 0.0f);
    EXPECT_EQ(differ, 0) << "the distribution's support is the kept set";
    for (int32_t id : kept) EXPECT_NEAR(dist[size_t(id)], want[size_t(id)], 1e-6f * want[size_t(id)] + 1e-12f);
  }
}

// cpu_sampling_distribution is the distribution cpu_sample_row draws from: zero exactly where the
// rule never picks, and the draws' frequencies follow it.
TEST(CpuSample, DistributionIsWhatTheRowDrawsFrom) {
  const int64_t vocab = 9;
  std::vector<float> logits = test::random_floats(size_t(vocab), 17, -2.0f, 2.0f);
  CpuSampleScratch scratch;
  std::vector<float> dist(static_cast<size_t>(vocab));
  for (const SamplingRow base : {SamplingRow{0.8f, 0, 1.0f, 0.0f, 5, 0}, SamplingRow{1.0f, 4, 1.0f, 0.0f, 5, 0},
                                 SamplingRow{1.2f, 0, 0.7f, 0.0f, 5, 0}, SamplingRow{1.0f, 0, 1.0f, 0.3f, 5, 0}}) {
    cpu_sampling_distribution(logits.data(), vocab, base, scratch, dist.data());
    double sum = 0.0;
    for (float d : dist) sum += d;
    EXPECT_NEAR(sum, 1.0, 1e-6);
    const int n = 40000;
    std::vector<int> count(static_cast<size_t>(vocab), 0);
    for (int i = 0; i < n; ++i) {
      SamplingRow row = base;
      row.counter = uint64_t(i);
      ++count[size_t(cpu_sample_row(logits.data(), vocab, row, scratch))];
    }
    for (int64_t id = 0; id < vocab; ++id) {
      const double want = dist[size_t(id)], got = double(count[size_t(id)]) / n;
      if (want == 0.0) {
        EXPECT_EQ(count[size_t(id)], 0) << "token " << id << " drawn outside the distribution";
      }
      EXPECT_NEAR(got, want, 6.0 * std::sqrt(want * (1.0 - want) / n) + 1e-9) << "token " << id;
    }
  }
  SamplingRow greedy{0.0f, 0, 1.0f, 0.0f, 5, 0};
  cpu_sampling_distribution(logits.data(), vocab, greedy, scratch, dist.data());
  EXPECT_EQ(dist[size_t(cpu_sample_row(logits.data(), vocab, greedy, scratch))], 1.0f) << "greedy: a point mass";
}

// Backend::sample with distributions: the rows that name a row of `dist` get exactly
// cpu_sampling_distribution's (a point mass for the greedy one), the other rows of `dist` stay as
// they were, and the tokens are the ones sampled without distributions.
TEST(CpuSample, SampleWritesTheAskedRowsDistributions) {
  auto be = make_cpu_backend();
  const int64_t vocab = 777;
  std::vector<float> logits = test::random_floats(size_t(4 * vocab), 5, -3.0f, 3.0f);
  std::vector<SamplingRow> rows(4);
  rows[0] = SamplingRow{{1.0f, 0, 0.9f, 0.0f}, 3, 1};
  rows[1] = SamplingRow{{0.7f, 20, 1.0f, 0.0f}, 3, 2};
  rows[2] = SamplingRow{{1.0f, 0, 1.0f, 0.0f}, 3, 3};  // asks for no distribution
  rows[3] = SamplingRow{};                             // greedy
  rows[0].dist_row = 2;
  rows[1].dist_row = 0;
  rows[3].dist_row = 1;
  Tensor l = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {4, vocab});
  std::vector<float> dist(size_t(4 * vocab), -7.0f);  // row 3 of dist is nobody's
  Tensor d = Tensor::contiguous(dist.data(), DType::kF32, Device::kCpu, {4, vocab});
  std::vector<int32_t> with(4, -1), without(4, -1);
  Tensor w = test::view_of(with), wo = test::view_of(without);
  be->sample(l, rows, w, &d);
  be->sample(l, rows, wo);
  EXPECT_EQ(with, without);
  CpuSampleScratch scratch;
  std::vector<float> expect(static_cast<size_t>(vocab));
  for (int i : {0, 1, 3}) {
    cpu_sampling_distribution(logits.data() + i * vocab, vocab, rows[size_t(i)], scratch, expect.data());
    const float* got = dist.data() + rows[size_t(i)].dist_row * vocab;
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), got)) << "row " << i;
    EXPECT_GT(got[with[size_t(i)]], 0.0f) << "row " << i << "'s token is outside its distribution";
  }
  EXPECT_EQ(dist[size_t(vocab) + size_t(with[3])], 1.0f);
  EXPECT_TRUE(std::all_of(dist.begin() + 3 * vocab, dist.end(), [](float x) { return x == -7.0f; }));
  // A row naming a distribution row past the block is refused.
  rows[2].dist_row = 4;
  EXPECT_DEATH(be->sample(l, rows, w, &d), "distribution row 4 of 4");
}

TEST(CpuSample, MaskLogitsClearsExactlyTheMaskedTokens) {
  auto be = make_cpu_backend();
  const int64_t m = 3, vocab = 70;  // 3 mask words, the last one partial
  std::vector<float> logits = test::random_floats(size_t(m * vocab), 3, -2.0f, 2.0f);
  const std::vector<float> before = logits;
  std::vector<int32_t> rows = {2, 0};
  std::vector<uint32_t> masks = {0x0000000fu, 0xffffffffu, 0x1u, 0u, 0u, 0x20u};
  Tensor lt = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {m, vocab});
  Tensor rt = Tensor::contiguous(rows.data(), DType::kI32, Device::kCpu, {2});
  Tensor mt = Tensor::contiguous(masks.data(), DType::kI32, Device::kCpu, {2, 3});
  be->mask_logits(lt, rt, mt);
  for (int64_t t = 0; t < vocab; ++t) {
    const bool row2 = t < 4 || (t >= 32 && t < 64) || t == 64;  // masks[0..2] for row 2
    const bool row0 = t == 69;                                  // masks[3..5] for row 0: bit 5 of word 2
    EXPECT_EQ(logits[size_t(2 * vocab + t)], row2 ? before[size_t(2 * vocab + t)] : -INFINITY) << t;
    EXPECT_EQ(logits[size_t(t)], row0 ? before[size_t(t)] : -INFINITY) << t;
    EXPECT_EQ(logits[size_t(vocab + t)], before[size_t(vocab + t)]) << "row 1 is not masked";
  }
}

}  // namespace
}  // namespace fg
