// The CPU reference backend's ops for the newer families against naive double-precision versions
// written here: gelu_tanh_mul, scale, softcap, rope with per-token tables (LongRoPE), and the
// mixture-of-experts ops (routing: softmax, top-k with ties, renormalization, the sorted order;
// the grouped GEMM with and without gathering; the combine), plus a whole MoE MLP against a
// token-by-token loop over its chosen experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"

namespace fg {
namespace {

using test::PaddedF32;

class CpuFamilyOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

double gelu_tanh(double g) {
  return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

TEST_F(CpuFamilyOps, GeluTanhMulStrided) {
  PaddedF32 x({13, 2 * 37}, 3, 1);
  for (int64_t i = 0; i < 13; ++i)
    for (int64_t c = 0; c < 74; ++c) x.at(i, c) *= 4.0f;  // reach the tanh's saturation
  PaddedF32 out({13, 37}, 5, 2);
  out.poison();
  be->gelu_tanh_mul(x.view, out.view);
  for (int64_t i = 0; i < 13; ++i)
    for (int64_t c = 0; c < 37; ++c) {
      const double want = gelu_tanh(x.at(i, c)) * x.at(i, 37 + c);
      EXPECT_NEAR(out.at(i, c), want, 1e-6 * (1.0 + std::fabs(want))) << i << "," << c;
    }
  EXPECT_TRUE(out.untouched_outside());
}

TEST_F(CpuFamilyOps, ScaleAndSoftcapInPlace) {
  PaddedF32 x({9, 41}, 2, 3);
  PaddedF32 orig = x;
  be->scale(x.view, 2.5f);
  x.for_each([&](int64_t i, int64_t j, int64_t) { EXPECT_EQ(x.at(i, j), orig.at(i, j) * 2.5f); });
  EXPECT_TRUE(x.untouched_outside());
  PaddedF32 y({9, 41}, 2, 4);
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t c = 0; c < 41; ++c) y.at(i, c) *= 50.0f;
  PaddedF32 before = y;
  be->softcap(y.view, 7.0f);
  y.for_each([&](int64_t i, int64_t j, int64_t) {
    const double want = 7.0 * std::tanh(double(before.at(i, j)) / 7.0);
    EXPECT_NEAR(y.at(i, j), want, 2e-6);
    EXPECT_LE(std::fabs(y.at(i, j)), 7.0f);
  });
}

TEST_F(CpuFamilyOps, RopePerTokenTables) {
  // Two tables; tokens alternate between them. Each token must be rotated exactly as with a
  // one-table call of its own table.
  const int n = 6, heads = 2, dim = 16, rot = 8, half = rot / 2;
  std::vector<float> tables(2 * half);
  for (int i = 0; i < half; ++i) {
    tables[size_t(i)] = std::pow(100.0f, -float(i) / half);
    tables[size_t(half + i)] = tables[size_t(i)] / 3.0f;
  }
  std::vector<int32_t> pos = {0, 5, 17, 33, 2, 90}, which = {0, 1, 1, 0, 1, 0};
  std::vector<float> q = test::random_floats(n * heads * dim, 7), k = test::random_floats(n * dim, 8);
  std::vector<float> q2 = q, k2 = k;
  RopeArgs args;
  args.positions = test::view_of(pos);
  args.inv_freq = Tensor::contiguous(tables.data(), DType::kF32, Device::kCpu, {2, half});
  args.per_token_table = test::view_of(which);
  args.rotary_dim = rot;
  args.attention_scaling = 1.25f;
  Tensor qt = Tensor::contiguous(q.data(), DType::kF32, Device::kCpu, {n, heads, dim});
  Tensor kt = Tensor::contiguous(k.data(), DType::kF32, Device::kCpu, {n, 1, dim});
  be->rope(qt, kt, args);
  for (int t = 0; t < n; ++t) {
    std::vector<int32_t> p1 = {pos[size_t(t)]};
    RopeArgs one;
    one.positions = test::view_of(p1);
    one.inv_freq = Tensor::contiguous(tables.data() + which[size_t(t)] * half, DType::kF32, Device::kCpu, {half});
    one.rotary_dim = rot;
    one.attention_scaling = 1.25f;
    Tensor q1 = Tensor::contiguous(q2.data() + t * heads * dim, DType::kF32, Device::kCpu, {1, heads, dim});
    Tensor k1 = Tensor::contiguous(k2.data() + t * dim, DType::kF32, Device::kCpu, {1, 1, dim});
    be->rope(q1, k1, one);
  }
  EXPECT_EQ(q, q2);
  EXPECT_EQ(k, k2);
}

// A routing over host vectors the test owns.
struct HostRouting {
  std::vector<int32_t> ids, offsets, sorted, assign_row;
  std::vector<float> weights;
  MoeRouting r;
  HostRouting(int tokens, int experts, int top_k)
      : ids(size_t(tokens * top_k), -7),
        offsets(size_t(experts + 1), -7),
        sorted(size_t(tokens * top_k), -7),
        assign_row(size_t(tokens * top_k), -7),
        weights(size_t(tokens * top_k), NAN) {
    r.num_tokens = tokens;
    r.num_experts = experts;
    r.top_k = top_k;
    r.topk_ids = Tensor::contiguous(ids.data(), DType::kI32, Device::kCpu, {tokens, top_k});
    r.topk_weights = Tensor::contiguous(weights.data(), DType::kF32, Device::kCpu, {tokens, top_k});
    r.expert_offsets = Tensor::contiguous(offsets.data(), DType::kI32, Device::kCpu, {experts + 1});
    r.sorted_assign = Tensor::contiguous(sorted.data(), DType::kI32, Device::kCpu, {tokens * top_k});
    r.assign_row = Tensor::contiguous(assign_row.data(), DType::kI32, Device::kCpu, {tokens * top_k});
  }
};

TEST_F(CpuFamilyOps, MoeRouteTopKAndSortedOrder) {
  const int T = 9, E = 6, K = 3;
  std::vector<float> logits = test::random_floats(T * E, 11, -3.0f, 3.0f);
  // Token 4: a three-way tie for first place must keep the lower expert ids.
  for (int e = 0; e < E; ++e) logits[size_t(4 * E + e)] = e == 1 || e == 3 || e == 5 ? 2.0f : -1.0f;
  Tensor lt = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {T, E});
  for (bool renorm : {true, false}) {
    HostRouting h(T, E, K);
    be->moe_route(lt, renorm, h.r);
    for (int t = 0; t < T; ++t) {
      std::vector<double> p(static_cast<size_t>(E));
      double m = *std::max_element(logits.begin() + t * E, logits.begin() + (t + 1) * E), s = 0;
      for (int e = 0; e < E; ++e) s += p[size_t(e)] = std::exp(double(logits[size_t(t * E + e)]) - m);
      for (double& x : p) x /= s;
      std::vector<int> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
      double chosen = 0;
      for (int j = 0; j < K; ++j) chosen += p[size_t(order[size_t(j)])];
      for (int j = 0; j < K; ++j) {
        EXPECT_EQ(h.ids[size_t(t * K + j)], order[size_t(j)]) << "token " << t << " choice " << j;
        const double want = p[size_t(order[size_t(j)])] / (renorm ? chosen : 1.0);
        EXPECT_NEAR(h.weights[size_t(t * K + j)], want, 1e-6);
      }
    }
    EXPECT_EQ(std::vector<int32_t>(h.ids.begin() + 4 * K, h.ids.begin() + 5 * K), (std::vector<int32_t>{1, 3, 5}));
    // The sorted order: experts ascending, assignments ascending within one; assign_row inverts it.
    EXPECT_EQ(h.offsets.front(), 0);
    EXPECT_EQ(h.offsets.back(), T * K);
    for (int e = 0; e < E; ++e) {
      EXPECT_LE(h.offsets[size_t(e)], h.offsets[size_t(e + 1)]);
      for (int r = h.offsets[size_t(e)]; r < h.offsets[size_t(e + 1)]; ++r) {
        EXPECT_EQ(h.ids[size_t(h.sorted[size_t(r)])], e);
        if (r > h.offsets[size_t(e)]) {
          EXPECT_LT(h.sorted[size_t(r - 1)], h.sorted[size_t(r)]);
        }
        EXPECT_EQ(h.assign_row[size_t(h.sorted[size_t(r)])], r);
      }
    }
  }
}

// The MoE MLP (route, gate/up grouped GEMM gathering the token rows, silu * up, down, combine)
// against a loop over each token's chosen experts in double.
TEST_F(CpuFamilyOps, MoeMlpMatchesPerTokenLoop) {
  const int T = 11, E = 5, K = 2, H = 24, I = 16;
  std::vector<float> x = test::random_floats(T * H, 21), router = test::random_floats(E * H, 22, -2.0f, 2.0f);
  std::vector<float> w_gate_up = test::random_floats(E * 2 * I * H, 23), w_down = test::random_floats(E * H * I, 24);
  Tensor xt = Tensor::contiguous(x.data(), DType::kF32, Device::kCpu, {T, H});
  Tensor rt = Tensor::contiguous(router.data(), DType::kF32, Device::kCpu, {E, H});
  Tensor gut = Tensor::contiguous(w_gate_up.data(), DType::kF32, Device::kCpu, {E, 2 * I, H});
  Tensor dt = Tensor::contiguous(w_down.data(), DType::kF32, Device::kCpu, {E, H, I});
  std::vector<float> logits(size_t(T * E)), gu(size_t(T * K * 2 * I)), act(size_t(T * K * I)), y(size_t(T * K * H));
  std::vector<float> out(size_t(T * H), NAN);
  Tensor lt = Tensor::contiguous(logits.data(), DType::kF32, Device::kCpu, {T, E});
  Tensor gt = Tensor::contiguous(gu.data(), DType::kF32, Device::kCpu, {T * K, 2 * I});
  Tensor at = Tensor::contiguous(act.data(), DType::kF32, Device::kCpu, {T * K, I});
  Tensor yt = Tensor::contiguous(y.data(), DType::kF32, Device::kCpu, {T * K, H});
  Tensor ot = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {T, H});
  HostRouting h(T, E, K);
  be->gemm(xt, rt, nullptr, lt);
  be->moe_route(lt, true, h.r);
  be->moe_gemm(xt, gut, h.r, /*gather=*/true, gt);
  be->silu_mul(gt, at);
  be->moe_gemm(at, dt, h.r, /*gather=*/false, yt);
  be->moe_combine(yt, h.r, ot);
  for (int t = 0; t < T; ++t) {
    std::vector<double> want(size_t(H), 0.0);
    for (int j = 0; j < K; ++j) {
      const int e = h.ids[size_t(t * K + j)];
      const double wj = h.weights[size_t(t * K + j)];
      std::vector<double> a(static_cast<size_t>(I));
      for (int i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int c = 0; c < H; ++c) {
          g += double(x[size_t(t * H + c)]) * w_gate_up[size_t((e * 2 * I + i) * H + c)];
          u += double(x[size_t(t * H + c)]) * w_gate_up[size_t((e * 2 * I + I + i) * H + c)];
        }
        a[size_t(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int c = 0; c < H; ++c) {
        double d = 0;
        for (int i = 0; i < I; ++i) d += a[size_t(i)] * w_down[size_t((e * H + c) * I + i)];
        want[size_t(c)] += wj * d;
      }
    }
    for (int c = 0; c < H; ++c) EXPECT_NEAR(out[size_t(t * H + c)], want[size_t(c)], 1e-5) << t << "," << c;
  }
}

TEST_F(CpuFamilyOps, MoeCombineAddsInExpertOrder) {
  // Token 0 chose experts 3, 1, 2 (in that order of probability): the sum runs in ascending
  // expert id, as transformers adds the experts' outputs, and these values round differently in
  // the two orders.
  HostRouting h(1, 4, 3);
  h.ids = {3, 1, 2};
  h.weights = {1.0f, 1.0f, 1.0f};
  h.assign_row = {0, 1, 2};
  std::vector<float> y = {1.0f, 1e8f, -1e8f};  // sorted row j holds choice j's output (one column)
  std::vector<float> out(1, NAN);
  Tensor yt = Tensor::contiguous(y.data(), DType::kF32, Device::kCpu, {3, 1});
  Tensor ot = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {1, 1});
  be->moe_combine(yt, h.r, ot);
  EXPECT_EQ(out[0], ((0.0f + 1e8f) + -1e8f) + 1.0f);  // experts 1, 2, 3: 1
  EXPECT_NE(out[0], ((0.0f + 1.0f) + 1e8f) + -1e8f);  // choice order would give 0
}

}  // namespace
}  // namespace fg
