// FP8 ops (Backend::quantize_rows_fp8, Backend::gemm_fp8) on CUDA against the CPU reference, with
// per-token / per-channel scales and with the fine-grained format's 128-column groups / 128 x 128
// blocks (a scale per (token, group) and per weight block; the bounds below hold term by term).
//
// Quantization is bit for bit the reference's: the same f32 divisions and the same
// round-to-nearest-even e4m3 encoding. The GEMM's products of two e4m3 values are exact in f32, so
// the GPU and the reference differ only by the order (and width) of the f32 accumulation and by the
// GPU's bf16 output:
//   |gpu - ref| <= 2^-8 |ref| (bf16 rounding)  +  k * 2^-20 * sum_l |x_l w_l| * sx * sw
// (2^-20 leaves room for tensor-core accumulators narrower than f32's 2^-24 per addition).
// The whole path from bf16 activations is also checked against the unquantized product
// x @ (w_codes * sw)^T: per-token e4m3 rounding moves each activation by at most half an e4m3 step,
// 2^-4 |x_l| for normal codes and 2^-10 sx below 2^-6 sx (the subnormal step is 2^-9 sx), so
//   |fp8 path - exact| <= sum_l |w_l| (2^-4 |x_l| + 2^-10 sx) + the GEMM bound above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>

#include "parity_harness.h"

namespace fg::parity {
namespace {

// An FP8-op operand on both backends: host bytes (the CPU tensor points at them) and a device copy.
struct Operand {
  std::vector<uint8_t> host;
  Buffer dev;
  Tensor on_cpu, on_gpu;

  Operand(std::vector<int64_t> shape, DType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    host.assign(dtype_bytes(dtype, n), 0);
    dev = gpu().alloc(std::max<size_t>(host.size(), 16));
    for (auto [t, data, device] : {std::tuple{&on_cpu, static_cast<void*>(host.data()), Device::kCpu},
                                   std::tuple{&on_gpu, dev.data(), Device::kCuda}})
      *t = shape.size() == 1 ? Tensor::contiguous(data, dtype, device, {shape[0]})
                             : Tensor::contiguous(data, dtype, device, {shape[0], shape[1]});
  }
  void upload() {
    gpu().copy_from_host(dev.data(), host.data(), host.size());
    gpu().synchronize();
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(host.size());
    gpu().copy_to_host(out.data(), dev.data(), out.size());
    gpu().synchronize();
    return out;
  }
  float f32(int64_t i) const {
    float v;
    std::memcpy(&v, host.data() + 4 * i, 4);
    return v;
  }
};

// Random e4m3 codes, never NaN (0x7f, 0xff).
void random_codes(std::mt19937_64& rng, std::vector<uint8_t>& codes) {
  for (uint8_t& c : codes) {
    do c = uint8_t(rng());
    while ((c & 0x7f) == 0x7f);
  }
}

TEST(BackendParity, Fp8QuantizeRowsIsTheReferenceBitForBit) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(17);
  struct Case {
    int64_t m, k, pad;
  };
  // Rows in 16-byte vectors held in registers (k a multiple of 8: one, two or four vectors per
  // thread), and the general kernel (k or the row stride not a multiple of 8, or k past 32768).
  for (const Case c : {Case{1, 16, 0}, Case{7, 160, 8}, Case{33, 4096, 0}, Case{2, 14336, 0}, Case{3, 20000, 8},
                       Case{1, 40000, 0}, Case{5, 100, 3}, Case{4, 1000, 5}}) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " pad " + std::to_string(c.pad));
    Twin x({c.m, c.k}, DType::kBF16, DType::kF32, {c.k + c.pad, 1});
    x.fill_random(rng, -3.0f, 3.0f);
    if (c.m > 2) {  // an all-zero row (scale 1) and one of tiny values (subnormal codes)
      std::vector<float> v = x.cpu_values();
      for (int64_t j = 0; j < c.k; ++j) {
        v[size_t(j)] = 0.0f;
        v[size_t(c.k + j)] = v[size_t(c.k + j)] * 1e-3f;
      }
      x.set(v);
    }
    for (const bool grouped : {false, true}) {  // per token; per token and 128 columns
      SCOPED_TRACE(grouped ? "groups of 128" : "per token");
      Operand codes({c.m, c.k}, DType::kF8E4M3);
      Operand scales = grouped ? Operand({(c.k + 127) / 128, c.m}, DType::kF32) : Operand({c.m}, DType::kF32);
      cpu().quantize_rows_fp8(x.cpu, codes.on_cpu, scales.on_cpu);
      gpu().quantize_rows_fp8(x.gpu, codes.on_gpu, scales.on_gpu);
      gpu().synchronize();
      EXPECT_TRUE(codes.download() == codes.host) << "e4m3 codes differ from the reference";
      EXPECT_TRUE(scales.download() == scales.host) << "scales differ from the reference";
      if (c.m > 2) {
        EXPECT_EQ(scales.f32(0), 1.0f);
      }
      x.check_unchanged("quantize_rows_fp8 x");
    }
  }
}

