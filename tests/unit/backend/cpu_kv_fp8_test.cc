// The CPU backend's fp8 KV cache (backend.h's KvCacheLayer): kv_write stores
// f32_to_f8e4m3(x / scale) bit for bit (round to nearest even, saturating at +-448, a scale per kv
// head, padded slots skipped), and attention over an fp8 cache gives exactly (bitwise) what it
// gives over an f32 cache holding the dequantized values e4m3 * scale, and stays close to the
// unquantized attention. An fp8 cache without its scales is refused with a message. The bf16 cache
// (--kv-cache-dtype bf16 on the CPU) stores f32_to_bf16(x) and is read exactly likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"

namespace fg {
namespace {

constexpr int64_t kPages = 12, kPageSize = 3, kKvHeads = 2, kQHeads = 8, kDim = 32;
constexpr int64_t kSlotElems = kKvHeads * kDim;

// An fp8 cache layer over host vectors, scales per kv head.
struct Fp8Layer {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
  KvCacheLayer layer;
  Fp8Layer(std::vector<float> ks, std::vector<float> vs)
      : k(size_t(kPages * kPageSize * kSlotElems), 0x7f),  // e4m3 NaN wherever nothing was written
        v(k.size(), 0x7f),
        k_scale(std::move(ks)),
        v_scale(std::move(vs)) {
    layer.k = Tensor::contiguous(k.data(), DType::kF8E4M3, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim});
    layer.v = Tensor::contiguous(v.data(), DType::kF8E4M3, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim});
    layer.k_scale = Tensor::contiguous(k_scale.data(), DType::kF32, Device::kCpu, {kKvHeads});
    layer.v_scale = Tensor::contiguous(v_scale.data(), DType::kF32, Device::kCpu, {kKvHeads});
  }
};

TEST(CpuKvFp8, KvWriteRoundsToNearestEvenAndSaturatesPerKvHeadScale) {
  auto be = make_cpu_backend();
  Fp8Layer cache({0.5f, 4.0f}, {1.0f, 0.125f});
  const int64_t n = 6;
  std::vector<float> k = test::random_floats(size_t(n * kSlotElems), 11, -300.0f, 300.0f);
  std::vector<float> v = test::random_floats(size_t(n * kSlotElems), 12, -3000.0f, 3000.0f);
  // Edge values in token 0: halfway between e4m3 neighbours (ties to even), beyond 448 * scale,
  // infinities, subnormals and zeros.
  const float edges[] = {
      1.0625f,      1.1875f,       0.0f,  -0.0f,  500.0f, -1e9f,  std::numeric_limits<float>::infinity(),
      0.001953125f, 0.0029296875f, 3e-3f, 240.0f, 232.0f, 448.0f, 464.0f};
  for (size_t i = 0; i < std::size(edges); ++i) k[i] = v[i] = k[size_t(kDim) + i] = v[size_t(kDim) + i] = edges[i];
  std::vector<int32_t> slots = {0, 35, -1, 4, 17, 2};  // token 2 is padding
  be->kv_write(Tensor::contiguous(k.data(), DType::kF32, Device::kCpu, {n, kKvHeads, kDim}),
               Tensor::contiguous(v.data(), DType::kF32, Device::kCpu, {n, kKvHeads, kDim}), test::view_of(slots),
               cache.layer);
  int64_t checked = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < kKvHeads; ++h) {
      for (int64_t d = 0; d < kDim; ++d) {
        const size_t src = size_t((i * kKvHeads + h) * kDim + d);
        if (slots[size_t(i)] < 0) continue;
        const size_t dst = size_t((slots[size_t(i)] * kKvHeads + h) * kDim + d);
        ASSERT_EQ(cache.k[dst], f32_to_f8e4m3(k[src] / cache.k_scale[size_t(h)])) << "k token " << i << " head " << h;
        ASSERT_EQ(cache.v[dst], f32_to_f8e4m3(v[src] / cache.v_scale[size_t(h)])) << "v token " << i << " head " << h;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * kSlotElems);
  // The rounding the comparison relies on, spelled out for head 1 of V (scale 1/8): 3000 / (1/8)
  // saturates, and head 0 of K (scale 1/2) maps 1.0625 to 2.125, between 2 and 2.25: even is 2.
  EXPECT_EQ(cache.k[0], 0x40);                               // 2.0 = 0.1000.000
  EXPECT_EQ(cache.k[6], 0x7e);                               // inf / 0.5 saturates at 448
  EXPECT_EQ(f8e4m3_to_f32(cache.v[size_t(kDim) + 4]), 448);  // head 1: 500 / 0.125 saturates
  // The padded token's slot (and every slot nobody wrote) is untouched.
  size_t untouched = 0;
  for (uint8_t b : cache.k) untouched += b == 0x7f;
  EXPECT_EQ(untouched, cache.k.size() - size_t(5 * kSlotElems));
}

