// The CPU attention's vector kernels (cpu_attention_kernels.h), every set this CPU runs (portable,
// AVX2, AVX-512): the key transpose is exact; scores and the weighted sum of values match a
// double-precision reference, and each element is the same bits whatever else shares the call
// (row count, tile remainder, a key's lane); exp is within 2 ulp of the exact value down to the
// smallest normal float and 0 below it, for -inf and for NaN.
#include "backend/cpu/cpu_attention_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_weight_kernels.h"
#include "backend_test_util.h"

namespace fg {
namespace {

using cpu::AttentionKernels;
using cpu::kAttnStep;

std::vector<const AttentionKernels*> attention_sets() {
  std::vector<const AttentionKernels*> sets = {&cpu::generic_attention_kernels()};
  if (cpu::avx2_weight_kernels_supported()) sets.push_back(&cpu::avx2_attention_kernels());
  if (cpu::avx512_weight_kernels_supported()) sets.push_back(&cpu::avx512_attention_kernels());
  return sets;
}

TEST(CpuAttentionKernels, TheChosenSetIsTheWeightKernelsSet) {
  EXPECT_STREQ(cpu::attention_kernels().name, cpu::weight_kernels().name);
}

TEST(CpuAttentionKernels, TransposeIsExact) {
  for (const AttentionKernels* k : attention_sets()) {
    SCOPED_TRACE(k->name);
    for (int64_t dim : {8, 24, 40, 64, 100, 128}) {
      std::vector<float> rows = test::random_floats(size_t(kAttnStep * dim), uint32_t(dim));
      std::vector<const float*> ptrs;
      for (int64_t j = 0; j < kAttnStep; ++j) ptrs.push_back(rows.data() + j * dim);
      const int64_t ldk = kAttnStep + 16;
      std::vector<float> kt(size_t(dim * ldk), -1.0f);
      k->transpose(ptrs.data(), dim, kt.data(), ldk);
      for (int64_t d = 0; d < dim; ++d) {
        for (int64_t j = 0; j < kAttnStep; ++j) ASSERT_EQ(kt[size_t(d * ldk + j)], rows[size_t(j * dim + d)]) << d;
        for (int64_t j = kAttnStep; j < ldk; ++j) ASSERT_EQ(kt[size_t(d * ldk + j)], -1.0f) << "wrote past the keys";
      }
    }
  }
}

// Scores of `rows` query rows against kAttnStep keys (transposed), as the kernel set gives them.
std::vector<float> scores(const AttentionKernels& k, const std::vector<float>& q, int rows,
                          const std::vector<float>& kt, int64_t dim) {
  std::vector<float> s(size_t(rows * kAttnStep));
  k.scores(q.data(), dim, rows, kt.data(), kAttnStep, dim, kAttnStep, s.data(), kAttnStep);
  return s;
}

TEST(CpuAttentionKernels, ScoresMatchDoublesAndDoNotDependOnTheCall) {
  for (const AttentionKernels* k : attention_sets()) {
    SCOPED_TRACE(k->name);
    for (int64_t dim : {8, 40, 64, 128}) {
      const int rows = 7;  // a tile of four and a remainder of three
      const std::vector<float> q = test::random_floats(size_t(rows * dim), 11);
      const std::vector<float> kt = test::random_floats(size_t(dim * kAttnStep), 12);
      const std::vector<float> all = scores(*k, q, rows, kt, dim);
      for (int r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < kAttnStep; ++j) {
          double want = 0;
          for (int64_t d = 0; d < dim; ++d) want += double(q[size_t(r * dim + d)]) * kt[size_t(d * kAttnStep + j)];
          ASSERT_TRUE(test::near(all[size_t(r * kAttnStep + j)], want, 1e-5, 1e-5, "score", r * kAttnStep + j));
        }
        // The row alone (a one-row tile) gives the same bits.
        const std::vector<float> one(q.begin() + r * dim, q.begin() + (r + 1) * dim);
        const std::vector<float> alone = scores(*k, one, 1, kt, dim);
        ASSERT_EQ(0, std::memcmp(alone.data(), all.data() + r * kAttnStep, kAttnStep * sizeof(float))) << "row " << r;
      }
      // A key in another lane (the keys rotated by 5) gives the same bits.
      std::vector<float> rotated(kt.size());
      for (int64_t d = 0; d < dim; ++d)
        for (int64_t j = 0; j < kAttnStep; ++j)
          rotated[size_t(d * kAttnStep + (j + 5) % kAttnStep)] = kt[size_t(d * kAttnStep + j)];
      const std::vector<float> moved = scores(*k, q, rows, rotated, dim);
      for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < kAttnStep; ++j)
          ASSERT_EQ(moved[size_t(r * kAttnStep + (j + 5) % kAttnStep)], all[size_t(r * kAttnStep + j)]);
    }
  }
}

