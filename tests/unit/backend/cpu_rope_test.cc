// The CPU backend's rotary embedding against a naive version written here: neox (rotate halves)
// and interleaved pairs, partial rotary_dim, attention_scaling, and the equivalence of a per-token
// base (dynamic NTK) with an inv_freq table when the base is the same for every token. q and k are
// head views into one fused qkv buffer, as the model passes them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"

namespace fg {
namespace {

using test::PaddedF32;

// inv_freq[i] = 1 / base^(2i / rot), in f32 the way HF builds it.
std::vector<float> make_inv_freq(float base, int64_t rot) {
  std::vector<float> f(size_t(rot / 2));
  for (int64_t i = 0; i < rot / 2; ++i) f[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(rot));
  return f;
}

// A fused [n, q_heads + 2 * kv_heads, head_dim] buffer with q and k as head views of it.
struct FusedQkv {
  FusedQkv(int64_t n, int64_t q_heads, int64_t kv_heads, int64_t head_dim, uint32_t seed)
      : fused({n, q_heads + 2 * kv_heads, head_dim}, 3, seed) {
    q = fused.view;
    q.shape[1] = q_heads;
    k = fused.view;
    k.shape[1] = kv_heads;
    k.data = fused.data() + fused.offset(0, q_heads, 0);
  }
  PaddedF32 fused;
  Tensor q, k;
};

// Rotates one head (double math on the f32 angle HF computes) and returns the expected values.
std::vector<double> naive_rope_head(const float* x, int64_t head_dim, int64_t rot, bool neox, int32_t pos,
                                    const std::vector<float>& inv_freq, float scaling) {
  std::vector<double> out(x, x + head_dim);
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[size_t(i)];
    const double c = std::cos(double(angle)) * scaling, s = std::sin(double(angle)) * scaling;
    const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    out[size_t(a)] = double(x[a]) * c - double(x[b]) * s;
    out[size_t(b)] = double(x[b]) * c + double(x[a]) * s;
  }
  return out;
}

struct RopeCase {
  int64_t n, q_heads, kv_heads, head_dim, rot;
  bool neox;
  float scaling;
};

void check_rope_case(Backend& be, const RopeCase& c, bool per_token_varying) {
  SCOPED_TRACE("n=" + std::to_string(c.n) + " head_dim=" + std::to_string(c.head_dim) + " rot=" +
               std::to_string(c.rot) + (c.neox ? " neox" : " interleaved") + (per_token_varying ? " per-token" : ""));
  FusedQkv qkv(c.n, c.q_heads, c.kv_heads, c.head_dim, uint32_t(c.n * 31 + c.rot));
  const PaddedF32 before = qkv.fused;
  std::mt19937 rng(uint32_t(c.head_dim));
  std::vector<int32_t> positions(size_t(c.n));
  for (auto& p : positions) p = int32_t(rng() % 4096);
  positions[0] = 0;
  std::vector<float> inv_freq = make_inv_freq(10000.0f, c.rot), bases(size_t(c.n));
  for (auto& b : bases) b = 10000.0f * float(1 + rng() % 8);
  RopeArgs args;
  args.positions = test::view_of(positions);
  args.rotary_dim = int(c.rot);
  args.neox = c.neox;
  args.attention_scaling = c.scaling;
  if (per_token_varying) {
    args.per_token_base = Tensor::contiguous(bases.data(), DType::kF32, Device::kCpu, {c.n});
  } else {
    args.inv_freq = Tensor::contiguous(inv_freq.data(), DType::kF32, Device::kCpu, {c.rot / 2});
  }
  be.rope(qkv.q, qkv.k, args);
  for (int64_t t = 0; t < c.n; ++t) {
    const std::vector<float> freq = per_token_varying ? make_inv_freq(bases[size_t(t)], c.rot) : inv_freq;
    for (int64_t h = 0; h < c.q_heads + 2 * c.kv_heads; ++h) {
      const float* x = before.data() + before.offset(t, h, 0);
      const bool rotated = h < c.q_heads + c.kv_heads;  // v heads stay as they were
      const std::vector<double> want =
          rotated ? naive_rope_head(x, c.head_dim, c.rot, c.neox, positions[size_t(t)], freq, c.scaling)
                  : std::vector<double>(x, x + c.head_dim);
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const float got = qkv.fused.at(t, h, d);
        if (d >= c.rot || !rotated) {
          ASSERT_EQ(got, x[d]) << "channel " << d << " of head " << h << " must be untouched";
        } else {
          ASSERT_NEAR(got, want[size_t(d)], 2e-6) << "token " << t << " head " << h << " channel " << d;
        }
      }
    }
  }
  EXPECT_TRUE(qkv.fused.untouched_outside());
}

