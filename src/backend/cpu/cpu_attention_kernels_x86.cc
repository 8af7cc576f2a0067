// The x86 vector sets of the CPU attention kernels (cpu_attention_kernels.h): cpu_attention_simd.h
// compiled twice, for AVX2 + FMA (8-lane vectors) and for AVX-512F (16-lane vectors), each in its
// own namespace with its instructions selected after every include, so nothing else in the binary
// is built for them. A set is called only where the weight kernels of the same set were chosen,
// i.e. on a CPU that has its instructions. Compiled with contraction on: every multiply-add is one
// FMA.
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cpu/cpu_attention_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace fg::cpu::avx2_set {
namespace {
#define FG_ATTN_VBYTES 32
#include "backend/cpu/cpu_attention_simd.h"
#undef FG_ATTN_VBYTES
}  // namespace
const AttentionKernels kSet = {"avx2", transpose, scores, exp_shifted, accumulate};
}  // namespace fg::cpu::avx2_set
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
namespace fg::cpu::avx512_set {
namespace {
#define FG_ATTN_VBYTES 64
#include "backend/cpu/cpu_attention_simd.h"
#undef FG_ATTN_VBYTES
}  // namespace
const AttentionKernels kSet = {"avx512", transpose, scores, exp_shifted, accumulate};
}  // namespace fg::cpu::avx512_set
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace fg::cpu {

const AttentionKernels& avx2_attention_kernels() {
  return avx2_set::kSet;
}
const AttentionKernels& avx512_attention_kernels() {
  return avx512_set::kSet;
}

}  // namespace fg::cpu

#else  // not x86: the portable set only

namespace fg::cpu {

const AttentionKernels& avx2_attention_kernels() {
  return generic_attention_kernels();
}
const AttentionKernels& avx512_attention_kernels() {
  return generic_attention_kernels();
}

}  // namespace fg::cpu

#endif
