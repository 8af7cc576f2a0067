// The CPU reference backend's elementwise and row ops against naive double-precision versions
// written here: memory, convert, fill_uniform, embedding, rms_norm, add_rms_norm, gemm, silu_mul,
// kv_write, gather_rows. Inputs are random, sizes odd, views strided; outputs are poisoned with
// NaN first and checked to be fully written without touching anything around them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/sampling_rule.h"
#include "backend_test_util.h"

namespace fg {
namespace {

using test::near;
using test::PaddedF32;

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

TEST_F(CpuOps, IdentifiesItself) {
  EXPECT_EQ(be->device(), Device::kCpu);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->act_dtype(), DType::kF32);
}

TEST_F(CpuOps, AllocIsAlignedAndCopiesRoundTrip) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(97), size_t(4096 + 3)}) {
    Buffer b = be->alloc(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    EXPECT_EQ(b.bytes(), bytes);
    EXPECT_EQ(b.device(), Device::kCpu);
    Buffer h = be->alloc_host(bytes);
    ASSERT_NE(h.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data()) % 64, 0u);
  }
  std::vector<float> src = test::random_floats(97, 1), back(97, 0.0f);
  Buffer a = be->alloc(97 * 4), b = be->alloc(97 * 4);
  be->copy_from_host(a.data(), src.data(), 97 * 4);
  be->copy_on_device(b.data(), a.data(), 97 * 4);
  be->copy_to_host(back.data(), b.data(), 97 * 4);
  be->synchronize();
  EXPECT_EQ(src, back);
}

TEST_F(CpuOps, ConvertBetweenFloatTypesHonoursStrides) {
  PaddedF32 src({17, 33}, 5, 2);
  // f32 -> bf16 -> f32 and f32 -> f16 -> f32, element by element against core/dtype.h.
  std::vector<uint16_t> half(17 * 33), brain(17 * 33);
  Tensor h = Tensor::contiguous(half.data(), DType::kF16, Device::kCpu, {17, 33});
  Tensor b = Tensor::contiguous(brain.data(), DType::kBF16, Device::kCpu, {17, 33});
  be->convert(src.view, h);
  be->convert(src.view, b);
  PaddedF32 back({17, 33}, 3, 3);
  back.poison();
  be->convert(b, back.view);
  src.for_each([&](int64_t i, int64_t j, int64_t) {
    ASSERT_EQ(half[size_t(i * 33 + j)], f32_to_f16(src.at(i, j)));
    ASSERT_EQ(brain[size_t(i * 33 + j)], f32_to_bf16(src.at(i, j)));
    ASSERT_EQ(back.at(i, j), bf16_to_f32(f32_to_bf16(src.at(i, j))));
  });
  EXPECT_TRUE(back.untouched_outside());
  // f16 -> bf16 goes through f32.
  std::vector<uint16_t> brain2(17 * 33);
  Tensor b2 = Tensor::contiguous(brain2.data(), DType::kBF16, Device::kCpu, {17, 33});
  be->convert(h, b2);
  for (size_t e = 0; e < half.size(); ++e) ASSERT_EQ(brain2[e], f32_to_bf16(f16_to_f32(half[e])));
}

