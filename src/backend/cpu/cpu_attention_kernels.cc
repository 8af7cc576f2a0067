// The portable set of the CPU attention kernels (16-byte vectors: SSE2 on any x86-64, NEON
// elsewhere) and the choice of set, which follows the weight kernels' (cpu_attention_kernels.h).
#include "backend/cpu/cpu_attention_kernels.h"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "backend/cpu/cpu_weight_kernels.h"

namespace fg::cpu {
namespace {

#define FG_ATTN_VBYTES 16
#include "backend/cpu/cpu_attention_simd.h"
#undef FG_ATTN_VBYTES

const AttentionKernels kGeneric = {"generic", transpose, scores, exp_shifted, accumulate};

const AttentionKernels& choose() {
  const std::string_view name = weight_kernels().name;
  if (name == "avx512") return avx512_attention_kernels();
  if (name == "avx2") return avx2_attention_kernels();
  return kGeneric;
}

}  // namespace

const AttentionKernels& generic_attention_kernels() {
  return kGeneric;
}

const AttentionKernels& attention_kernels() {
  static const AttentionKernels& chosen = choose();  // immutable after the first call
  return chosen;
}

}  // namespace fg::cpu