TEST(BackendParity, Fp8GemmWithinAccumulationAndActivationRoundingBounds) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(18);
  struct Case {
    int64_t m, n, k;
  };
  // m <= 32 runs the decode kernel (gemv.h: launch_gemv_fp8): one, two or four token tiles, k
  // ending inside a 64-byte chunk, n not a multiple of its 16-row CTAs; {32, 40, 32128} is the
  // largest k whose 128-block factor table fits the kernel's shared memory at four tiles.
  // Each case with per-channel and with 128-block scales (groups and blocks partial where k or n is
  // not a multiple of 128; such shapes may go to the plain kernel when cuBLASLt declines them).
  for (const Case c : {Case{1, 64, 64}, Case{5, 96, 160}, Case{64, 256, 512}, Case{130, 1000, 384},
                       Case{300, 512, 1024}, Case{3, 48, 48}, Case{16, 1000, 4096}, Case{9, 40, 1040},
                       Case{17, 520, 2048}, Case{1, 4096, 4096}, Case{8, 1536, 1024}, Case{257, 768, 1536},
                       Case{24, 200, 1040}, Case{32, 1000, 4096}, Case{33, 136, 512}, Case{32, 40, 32128}})
    for (const bool blocks : {false, true}) {
      SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                   (blocks ? ", 128-blocks" : ", per channel"));
      const int64_t kb = (c.k + 127) / 128, nb = (c.n + 127) / 128, stride = fp8_block_scale_stride(c.k);
      Twin x({c.m, c.k}, DType::kBF16);
      x.fill_random(rng, -2.0f, 2.0f);
      Operand xq({c.m, c.k}, DType::kF8E4M3);
      Operand xs = blocks ? Operand({kb, c.m}, DType::kF32) : Operand({c.m}, DType::kF32);
      Operand w({c.n, c.k}, DType::kF8E4M3);
      Operand ws = blocks ? Operand({nb, stride}, DType::kF32) : Operand({c.n}, DType::kF32);
      if (blocks)
        for (Tensor* t : {&ws.on_cpu, &ws.on_gpu}) t->shape[1] = kb;  // [nb, kb] at the padded stride
      random_codes(rng, w.host);
      std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
      for (size_t j = 0; j < ws.host.size() / 4; ++j) {
        const float v = scale(rng);
        std::memcpy(ws.host.data() + 4 * j, &v, 4);
      }
      w.upload();
      ws.upload();
      Twin out({c.m, c.n}, DType::kBF16);
      out.poison();
      cpu().quantize_rows_fp8(x.cpu, xq.on_cpu, xs.on_cpu);
      cpu().gemm_fp8(xq.on_cpu, xs.on_cpu, w.on_cpu, ws.on_cpu, out.cpu);
      gpu().quantize_rows_fp8(x.gpu, xq.on_gpu, xs.on_gpu);
      gpu().gemm_fp8(xq.on_gpu, xs.on_gpu, w.on_gpu, ws.on_gpu, out.gpu);
      gpu().synchronize();
      out.check_guards("gemm_fp8 out", true);

      // The scales of x[i, l] and w[j, l].
      auto sx = [&](int64_t i, int64_t l) { return blocks ? xs.f32((l / 128) * c.m + i) : xs.f32(i); };
      auto sw = [&](int64_t j, int64_t l) { return blocks ? ws.f32((j / 128) * stride + l / 128) : ws.f32(j); };
      const std::vector<float> got = out.gpu_values(), ref = out.cpu_values(), xv = x.cpu_values();
      int64_t over_gemm = 0, over_quant = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double abs_products = 0.0, exact = 0.0, quant_bound = 0.0;
          for (int64_t l = 0; l < c.k; ++l) {
            const double wl = double(f8e4m3_to_f32(w.host[size_t(j * c.k + l)])) * sw(j, l);
            const double xl = double(f8e4m3_to_f32(xq.host[size_t(i * c.k + l)])) * sx(i, l);
            abs_products += std::fabs(xl * wl);
            exact += double(xv[size_t(i * c.k + l)]) * wl;
            quant_bound += std::fabs(wl) * (0.0625 * std::fabs(double(xv[size_t(i * c.k + l)])) + sx(i, l) / 1024.0);
          }
          const double r = ref[size_t(i * c.n + j)], g = got[size_t(i * c.n + j)];
          const double gemm_bound = std::fabs(r) / 256.0 + double(c.k) * std::ldexp(abs_products, -20) + 1e-30;
          over_gemm += !(std::fabs(g - r) <= gemm_bound);
          over_quant += !(std::fabs(g - exact) <= quant_bound + gemm_bound);
        }
      }
      EXPECT_EQ(over_gemm, 0) << "outputs beyond the accumulation bound of the reference";
      EXPECT_EQ(over_quant, 0) << "outputs beyond the activation-rounding bound of the exact product";
    }
}