TEST_F(CpuOps, FillUniformIsAPureFunctionOfSeedAndIndex) {
  const float lo = -0.25f, hi = 0.75f;
  const uint64_t seed = 1234;
  std::vector<float> flat(7 * 97);
  Tensor t = Tensor::contiguous(flat.data(), DType::kF32, Device::kCpu, {7, 97});
  be->fill_uniform(t, lo, hi, seed);
  double mean = 0.0;
  for (size_t e = 0; e < flat.size(); ++e) {
    const float want = float(double(hi - lo) * double(sample_uniform(seed, e)) + double(lo));
    ASSERT_EQ(flat[e], want) << "element " << e;
    ASSERT_GE(flat[e], lo);
    ASSERT_LT(flat[e], hi);
    mean += flat[e];
  }
  mean /= double(flat.size());
  EXPECT_NEAR(mean, 0.25, 0.05);
  // A strided view gets the values of its logical (row-major) index, not of its storage offset.
  PaddedF32 strided({7, 97}, 4, 5);
  strided.poison();
  be->fill_uniform(strided.view, lo, hi, seed);
  strided.for_each([&](int64_t i, int64_t j, int64_t) { ASSERT_EQ(strided.at(i, j), flat[size_t(i * 97 + j)]); });
  EXPECT_TRUE(strided.untouched_outside());
  // bf16 gets the rounded f32 values; another seed gives other values.
  std::vector<uint16_t> brain(7 * 97);
  Tensor b = Tensor::contiguous(brain.data(), DType::kBF16, Device::kCpu, {7, 97});
  be->fill_uniform(b, lo, hi, seed);
  for (size_t e = 0; e < flat.size(); ++e) ASSERT_EQ(brain[e], f32_to_bf16(flat[e]));
  std::vector<float> other(7 * 97);
  Tensor o = Tensor::contiguous(other.data(), DType::kF32, Device::kCpu, {7, 97});
  be->fill_uniform(o, lo, hi, seed + 1);
  int same = 0;
  for (size_t e = 0; e < flat.size(); ++e) same += flat[e] == other[e];
  EXPECT_LT(same, 5);
}

TEST_F(CpuOps, EmbeddingCopiesTableRows) {
  PaddedF32 table({97, 33}, 7, 6);
  std::vector<int32_t> ids = {0, 96, 5, 5, 41, 17, 3, 88, 2, 60, 12};
  Tensor id = test::view_of(ids);
  PaddedF32 out({int64_t(ids.size()), 33}, 2, 7);
  out.poison();
  be->embedding(id, table.view, out.view);
  out.for_each([&](int64_t i, int64_t j, int64_t) { ASSERT_EQ(out.at(i, j), table.at(ids[size_t(i)], j)); });
  EXPECT_TRUE(out.untouched_outside());
}

// out = weight * x / sqrt(mean(x^2) + eps), in double.
double naive_rms(const PaddedF32& x, int64_t i, int64_t j, int64_t k, int64_t hidden, bool per_head, float eps,
                 const std::vector<float>& w) {
  double ss = 0.0;
  for (int64_t c = 0; c < hidden; ++c) {
    const double v = per_head ? x.at(i, j, c) : x.at(i, c);
    ss += v * v;
  }
  const double v = per_head ? x.at(i, j, k) : x.at(i, j);
  return double(w[size_t(per_head ? k : j)]) * v / std::sqrt(ss / double(hidden) + eps);
}

TEST_F(CpuOps, RmsNormOnRowsAndPerHeadViews) {
  const float eps = 1e-6f;
  for (int64_t hidden : {97, 515}) {  // 2-D, strided in and out; the larger one runs multi-threaded
    const int64_t n = hidden == 97 ? 17 : 131;
    PaddedF32 x({n, hidden}, 3, 8);
    std::vector<float> w = test::random_floats(size_t(hidden), 9, 0.5f, 1.5f);
    Tensor wt = Tensor::contiguous(w.data(), DType::kF32, Device::kCpu, {hidden});
    PaddedF32 out({n, hidden}, 5, 10);
    out.poison();
    be->rms_norm(x.view, wt, eps, out.view);
    EXPECT_TRUE(out.all_finite());
    out.for_each([&](int64_t i, int64_t j, int64_t) {
      ASSERT_TRUE(near(out.at(i, j), naive_rms(x, i, j, 0, hidden, false, eps, w), 1e-6, 1e-5, "out", i * hidden + j));
    });
    EXPECT_TRUE(out.untouched_outside());
  }
  {  // 3-D per-head view (like Qwen3's q/k norm on a slice of the fused qkv), normalised in place
    PaddedF32 x({13, 5, 24}, 8, 11);
    PaddedF32 expect_src = x;
    std::vector<float> w = test::random_floats(24, 12, 0.5f, 1.5f);
    Tensor wt = Tensor::contiguous(w.data(), DType::kF32, Device::kCpu, {24});
    x.snapshot();
    be->rms_norm(x.view, wt, eps, x.view);
    x.for_each([&](int64_t i, int64_t j, int64_t k) {
      ASSERT_TRUE(near(x.at(i, j, k), naive_rms(expect_src, i, j, k, 24, true, eps, w), 1e-6, 1e-5, "x", i));
    });
    EXPECT_TRUE(x.untouched_outside());
  }
}