// Three sequences over the test cache's pages (a decode over 14 keys, a 4-token prefill, a
// 3-token chunk over 11 keys): their K/V rows, slots and attention batch, and attention over any
// cache layer holding them.
struct AttentionCase {
  std::vector<int32_t> q_lens = {1, 4, 3}, kv_lens = {14, 4, 11};
  std::vector<int32_t> cu = {0}, bt = std::vector<int32_t>(3 * 5, 0), slots;
  std::vector<float> k, v, q;
  int64_t n = 0, total_q = 0;
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<AttentionPlan> plan;
  AttentionBatch batch;

  AttentionCase() {
    const int32_t page_order[] = {7, 2, 11, 0, 5, 9, 3, 10, 1, 6, 8, 4};
    int next = 0;
    for (size_t s = 0; s < 3; ++s) {
      cu.push_back(cu.back() + q_lens[s]);
      for (int32_t j = 0; j < kv_lens[s]; ++j) {
        if (j % kPageSize == 0) bt[s * 5 + size_t(j / kPageSize)] = page_order[next++];
        slots.push_back(bt[s * 5 + size_t(j / kPageSize)] * int32_t(kPageSize) + j % int32_t(kPageSize));
      }
    }
    n = int64_t(slots.size());
    k = test::random_floats(size_t(n * kSlotElems), 21, -2.0f, 2.0f);
    v = test::random_floats(size_t(n * kSlotElems), 22, -2.0f, 2.0f);
    total_q = cu.back();
    q = test::random_floats(size_t(total_q * kQHeads * kDim), 23, -3.0f, 3.0f);
    batch = AttentionBatch{test::view_of(cu),
                           Tensor::contiguous(kv_lens.data(), DType::kI32, Device::kCpu, {3}),
                           Tensor::contiguous(bt.data(), DType::kI32, Device::kCpu, {3, 5}),
                           3,
                           int(total_q),
                           4,
                           14,
                           int(kPageSize),
                           cu,
                           kv_lens};
    plan = make_attention_plan(*be, {int(kQHeads), int(kKvHeads), int(kDim), int(total_q), 3});
    be->plan_attention(*plan, batch);
  }
  void write(KvCacheLayer& layer) {
    be->kv_write(Tensor::contiguous(k.data(), DType::kF32, Device::kCpu, {n, kKvHeads, kDim}),
                 Tensor::contiguous(v.data(), DType::kF32, Device::kCpu, {n, kKvHeads, kDim}), test::view_of(slots),
                 layer);
  }
  // The rows as an f32 cache (value(x) of each written value; 0 elsewhere).
  template <class F>
  void f32_cache(F value, std::vector<float>& kk, std::vector<float>& vv) const {
    kk.assign(size_t(kPages * kPageSize * kSlotElems), 0.0f);
    vv.assign(kk.size(), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < kSlotElems; ++e) {
        kk[size_t(slots[size_t(i)] * kSlotElems + e)] = value(k[size_t(i * kSlotElems + e)]);
        vv[size_t(slots[size_t(i)] * kSlotElems + e)] = value(v[size_t(i * kSlotElems + e)]);
      }
  }
  static KvCacheLayer f32_layer(std::vector<float>& kk, std::vector<float>& vv) {
    return KvCacheLayer{Tensor::contiguous(kk.data(), DType::kF32, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim}),
                        Tensor::contiguous(vv.data(), DType::kF32, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim})};
  }
  void run(const KvCacheLayer& layer, std::vector<float>& out, std::vector<float>& lse) {
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(float(kDim));
    params.softcap = 5.0f;
    out.assign(size_t(total_q * kQHeads * kDim), std::numeric_limits<float>::quiet_NaN());
    lse.assign(size_t(total_q * kQHeads), std::numeric_limits<float>::quiet_NaN());
    Tensor o = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {total_q, kQHeads, kDim});
    Tensor l = Tensor::contiguous(lse.data(), DType::kF32, Device::kCpu, {total_q, kQHeads});
    be->attention(*plan, Tensor::contiguous(q.data(), DType::kF32, Device::kCpu, {total_q, kQHeads, kDim}), layer,
                  batch, params, o, &l);
  }
};

// sqrt(sum (a - b)^2 / sum b^2).
double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < b.size(); ++e) {
    err2 += double(a[e] - b[e]) * double(a[e] - b[e]);
    ref2 += double(b[e]) * double(b[e]);
  }
  return std::sqrt(err2 / ref2);
}

