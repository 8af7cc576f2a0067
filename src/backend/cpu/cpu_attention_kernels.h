// The CPU attention's arithmetic (cpu_attention.cc holds the op: paging, masks, softmax's order):
// query-key scores, exp and the probability-weighted sum of value rows, one set per instruction
// set like the weight kernels (cpu_weight_kernels.h) and chosen with them, so FG_CPU_KERNELS caps
// both. Each set is the same source (cpu_attention_simd.h) compiled for its vector width
// (cpu_attention_kernels.cc: the portable one; cpu_attention_kernels_x86.cc: AVX2 and AVX-512).
//
// Every result element is one fixed chain of operations over its inputs, whatever the number of
// rows or keys in the call and wherever the element falls in a vector: a score is q . k summed in
// head_dim order, an accumulator element adds p * v in key order. So a query row's result depends
// only on the row and its keys, never on what else shares the call (the op's batch invariance).
#pragma once

#include <cstdint>

namespace fg::cpu {

// `keys` of scores() is a multiple of this; `dim_pad` of accumulate() a multiple of this.
constexpr int64_t kAttnStep = 64;

struct AttentionKernels {
  const char* name;  // the weight kernels' name of the same instruction set
  // kt[d * ldk + j] = rows[j][d] for j < kAttnStep and d < dim: keys transposed, one row per
  // head_dim channel.
  void (*transpose)(const float* const* rows, int64_t dim, float* kt, int64_t ldk);
  // s[r * lds + j] = sum over d < dim, in order, of q[r * ldq + d] * kt[d * ldk + j], for r < rows
  // and j < keys (kt holds the keys transposed: one row per head_dim channel).
  void (*scores)(const float* q, int64_t ldq, int rows, const float* kt, int64_t ldk, int64_t dim, int64_t keys,
                 float* s, int64_t lds);
  // x[j] = exp(x[j] - m) for j < n, within 2 ulp of std::exp; 0 where x[j] - m < -87.33 (below
  // the smallest normal float) or is NaN, so -inf gives 0. m finite.
  void (*exp_shifted)(float* x, int64_t n, float m);
  // acc[r * lda + c] += sum over j < keys, in order, of p[r * ldp + j] * v_rows[j][c], for r < rows
  // and c < dim_pad (each v row holds dim_pad readable floats).
  void (*accumulate)(const float* p, int64_t ldp, int rows, const float* const* v_rows, int64_t keys, int64_t dim_pad,
                     float* acc, int64_t lda);
};

// The portable set (16-byte vectors), and the AVX2 + FMA and AVX-512F ones (only where the weight
// kernels of that set are supported).
const AttentionKernels& generic_attention_kernels();
const AttentionKernels& avx2_attention_kernels();
const AttentionKernels& avx512_attention_kernels();
// The set of the instruction set weight_kernels() chose.
const AttentionKernels& attention_kernels();

}  // namespace fg::cpu