TEST_F(CpuOps, AddRmsNormUpdatesResidualThenNormalises) {
  const float eps = 1e-5f;
  PaddedF32 residual({19, 65}, 3, 13), delta({19, 65}, 6, 14), out({19, 65}, 2, 15);
  PaddedF32 expect_res = residual;
  expect_res.for_each([&](int64_t i, int64_t j, int64_t) { expect_res.at(i, j) = residual.at(i, j) + delta.at(i, j); });
  std::vector<float> w = test::random_floats(65, 16, 0.5f, 1.5f);
  Tensor wt = Tensor::contiguous(w.data(), DType::kF32, Device::kCpu, {65});
  out.poison();
  residual.snapshot();
  be->add_rms_norm(residual.view, delta.view, wt, eps, out.view);
  residual.for_each([&](int64_t i, int64_t j, int64_t) { ASSERT_EQ(residual.at(i, j), expect_res.at(i, j)); });
  out.for_each([&](int64_t i, int64_t j, int64_t) {
    ASSERT_TRUE(near(out.at(i, j), naive_rms(expect_res, i, j, 0, 65, false, eps, w), 1e-6, 1e-5, "out", i));
  });
  EXPECT_TRUE(out.untouched_outside());
  EXPECT_TRUE(residual.untouched_outside());
}

TEST_F(CpuOps, GemmMatchesNaiveWithAndWithoutBias) {
  struct Case {
    int64_t m, k, n;
    bool bias;
  };
  for (Case c : {Case{17, 97, 33, true}, Case{17, 97, 33, false}, Case{1, 64, 129, true}, Case{40, 3, 5, false}}) {
    // x is a column slice of a wider matrix (like q of a fused qkv output).
    PaddedF32 wide({c.m, c.k + 9}, 0, uint32_t(c.m * 7 + c.k));
    Tensor x = wide.view.narrow_last(4, 4 + c.k);
    PaddedF32 w({c.n, c.k}, 3, uint32_t(c.n + 1));
    std::vector<float> bias = test::random_floats(size_t(c.n), 17);
    Tensor bt = Tensor::contiguous(bias.data(), DType::kF32, Device::kCpu, {c.n});
    PaddedF32 out({c.m, c.n}, 2, 18);
    out.poison();
    be->gemm(x, w.view, c.bias ? &bt : nullptr, out.view);
    EXPECT_TRUE(out.all_finite());
    out.for_each([&](int64_t i, int64_t j, int64_t) {
      double want = c.bias ? bias[size_t(j)] : 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk) want += double(wide.at(i, 4 + kk)) * double(w.at(j, kk));
      ASSERT_TRUE(near(out.at(i, j), want, 1e-5, 1e-5, "out", i * c.n + j)) << "m=" << c.m << " k=" << c.k;
    });
    EXPECT_TRUE(out.untouched_outside());
  }
}

TEST_F(CpuOps, SiluMulOfGateAndUp) {
  PaddedF32 x({23, 2 * 37}, 5, 19);
  x.for_each([&](int64_t i, int64_t j, int64_t) { x.at(i, j) *= 8.0f; });  // reach both tails of the sigmoid
  PaddedF32 out({23, 37}, 3, 20);
  out.poison();
  be->silu_mul(x.view, out.view);
  out.for_each([&](int64_t i, int64_t j, int64_t) {
    const double g = x.at(i, j), up = x.at(i, 37 + j);
    ASSERT_TRUE(near(out.at(i, j), g / (1.0 + std::exp(-g)) * up, 1e-6, 1e-6, "out", i * 37 + j));
  });
  EXPECT_TRUE(out.untouched_outside());
}