// Attention over the same batch with the cache as e4m3 codes and as f32 values e4m3 * scale.
TEST(CpuKvFp8, AttentionReadsTheDequantizedValuesExactly) {
  AttentionCase ac;
  Fp8Layer cache({0.25f, 2.0f}, {1.0f, 0.5f});
  ac.write(cache.layer);
  // The same values in f32: the dequantized cache, and the unquantized one.
  std::vector<float> kd(cache.k.size()), vd(cache.v.size()), kx, vx;
  for (size_t e = 0; e < kd.size(); ++e) {
    const size_t h = (e / size_t(kDim)) % size_t(kKvHeads);
    kd[e] = f8e4m3_to_f32(cache.k[e]) * cache.k_scale[h];
    vd[e] = f8e4m3_to_f32(cache.v[e]) * cache.v_scale[h];
  }
  ac.f32_cache([](float x) { return x; }, kx, vx);
  std::vector<float> out8, lse8, outd, lsed, outx, lsex;
  ac.run(cache.layer, out8, lse8);
  ac.run(AttentionCase::f32_layer(kd, vd), outd, lsed);
  ac.run(AttentionCase::f32_layer(kx, vx), outx, lsex);
  ASSERT_EQ(0, std::memcmp(out8.data(), outd.data(), out8.size() * 4)) << "out differs from the dequantized cache's";
  ASSERT_EQ(0, std::memcmp(lse8.data(), lsed.data(), lse8.size() * 4)) << "lse differs from the dequantized cache's";
  // e4m3 keeps 3 mantissa bits (relative rounding error <= 1/16): outputs stay close to the
  // unquantized attention, but not equal.
  const double rel = rel_rms(out8, outx);
  EXPECT_LT(rel, 0.06);
  EXPECT_GT(rel, 1e-4);
}

// --kv-cache-dtype bf16 on the CPU: kv_write stores f32_to_bf16(x) (round to nearest even) and
// attention reads exactly those values, so it equals attention over an f32 cache of the rounded
// values, and stays within bf16's rounding of the unquantized one.
TEST(CpuKvBf16, KvWriteRoundsToBf16AndAttentionReadsThoseValues) {
  AttentionCase ac;
  std::vector<uint16_t> kb(size_t(kPages * kPageSize * kSlotElems), 0x7fc0), vb(kb.size(), 0x7fc0);  // NaN: unwritten
  KvCacheLayer bf16{Tensor::contiguous(kb.data(), DType::kBF16, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim}),
                    Tensor::contiguous(vb.data(), DType::kBF16, Device::kCpu, {kPages, kPageSize, kKvHeads, kDim})};
  ac.write(bf16);
  for (int64_t i = 0; i < ac.n; ++i)
    for (int64_t e = 0; e < kSlotElems; ++e) {
      const size_t src = size_t(i * kSlotElems + e), dst = size_t(ac.slots[size_t(i)] * kSlotElems + e);
      ASSERT_EQ(kb[dst], f32_to_bf16(ac.k[src])) << "k token " << i;
      ASSERT_EQ(vb[dst], f32_to_bf16(ac.v[src])) << "v token " << i;
    }
  std::vector<float> kr, vr, kx, vx;
  ac.f32_cache([](float x) { return bf16_to_f32(f32_to_bf16(x)); }, kr, vr);
  ac.f32_cache([](float x) { return x; }, kx, vx);
  std::vector<float> outb, lseb, outr, lser, outx, lsex;
  ac.run(bf16, outb, lseb);
  ac.run(AttentionCase::f32_layer(kr, vr), outr, lser);
  ac.run(AttentionCase::f32_layer(kx, vx), outx, lsex);
  ASSERT_EQ(0, std::memcmp(outb.data(), outr.data(), outb.size() * 4)) << "out differs from the rounded f32 cache's";
  ASSERT_EQ(0, std::memcmp(lseb.data(), lser.data(), lseb.size() * 4)) << "lse differs from the rounded f32 cache's";
  const double rel = rel_rms(outb, outx);  // bf16 keeps 8 significant bits: relative error <= 2^-9
  EXPECT_LT(rel, 4e-3);
  EXPECT_GT(rel, 1e-6);
}

TEST(CpuKvFp8, CacheWithoutScalesAbortsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_cpu_backend();
  Fp8Layer cache({1.0f, 1.0f}, {1.0f, 1.0f});
  KvCacheLayer no_scales{cache.layer.k, cache.layer.v, Tensor(), Tensor()};
  std::vector<float> k(size_t(kSlotElems), 1.0f);
  std::vector<int32_t> slots = {0};
  const Tensor kt = Tensor::contiguous(k.data(), DType::kF32, Device::kCpu, {1, kKvHeads, kDim});
  EXPECT_DEATH(be->kv_write(kt, kt, test::view_of(slots), no_scales), "kv_write: cache.k_scale must be");
  std::vector<float> one_scale = {1.0f};
  KvCacheLayer short_scales = cache.layer;
  short_scales.v_scale = Tensor::contiguous(one_scale.data(), DType::kF32, Device::kCpu, {1});
  EXPECT_DEATH(be->kv_write(kt, kt, test::view_of(slots), short_scales), "cache.v_scale must be of size 2");
}

}  // namespace
}  // namespace fg