TEST(CpuRope, NeoxFullRotary) {
  auto be = make_cpu_backend();
  check_rope_case(*be, {13, 6, 2, 32, 32, true, 1.0f}, false);
  check_rope_case(*be, {97, 8, 8, 64, 64, true, 1.0f}, false);  // enough work to run multi-threaded
}

TEST(CpuRope, InterleavedPairs) {
  auto be = make_cpu_backend();
  check_rope_case(*be, {17, 4, 1, 24, 24, false, 1.0f}, false);
}

TEST(CpuRope, PartialRotaryLeavesTheRestUntouched) {
  auto be = make_cpu_backend();
  check_rope_case(*be, {11, 3, 1, 40, 24, true, 1.0f}, false);
  check_rope_case(*be, {11, 3, 1, 40, 16, false, 1.0f}, false);
}

TEST(CpuRope, AttentionScalingMultipliesCosAndSin) {
  auto be = make_cpu_backend();
  check_rope_case(*be, {9, 2, 2, 16, 16, true, 1.375f}, false);
}

TEST(CpuRope, PerTokenBaseFollowsEachTokensBase) {
  auto be = make_cpu_backend();
  check_rope_case(*be, {19, 4, 2, 32, 32, true, 1.0f}, true);
  check_rope_case(*be, {19, 4, 2, 32, 16, false, 1.0f}, true);
}

TEST(CpuRope, ConstantPerTokenBaseEqualsInvFreqTableBitwise) {
  auto be = make_cpu_backend();
  const int64_t n = 23, q_heads = 4, kv_heads = 2, head_dim = 48, rot = 32;
  const float base = 500000.0f;
  FusedQkv a(n, q_heads, kv_heads, head_dim, 77), b(n, q_heads, kv_heads, head_dim, 77);
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[size_t(t)] = int32_t(t * 397 % 8191);
  std::vector<float> inv_freq = make_inv_freq(base, rot), bases(size_t(n), base);
  RopeArgs table_args, base_args;
  table_args.positions = base_args.positions = test::view_of(positions);
  table_args.rotary_dim = base_args.rotary_dim = int(rot);
  table_args.inv_freq = Tensor::contiguous(inv_freq.data(), DType::kF32, Device::kCpu, {rot / 2});
  base_args.per_token_base = Tensor::contiguous(bases.data(), DType::kF32, Device::kCpu, {n});
  be->rope(a.q, a.k, table_args);
  be->rope(b.q, b.k, base_args);
  int64_t changed = 0;
  a.fused.for_each([&](int64_t i, int64_t j, int64_t k) {
    ASSERT_EQ(a.fused.at(i, j, k), b.fused.at(i, j, k)) << i << "," << j << "," << k;
  });
  const PaddedF32 fresh(std::vector<int64_t>{n, q_heads + 2 * kv_heads, head_dim}, 3, 77);
  a.fused.for_each([&](int64_t i, int64_t j, int64_t k) { changed += a.fused.at(i, j, k) != fresh.at(i, j, k); });
  EXPECT_GT(changed, n * (q_heads + kv_heads) * rot / 2);  // the op really rotated
}

}  // namespace
}  // namespace fg
