// The CPU backend's ops over weights kept as stored (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k,
// q5_k, q6_k): the weight-row kernels of every set this CPU runs (portable, AVX2, AVX-512)
// decode every value bit for bit as core/dequant.h does; gemm (the GEMV path for few rows, the
// decoded-tile sgemm path for many, in parallel or not) and embedding match a double-precision
// reference on the dequantized values, with odd shapes, biases and strided views; and a gemm over
// quantized weights gives exactly the result of the same gemm over an f32 copy of their values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_weight_kernels.h"
#include "backend_test_util.h"
#include "core/dequant.h"
#include "support/weight_blocks.h"

namespace fg {
namespace {

using test::PaddedF32;

std::vector<const cpu::WeightKernels*> kernel_sets() {
  std::vector<const cpu::WeightKernels*> sets = {&cpu::generic_weight_kernels()};
  if (cpu::avx2_weight_kernels_supported()) sets.push_back(&cpu::avx2_weight_kernels());
  if (cpu::avx512_weight_kernels_supported()) sets.push_back(&cpu::avx512_weight_kernels());
  return sets;
}

// A row length with an odd number of blocks; for float dtypes one that is no multiple of the
// kernels' 32-value steps either (the scalar tail).
int64_t odd_k(DType t) {
  if (dtype_block_size(t) == 256) return 3 * 256;
  if (dtype_block_size(t) == 32) return 7 * 32;
  return 3 * 32 + 5;
}

// An [n, k] weight matrix of `dtype`: its stored bytes and their exact f32 values.
struct Weights {
  DType dtype;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [n, k]