TEST(CpuAttentionKernels, AccumulateMatchesDoublesAndDoesNotDependOnTheCall) {
  for (const AttentionKernels* k : attention_sets()) {
    SCOPED_TRACE(k->name);
    const int64_t dim = 2 * kAttnStep, keys = 37;
    const int rows = 6;
    const std::vector<float> p = test::random_floats(size_t(rows * keys), 21, 0.0f, 1.0f);
    const std::vector<float> v = test::random_floats(size_t(keys * dim), 22);
    std::vector<const float*> v_rows;
    for (int64_t j = 0; j < keys; ++j) v_rows.push_back(v.data() + j * dim);
    std::vector<float> acc = test::random_floats(size_t(rows * dim), 23);
    const std::vector<float> start = acc;
    // In two calls (keys [0, 20) then [20, 37)): a call boundary changes nothing either.
    k->accumulate(p.data(), keys, rows, v_rows.data(), 20, dim, acc.data(), dim);
    k->accumulate(p.data() + 20, keys, rows, v_rows.data() + 20, keys - 20, dim, acc.data(), dim);
    for (int r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < dim; ++c) {
        double want = start[size_t(r * dim + c)];
        for (int64_t j = 0; j < keys; ++j) want += double(p[size_t(r * keys + j)]) * v[size_t(j * dim + c)];
        ASSERT_TRUE(test::near(acc[size_t(r * dim + c)], want, 1e-5, 1e-5, "acc", r * dim + c));
      }
      std::vector<float> one(start.begin() + r * dim, start.begin() + (r + 1) * dim);
      k->accumulate(p.data() + r * keys, keys, 1, v_rows.data(), keys, dim, one.data(), dim);
      ASSERT_EQ(0, std::memcmp(one.data(), acc.data() + r * dim, dim * sizeof(float))) << "row " << r;
    }
  }
}

// Distance in units in the last place between a float and the exact value.
double ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(float(want)) - 23);
  return std::fabs(double(got) - want) / ulp;
}

TEST(CpuAttentionKernels, ExpIsWithinTwoUlpAndZeroBelowTheNormals) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const AttentionKernels* k : attention_sets()) {
    SCOPED_TRACE(k->name);
    // Every lane position and the scalar-free tail: n = 1 .. 40 around a shift m.
    const float m = 3.25f;
    std::vector<float> x;
    for (int i = 0; i <= 200000; ++i) x.push_back(m - 87.3f * float(i) / 200000.0f);
    std::vector<float> e = x;
    k->exp_shifted(e.data(), int64_t(e.size()), m);
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(e[i], std::exp(double(x[i]) - double(m))));
    EXPECT_LE(worst, 2.0);
    for (int n = 1; n <= 40; ++n) {
      std::vector<float> part(x.begin(), x.begin() + n);
      k->exp_shifted(part.data(), n, m);
      for (int i = 0; i < n; ++i) ASSERT_EQ(part[size_t(i)], e[size_t(i)]) << "n " << n << " lane " << i;
    }
    std::vector<float> edge = {m, m - 87.33f, m - 88.0f, m - 200.0f, -kInf, std::nanf("")};
    k->exp_shifted(edge.data(), int64_t(edge.size()), m);
    EXPECT_EQ(edge[0], 1.0f);
    EXPECT_GT(edge[1], 0.0f);
    EXPECT_GE(edge[1], std::numeric_limits<float>::min());
    for (size_t i = 2; i < edge.size(); ++i) EXPECT_EQ(edge[i], 0.0f) << i;
  }
}

}  // namespace
}  // namespace fg