TEST_F(CpuOps, KvWriteStoresBySlotAndSkipsNegativeSlots) {
  const int64_t pages = 5, page_size = 3, heads = 2, dim = 24, n = 7;
  PaddedF32 kc({pages * page_size, heads, dim}, 0, 21), vc({pages * page_size, heads, dim}, 0, 22);
  Tensor kcache = kc.view, vcache = vc.view;  // as [pages, page_size, heads, dim]
  for (Tensor* t : {&kcache, &vcache}) {
    Tensor r = Tensor::contiguous(t->data, DType::kF32, Device::kCpu, {pages, page_size, heads, dim});
    *t = r;
  }
  KvCacheLayer cache{kcache, vcache};
  // k, v are head slices of a fused qkv-like buffer.
  PaddedF32 fused({n, 3 * heads, dim}, 0, 23);
  Tensor k = fused.view, v = fused.view;
  k.shape[1] = heads;
  v.shape[1] = heads;
  v.data = fused.data() + heads * dim;
  std::vector<int32_t> slots = {14, 0, -1, 7, 3, -1, 8};
  PaddedF32 kc_before = kc, vc_before = vc;
  be->kv_write(k, v, test::view_of(slots), cache);
  std::vector<bool> written(size_t(pages * page_size), false);
  for (int64_t i = 0; i < n; ++i) {
    if (slots[size_t(i)] < 0) continue;
    written[size_t(slots[size_t(i)])] = true;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d) {
        ASSERT_EQ(kc.at(slots[size_t(i)], h, d), fused.at(i, h, d));
        ASSERT_EQ(vc.at(slots[size_t(i)], h, d), fused.at(i, heads + h, d));
      }
  }
  for (int64_t s = 0; s < pages * page_size; ++s) {
    if (written[size_t(s)]) continue;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d) {
        ASSERT_EQ(kc.at(s, h, d), kc_before.at(s, h, d));
        ASSERT_EQ(vc.at(s, h, d), vc_before.at(s, h, d));
      }
  }
}

TEST_F(CpuOps, GatherRowsPicksIndexedRows) {
  PaddedF32 x({31, 97}, 3, 24);
  std::vector<int32_t> idx = {30, 0, 7, 7, 19};
  PaddedF32 out({5, 97}, 1, 25);
  out.poison();
  be->gather_rows(x.view, test::view_of(idx), out.view);
  out.for_each([&](int64_t i, int64_t j, int64_t) { ASSERT_EQ(out.at(i, j), x.at(idx[size_t(i)], j)); });
  EXPECT_TRUE(out.untouched_outside());
}

TEST_F(CpuOps, BadArgumentsAbortNamingTheOpAndTensor) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint16_t> half(4 * 8);
  Tensor x16 = Tensor::contiguous(half.data(), DType::kF16, Device::kCpu, {4, 8});
  std::vector<float> w(8), o(4 * 8);
  Tensor wt = Tensor::contiguous(w.data(), DType::kF32, Device::kCpu, {8});
  Tensor out = Tensor::contiguous(o.data(), DType::kF32, Device::kCpu, {4, 8});
  EXPECT_DEATH(be->rms_norm(x16, wt, 1e-6f, out), "rms_norm: x must be f32, got f16\\[4, 8\\] cpu");
  std::vector<int32_t> idx = {0, 4};
  Tensor out2 = Tensor::contiguous(o.data(), DType::kF32, Device::kCpu, {2, 8});
  EXPECT_DEATH(be->gather_rows(out, test::view_of(idx), out2), "gather_rows: indices\\[1\\] = 4 is outside x");
}

}  // namespace
}  // namespace fg