  Weights(DType t, int64_t rows, int64_t cols, uint32_t seed)
      : dtype(t), n(rows), k(cols), bytes(test::random_weight_bytes(t, rows * cols, seed)) {
    values.resize(size_t(n * k));
    dequantize(dtype, bytes.data(), values.data(), n * k);
  }
  Tensor view() { return Tensor::contiguous(bytes.data(), dtype, Device::kCpu, {n, k}); }
  Tensor f32_view() { return Tensor::contiguous(values.data(), DType::kF32, Device::kCpu, {n, k}); }
  cpu::WeightRows rows() const { return {bytes.data(), int64_t(dtype_bytes(dtype, k)), k, dtype}; }
};

std::string name_of(DType t) {
  return std::string(dtype_name(t));
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CpuWeightKernels, DecodedRowsAreBitExact) {
  for (const cpu::WeightKernels* set : kernel_sets()) {
    for (DType t : test::weight_dtypes()) {
      Weights w(t, 5, odd_k(t), 100 + uint32_t(t));
      std::vector<float> row(size_t(w.k) + 1);
      for (int64_t j = 0; j < w.n; ++j) {
        row.back() = 12345.0f;  // sentinel past the row
        set->decode_row(w.rows(), j, row.data());
        ASSERT_EQ(row.back(), 12345.0f) << set->name << " " << name_of(t) << " wrote past the row";
        for (int64_t i = 0; i < w.k; ++i)
          ASSERT_EQ(bits(row[size_t(i)]), bits(w.values[size_t(j * w.k + i)]))
              << set->name << " " << name_of(t) << " row " << j << " value " << i << ": " << row[size_t(i)] << " vs "
              << w.values[size_t(j * w.k + i)];
      }
    }
  }
}

// out[r][j] for weight rows [j0, j1) against sums in double, and nothing else written.
TEST(CpuWeightKernels, GemvMatchesDoubleReference) {
  for (const cpu::WeightKernels* set : kernel_sets()) {
    for (DType t : test::weight_dtypes()) {
      Weights w(t, 13, odd_k(t), 200 + uint32_t(t));
      for (int m = 1; m <= cpu::kGemvMaxRows; ++m) {
        for (bool with_bias : {false, true}) {
          const int64_t ldx = w.k + 3, ldo = w.n + 5, j0 = 2, j1 = 11;
          std::vector<float> x = test::random_floats(size_t(m * ldx), uint32_t(m));
          std::vector<float> bias = test::random_floats(size_t(w.n), 7);
          std::vector<float> out(size_t(m * ldo), -7.0f);
          cpu::GemvArgs a;
          a.x = x.data();
          a.ldx = ldx;
          a.out = out.data();
          a.ldo = ldo;
          a.bias = with_bias ? bias.data() : nullptr;
          a.m = m;
          set->gemv(w.rows(), j0, j1, a);
          for (int r = 0; r < m; ++r) {
            for (int64_t j = 0; j < ldo; ++j) {
              const float got = out[size_t(r * ldo + j)];
              if (j < j0 || j >= j1) {
                ASSERT_EQ(got, -7.0f) << set->name << " " << name_of(t) << " wrote outside its rows";
                continue;
              }
              double want = with_bias ? bias[size_t(j)] : 0.0, mag = std::fabs(want);
              for (int64_t i = 0; i < w.k; ++i) {
                const double p = double(x[size_t(r * ldx + i)]) * double(w.values[size_t(j * w.k + i)]);
                want += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30)
                  << set->name << " " << name_of(t) << " m=" << m << " row " << r << " col " << j;
            }
          }
        }
      }
    }
  }
}

class CpuGemm : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

TEST_F(CpuGemm, KeepsEveryStoredWeightDtype) {
  for (DType t : test::weight_dtypes()) EXPECT_EQ(be->weight_dtype(t), t) << name_of(t);
}

// gemm over every weight dtype: few rows (GEMV, one to four passes of 4 rows) and many (decoded
// tiles + sgemm), small and parallel sizes, with and without bias; x a column slice of a wider
// matrix, out with padded rows.
TEST_F(CpuGemm, QuantizedWeightsMatchReference) {
  for (DType t : test::weight_dtypes()) {
    for (int64_t n : {int64_t(37), int64_t(300)}) {
      Weights w(t, n, odd_k(t), 300 + uint32_t(t) + uint32_t(n));
      std::vector<float> bias = test::random_floats(size_t(n), 9);
      Tensor bt = Tensor::contiguous(bias.data(), DType::kF32, Device::kCpu, {n});
      for (int64_t m : {1, 3, 5, 9, 16, 17, 40}) {
        for (bool with_bias : {false, true}) {
          PaddedF32 wide({m, w.k + 9}, 0, uint32_t(m * 7 + n));
          Tensor x = wide.view.narrow_last(4, 4 + w.k);
          PaddedF32 out({m, n}, 2, 18);
          out.poison();
          be->gemm(x, w.view(), with_bias ? &bt : nullptr, out.view);
          out.for_each([&](int64_t i, int64_t j, int64_t) {
            double want = with_bias ? bias[size_t(j)] : 0.0, mag = std::fabs(want);
            for (int64_t kk = 0; kk < w.k; ++kk) {
              const double p = double(wide.at(i, 4 + kk)) * double(w.values[size_t(j * w.k + kk)]);
              want += p;
              mag += std::fabs(p);
            }
            ASSERT_NEAR(out.at(i, j), want, 2e-6 * mag + 1e-30)
                << name_of(t) << " n=" << n << " m=" << m << " bias=" << with_bias << " at " << i << "," << j;
          });
          EXPECT_TRUE(out.untouched_outside()) << name_of(t) << " m=" << m;
        }
      }
    }
  }
}

// The values used are exactly the dequantized ones: the same gemm over an f32 copy of them gives
// bit-identical results (same kernels, same accumulation order), on both paths.
TEST_F(CpuGemm, SameResultsAsF32WeightsOfTheSameValues) {
  for (DType t : test::weight_dtypes()) {
    if (!dtype_is_blocked(t)) continue;
    Weights w(t, 200, odd_k(t), 400 + uint32_t(t));
    for (int64_t m : {1, 4, 7, 20}) {
      std::vector<float> x = test::random_floats(size_t(m * w.k), uint32_t(m));
      Tensor xt = Tensor::contiguous(x.data(), DType::kF32, Device::kCpu, {m, w.k});
      std::vector<float> a(size_t(m * w.n)), b(size_t(m * w.n));
      Tensor at = Tensor::contiguous(a.data(), DType::kF32, Device::kCpu, {m, w.n});
      Tensor bt = Tensor::contiguous(b.data(), DType::kF32, Device::kCpu, {m, w.n});
      be->gemm(xt, w.view(), nullptr, at);
      be->gemm(xt, w.f32_view(), nullptr, bt);
      for (size_t e = 0; e < a.size(); ++e)
        ASSERT_EQ(bits(a[e]), bits(b[e])) << name_of(t) << " m=" << m << " element " << e;
    }
  }
}

TEST_F(CpuGemm, EmbeddingGathersExactRows) {
  for (DType t : test::weight_dtypes()) {
    Weights table(t, 50, odd_k(t), 500 + uint32_t(t));
    std::vector<int32_t> ids = {3, 0, 49, 3, 17, 22, 48, 1, 3};
    PaddedF32 out({int64_t(ids.size()), table.k}, 3, 19);
    out.poison();
    be->embedding(test::view_of(ids), table.view(), out.view);
    out.for_each([&](int64_t i, int64_t j, int64_t) {
      ASSERT_EQ(bits(out.at(i, j)), bits(table.values[size_t(ids[size_t(i)] * table.k + j)]))
          << name_of(t) << " id " << ids[size_t(i)] << " value " << j;
    });
    EXPECT_TRUE(out.untouched_outside());
  }
}

TEST_F(CpuGemm, RejectsWeightRowsThatAreNotWholeBlocks) {
  std::vector<uint8_t> bytes(64 * 20);
  std::vector<float> x(48), out(2);
  Tensor w = Tensor::contiguous(bytes.data(), DType::kQ4_1, Device::kCpu, {2, 48});
  Tensor xt = Tensor::contiguous(x.data(), DType::kF32, Device::kCpu, {1, 48});
  Tensor ot = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {1, 2});
  EXPECT_DEATH(be->gemm(xt, w, nullptr, ot), "gemm: w must be made of whole blocks of 32 values per row");
}

}  // namespace
}  // namespace fg
