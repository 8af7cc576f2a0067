// The CUDA backend's writes into an fp8 KV cache against the host's encoding: kv_write and the
// fused rope_kv_write must store exactly f32_to_f8e4m3(x / scale) (core/dtype.h: round to nearest
// even, saturating at +-448) for every bf16 input, so the device's rounding (cvt.satfinite through
// cuda_fp8.h) and the CPU reference's are one function. Every one of the 65536 bf16 bit patterns
// goes through kv_write, under four power-of-two scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "parity_harness.h"

namespace fg::parity {
namespace {

constexpr int64_t kHeads = 2, kDim = 64, kPageSize = 8;

bool is_e4m3_nan(uint8_t b) {
  return (b & 0x7f) == 0x7f;
}

// The codes of `values` (bf16 bits, [n, kHeads, kDim]) the host computes with per-head scales.
uint8_t host_code(uint16_t bits, float scale) {
  return f32_to_f8e4m3(bf16_to_f32(bits) / scale);
}

struct DeviceFp8Cache {
  Buffer k, v, scales;
  KvCacheLayer layer;
  int64_t bytes;
  DeviceFp8Cache(Backend& g, int64_t pages, const std::vector<float>& k_scale, const std::vector<float>& v_scale)
      : bytes(pages * kPageSize * kHeads * kDim) {
    k = g.alloc(size_t(bytes));
    v = g.alloc(size_t(bytes));
    scales = g.alloc(4 * 2 * kHeads);
    std::vector<float> host(k_scale);
    host.insert(host.end(), v_scale.begin(), v_scale.end());
    g.copy_from_host(scales.data(), host.data(), host.size() * 4);
    std::vector<uint8_t> poison(size_t(bytes), 0x55);
    g.copy_from_host(k.data(), poison.data(), poison.size());
    g.copy_from_host(v.data(), poison.data(), poison.size());
    g.synchronize();
    layer.k = Tensor::contiguous(k.data(), DType::kF8E4M3, Device::kCuda, {pages, kPageSize, kHeads, kDim});
    layer.v = Tensor::contiguous(v.data(), DType::kF8E4M3, Device::kCuda, {pages, kPageSize, kHeads, kDim});
    layer.k_scale = Tensor::contiguous(scales.data(), DType::kF32, Device::kCuda, {kHeads});
    layer.v_scale =
        Tensor::contiguous(static_cast<float*>(scales.data()) + kHeads, DType::kF32, Device::kCuda, {kHeads});
  }
  std::vector<uint8_t> download(Backend& g, const Buffer& b) const {
    std::vector<uint8_t> out(static_cast<size_t>(bytes));
    g.copy_to_host(out.data(), b.data(), out.size());
    g.synchronize();
    return out;
  }
};

// Uploads host bf16 bits as a [n, kHeads, kDim] device tensor.
struct DeviceBf16 {
  Buffer buf;
  Tensor t;
  DeviceBf16(Backend& g, const std::vector<uint16_t>& bits) {
    buf = g.alloc(bits.size() * 2);
    g.copy_from_host(buf.data(), bits.data(), bits.size() * 2);
    g.synchronize();
    t = Tensor::contiguous(buf.data(), DType::kBF16, Device::kCuda,
                           {int64_t(bits.size()) / (kHeads * kDim), kHeads, kDim});
  }
};

TEST(KvFp8Parity, KvWriteEncodesEveryBf16ValueLikeTheHost) {
  FG_REQUIRE_GPU();
  Backend& g = *backends().gpu;
  const int64_t n = 65536 / (kHeads * kDim);  // 512 tokens
  std::vector<uint16_t> kb(65536), vb(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    kb[i] = uint16_t(i);
    vb[i] = uint16_t(65535 - i);
  }
  const std::vector<float> k_scale = {1.0f, 0.0625f}, v_scale = {8.0f, 1.0f / 1024};
  DeviceBf16 k(g, kb), v(g, vb);
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = int32_t(i);
  slots[5] = -1;  // padding: skipped
  Buffer slot_buf = g.alloc(slots.size() * 4);
  g.copy_from_host(slot_buf.data(), slots.data(), slots.size() * 4);
  DeviceFp8Cache cache(g, n / kPageSize, k_scale, v_scale);
  g.kv_write(k.t, v.t, Tensor::contiguous(slot_buf.data(), DType::kI32, Device::kCuda, {n}), cache.layer);
  const std::vector<uint8_t> kc = cache.download(g, cache.k), vc = cache.download(g, cache.v);
  int64_t mismatches = 0, compared = 0;
  for (int64_t i = 0; i < 65536; ++i) {
    const int64_t token = i / (kHeads * kDim), h = (i / kDim) % kHeads;
    if (token == 5) {
      EXPECT_EQ(kc[size_t(i)], 0x55);
      continue;
    }
    for (const auto& [got, bits, scale] : {std::tuple{kc[size_t(i)], kb[size_t(i)], k_scale[size_t(h)]},
                                           {vc[size_t(i)], vb[size_t(i)], v_scale[size_t(h)]}}) {
      const uint8_t want = host_code(bits, scale);
      ++compared;
      const bool ok = is_e4m3_nan(want) ? is_e4m3_nan(got) : got == want;
      if (!ok && ++mismatches <= 10)
        ADD_FAILURE() << "bf16 0x" << std::hex << bits << " / " << std::dec << scale << ": device 0x" << std::hex
                      << int(got) << ", host 0x" << int(want);
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(compared, 2 * (65536 - kHeads * kDim));
}

// rope_kv_write (one launch) quantizes the rotated, bf16-rounded k exactly as kv_write would.
TEST(KvFp8Parity, RopeKvWriteEncodesTheRotatedKeys) {
  FG_REQUIRE_GPU();
  Backend& g = *backends().gpu;
  std::mt19937_64 rng(3);
  const int64_t n = 40;
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  std::vector<uint16_t> qb(size_t(n * 4 * kDim)), kb(size_t(n * kHeads * kDim)), vb(kb.size());
  for (auto* vec : {&qb, &kb, &vb})
    for (uint16_t& x : *vec) x = f32_to_bf16(dist(rng));
  Buffer qbuf = g.alloc(qb.size() * 2);
  g.copy_from_host(qbuf.data(), qb.data(), qb.size() * 2);
  Tensor q = Tensor::contiguous(qbuf.data(), DType::kBF16, Device::kCuda, {n, 4, kDim});
  DeviceBf16 k(g, kb), v(g, vb);
  std::vector<int32_t> slots(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    slots[size_t(i)] = int32_t((i * 7) % 48);
    pos[size_t(i)] = int32_t(i * 101);
  }
  std::vector<float> inv_freq(kDim / 2);
  for (int i = 0; i < kDim / 2; ++i) inv_freq[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(kDim));
  Buffer meta = g.alloc(size_t(2 * n) * 4 + inv_freq.size() * 4);
  g.copy_from_host(meta.data(), slots.data(), size_t(n) * 4);
  g.copy_from_host(static_cast<int32_t*>(meta.data()) + n, pos.data(), size_t(n) * 4);
  g.copy_from_host(static_cast<int32_t*>(meta.data()) + 2 * n, inv_freq.data(), inv_freq.size() * 4);
  RopeArgs args;
  args.positions = Tensor::contiguous(static_cast<int32_t*>(meta.data()) + n, DType::kI32, Device::kCuda, {n});
  args.inv_freq =
      Tensor::contiguous(static_cast<int32_t*>(meta.data()) + 2 * n, DType::kF32, Device::kCuda, {kDim / 2});
  args.rotary_dim = int(kDim);
  const std::vector<float> k_scale = {0.125f, 1.0f}, v_scale = {0.25f, 0.0625f};
  DeviceFp8Cache cache(g, 6, k_scale, v_scale);
  g.rope_kv_write(q, k.t, v.t, args, Tensor::contiguous(meta.data(), DType::kI32, Device::kCuda, {n}), cache.layer);
  std::vector<uint16_t> k_rot(kb.size());
  g.copy_to_host(k_rot.data(), k.buf.data(), k_rot.size() * 2);
  const std::vector<uint8_t> kc = cache.download(g, cache.k), vc = cache.download(g, cache.v);
  EXPECT_NE(k_rot, kb);  // rotated in place
  // Slots (7 i) % 48 for i < 40 repeat after 48 / gcd(7, 48) = 48 tokens: each is written once.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t d = 0; d < kDim; ++d) {
        const size_t src = size_t((i * kHeads + h) * kDim + d);
        const size_t dst = size_t((int64_t(slots[size_t(i)]) * kHeads + h) * kDim + d);
        ASSERT_EQ(kc[dst], host_code(k_rot[src], k_scale[size_t(h)])) << "token " << i << " head " << h << " dim " << d;
        ASSERT_EQ(vc[dst], host_code(vb[src], v_scale[size_t(h)])) << "token " << i << " head " << h << " dim " << d;
      }
}

}  // namespace
}  // namespace fg::parity
