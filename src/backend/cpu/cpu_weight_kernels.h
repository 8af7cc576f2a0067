// The CPU backend's kernels over weight rows kept as stored (f32, f16, bf16 and the block-quantized
// dtypes of core/dtype.h): decoding a row to its f32 values and dot products of activation rows
// with weight rows. One set per instruction set, chosen once at run time from the CPU's features
// (cpu_weight_kernels.cc), so the binary runs on any x86-64 and uses AVX2/FMA or AVX-512 where
// they exist.
//
// Exactness, whatever the set: every weight value a kernel uses is bit for bit the f32 value
// core/dequant.h gives (the decoders do the reference's products and sums in its order, in f32;
// their files are compiled with contraction off). Only the accumulation of the dot products
// differs between sets (order, FMA), which the backend contract leaves free.
//
// Nothing here allocates, checks arguments or starts threads: the callers (cpu_gemm.cc) do.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fg::cpu {

// Rows that share one dot-product pass over the weights (decoded once for all of them).
constexpr int kGemvMaxRows = 4;

// A run of weight rows: row j starts at data + j * row_bytes and holds k values of `dtype`
// (k a whole number of blocks).
struct WeightRows {
  const uint8_t* data = nullptr;
  int64_t row_bytes = 0;
  int64_t k = 0;
  DType dtype = DType::kF32;
};

// Activation rows and the output they feed: x row r is x + r * ldx ([k] f32); the result of
// (x row r) . (weight row j) + bias[j] goes to out[r * ldo + j] (f32). bias: [n] f32 or null.
struct GemvArgs {
  const float* x = nullptr;
  int64_t ldx = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  const float* bias = nullptr;
  int m = 0;  // 1 .. kGemvMaxRows
};

struct WeightKernels {
  const char* name;  // "avx512", "avx2" or "generic", for benchmarks and logs
  // dst: [k] f32 = the f32 values of weight row j of w.
  void (*decode_row)(const WeightRows& w, int64_t j, float* dst);
  // For weight rows j in [j0, j1): out[r * ldo + j] = bias[j] + sum_i x[r][i] * w[j][i], r < m.
  void (*gemv)(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a);
  // Activation rows up to which gemm takes the GEMV path (decoding the weights once per
  // kGemvMaxRows rows); above, decoding once into f32 tiles for sgemm is cheaper. Where the two
  // cost the same depends on how fast the set decodes (bench/cpu/cpu_gemm_bench, part c).
  int64_t gemv_max_batch;
};

// The portable kernels (plain C++, any x86-64 or other CPU).
const WeightKernels& generic_weight_kernels();
// The AVX2 + FMA + F16C kernels; only call where avx2_weight_kernels_supported().
const WeightKernels& avx2_weight_kernels();
bool avx2_weight_kernels_supported();
// The AVX-512F kernels (with AVX2, FMA, F16C); only call where avx512_weight_kernels_supported().
const WeightKernels& avx512_weight_kernels();
bool avx512_weight_kernels_supported();
// The best set this CPU runs. FG_CPU_KERNELS=generic or avx2 in the environment caps the choice
// (tests and benchmarks compare the sets).
const WeightKernels& weight_kernels();

// True for the weight dtypes the kernels read.
constexpr bool is_weight_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || dtype_is_blocked(t);
}

}  // namespace fg::cpu