// The fused residual add + RMSNorm + FP8 quantization (Backend::add_rms_norm_fp8) is bit for bit
// add_rms_norm then quantize_rows_fp8 on the same backend: the residual, codes and scales, per token
// and per 128 columns, for rows the fused kernel takes (1,024 < k <= 16,384 in 16-byte vectors)
// and for others (k 1,000 and 160: the two ops).
TEST(BackendParity, Fp8AddRmsNormIsTheTwoOpsBitForBit) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(21);
  for (const auto& [m, k] :
       {std::pair<int64_t, int64_t>{1, 4096}, {7, 4096}, {33, 14336}, {5, 2000}, {3, 1000}, {4, 160}})
    for (const bool grouped : {false, true}) {
      SCOPED_TRACE("m " + std::to_string(m) + " k " + std::to_string(k) + (grouped ? " groups" : " per token"));
      Twin res_a({m, k}, DType::kBF16), res_b({m, k}, DType::kBF16), delta({m, k}, DType::kBF16);
      Twin weight({k}, DType::kBF16), out_a({m, k}, DType::kBF16), out_b({m, k}, DType::kBF16);
      res_a.fill_random(rng, -2.0f, 2.0f);
      res_b.set(res_a.cpu_values());
      delta.fill_random(rng, -1.0f, 1.0f);
      weight.fill_random(rng, 0.5f, 1.5f);
      auto scales_of = [&] { return grouped ? Operand({(k + 127) / 128, m}, DType::kF32) : Operand({m}, DType::kF32); };
      Operand codes_a({m, k}, DType::kF8E4M3), codes_b({m, k}, DType::kF8E4M3);
      Operand scales_a = scales_of(), scales_b = scales_of();
      gpu().add_rms_norm(res_a.gpu, delta.gpu, weight.gpu, 1e-5f, out_a.gpu);
      gpu().quantize_rows_fp8(out_a.gpu, codes_a.on_gpu, scales_a.on_gpu);
      gpu().add_rms_norm_fp8(res_b.gpu, delta.gpu, weight.gpu, 1e-5f, out_b.gpu, codes_b.on_gpu, scales_b.on_gpu);
      gpu().synchronize();
      EXPECT_TRUE(res_b.gpu_values() == res_a.gpu_values()) << "residual";
      EXPECT_TRUE(codes_b.download() == codes_a.download()) << "codes";
      EXPECT_TRUE(scales_b.download() == scales_a.download()) << "scales";
    }
}

// The fused gated activation + FP8 quantization (Backend::act_mul_fp8) is bit for bit silu_mul /
// gelu_tanh_mul then quantize_rows_fp8 on the same backend, per token and per 128 columns: for rows
// the fused kernels take (16-byte vectors: inter 14,336, 1,536, 200; a strided gate_up) and for
// others (inter 1,000 strided by an odd amount: the two ops).
TEST(BackendParity, Fp8ActMulIsTheTwoOpsBitForBit) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(22);
  struct Case {
    int64_t m, inter, pad;  // pad: extra elements per gate_up row
  };
  for (const Case c : {Case{1, 14336, 0}, Case{9, 14336, 0}, Case{33, 1536, 8}, Case{5, 200, 0}, Case{3, 1000, 3}})
    for (const bool gelu : {false, true})
      for (const bool grouped : {false, true}) {
        SCOPED_TRACE("m " + std::to_string(c.m) + " inter " + std::to_string(c.inter) + " pad " +
                     std::to_string(c.pad) + (gelu ? " gelu" : " silu") + (grouped ? " groups" : " per token"));
        const int64_t m = c.m, k = c.inter;
        Twin gate_up({m, 2 * k}, DType::kBF16, DType::kF32, {2 * k + c.pad, 1});
        gate_up.fill_random(rng, -6.0f, 6.0f);
        Twin act_a({m, k}, DType::kBF16), act_b({m, k}, DType::kBF16);
        auto scales_of = [&] {
          return grouped ? Operand({(k + 127) / 128, m}, DType::kF32) : Operand({m}, DType::kF32);
        };
        Operand codes_a({m, k}, DType::kF8E4M3), codes_b({m, k}, DType::kF8E4M3);
        Operand scales_a = scales_of(), scales_b = scales_of();
        if (gelu)
          gpu().gelu_tanh_mul(gate_up.gpu, act_a.gpu);
        else
          gpu().silu_mul(gate_up.gpu, act_a.gpu);
        gpu().quantize_rows_fp8(act_a.gpu, codes_a.on_gpu, scales_a.on_gpu);
        gpu().act_mul_fp8(gate_up.gpu, gelu, act_b.gpu, codes_b.on_gpu, scales_b.on_gpu);
        gpu().synchronize();
        EXPECT_TRUE(codes_b.download() == codes_a.download()) << "codes";
        EXPECT_TRUE(scales_b.download() == scales_a.download()) << "scales";
        gate_up.check_unchanged("act_mul_fp8 gate_up");
      }
}

