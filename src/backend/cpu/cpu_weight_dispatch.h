// The dtype switch the vector weight-kernel sets share (cpu_weight_kernels_avx2.cc and
// cpu_weight_kernels_avx512.cc). Each set defines its own decoders, built from its own
// instructions, and names them in a struct with one member type per dtype (F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). The switch runs once per call (a whole range of rows), so it
// needs no special instructions itself; the set's lambda it calls carries them.
#pragma once

#include "core/dtype.h"

namespace fg::cpu {

// Calls fn.template operator()<D>() with Decoders' decoder for `dtype`; false when it has none
// (the caller falls back to the generic kernels).
template <class Decoders, class Fn>
bool with_decoder(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn.template operator()<typename Decoders::F32>(); return true;
    case DType::kF16: fn.template operator()<typename Decoders::F16>(); return true;
    case DType::kBF16: fn.template operator()<typename Decoders::BF16>(); return true;
    case DType::kQ8_0: fn.template operator()<typename Decoders::Q8_0>(); return true;
    case DType::kQ4_0: fn.template operator()<typename Decoders::Q4_0>(); return true;
    case DType::kQ4_1: fn.template operator()<typename Decoders::Q4_1>(); return true;
    case DType::kQ4_K: fn.template operator()<typename Decoders::Q4_K>(); return true;
    case DType::kQ5_K: fn.template operator()<typename Decoders::Q5_K>(); return true;
    case DType::kQ6_K: fn.template operator()<typename Decoders::Q6_K>(); return true;
    default: return false;
  }
}

}  // namespace fg::cpu