// Random e4m3 codes x [rows, k] and w [n, k] with scales in [1e-3, 1e-2], uploaded; rows(b, m):
// backend b's bf16 product of the first m rows of x, as bytes.
struct CodeProduct {
  int64_t n;
  Operand x, xs, w, ws;
  CodeProduct(std::mt19937_64& rng, int64_t rows, int64_t n_, int64_t k)
      : n(n_),
        x({rows, k}, DType::kF8E4M3),
        xs({rows}, DType::kF32),
        w({n_, k}, DType::kF8E4M3),
        ws({n_}, DType::kF32) {
    random_codes(rng, x.host);
    random_codes(rng, w.host);
    std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
    for (Operand* sc : {&xs, &ws})
      for (size_t j = 0; j < sc->host.size() / 4; ++j) {
        const float v = scale(rng);
        std::memcpy(sc->host.data() + 4 * j, &v, 4);
      }
    for (Operand* o : {&x, &xs, &w, &ws}) o->upload();
  }
  std::vector<uint8_t> rows(Backend& b, int64_t m) const {
    Operand out({m, n}, DType::kBF16);
    Tensor xv = x.on_gpu, sv = xs.on_gpu;
    xv.shape[0] = m;
    sv.shape[0] = m;
    b.gemm_fp8(xv, sv, w.on_gpu, ws.on_gpu, out.on_gpu);
    b.synchronize();
    return out.download();
  }
};

// The decode kernel (m <= 16) computes a token's row the same way whatever m is: a row of an m-row
// call is bitwise that row of a 16-row call.
TEST(BackendParity, Fp8DecodeGemmRowsDoNotDependOnM) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(20);
  constexpr int64_t kRows = 16;
  const CodeProduct p(rng, kRows, 520, 2064);
  const std::vector<uint8_t> full = p.rows(gpu(), kRows);
  for (int64_t m : {1, 2, 7, 8, 9, 15}) {
    const std::vector<uint8_t> part = p.rows(gpu(), m);
    EXPECT_TRUE(std::memcmp(part.data(), full.data(), part.size()) == 0)
        << "rows of an m = " << m << " call differ from the same rows at m = " << kRows;
  }
}

// Batch-invariant mode (gemm_lt.h): the FP8 GEMM of a weight shape runs one algorithm (or the
// fallback kernel) for every m, so a row of an m-row call is bitwise that row of a 1000-row call;
// and the product is the default mode's up to accumulation order and bf16 rounding.
TEST(BackendParity, Fp8GemmUnderBatchInvariantMode) {
  FG_REQUIRE_GPU();
  const std::unique_ptr<Backend> invariant = another_gpu({.batch_invariant = true});
  ASSERT_NE(invariant, nullptr);
  std::mt19937_64 rng(19);
  constexpr int64_t kMaxM = 1000;
  for (const auto& shape : {std::pair<int64_t, int64_t>{1728, 576}, {4096, 4096}, {96, 160}}) {
    const int64_t n = shape.first, k = shape.second;
    SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
    const CodeProduct p(rng, kMaxM, n, k);
    const std::vector<uint8_t> full = p.rows(*invariant, kMaxM);
    for (int64_t m : {1, 3, 16, 64, 65, 160, 256, 513}) {
      const std::vector<uint8_t> part = p.rows(*invariant, m);
      EXPECT_TRUE(std::memcmp(part.data(), full.data(), part.size()) == 0)
          << "rows of an m = " << m << " call differ from the same rows at m = " << kMaxM;
    }
    const std::vector<uint8_t> plain = p.rows(gpu(), kMaxM);
    // The invariant algorithm computes the same product: within 2^-6 of the largest output of the
    // default's (bf16 roundings and another f32 accumulation order, no more).
    auto bf16 = [](const std::vector<uint8_t>& v, size_t i) {
      const uint32_t bits = uint32_t(v[2 * i] | (v[2 * i + 1] << 8)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    float largest = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < plain.size() / 2; ++i) {
      largest = std::max(largest, std::fabs(bf16(plain, i)));
      diff = std::max(diff, std::fabs(bf16(full, i) - bf16(plain, i)));
    }
    EXPECT_GT(largest, 0.0f);
    EXPECT_LE(diff, largest / 64.0f) << "batch-invariant FP8 products far from the default's";
  }
}

}  // namespace
}  // namespace fg::parity
