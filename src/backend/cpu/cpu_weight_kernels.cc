// The portable weight-row kernels (plain C++, decoding through core/dequant.h itself, so their
// values are the reference by construction) and the run-time choice between them and the AVX2
// ones. Compiled with -ffp-contract=off like every file that decodes weights.
#include "backend/cpu/cpu_weight_kernels.h"

#include <cstdlib>
#include <cstring>

#include "core/dequant.h"

namespace fg::cpu {
namespace {

// Values decoded per step of the generic GEMV: a multiple of every block size, small enough for a
// stack buffer in L1.
constexpr int64_t kChunk = 256;

void generic_decode_row(const WeightRows& w, int64_t j, float* dst) {
  dequantize(w.dtype, w.data + j * w.row_bytes, dst, w.k);
}

// sum_i a[i] * b[i] over 8 interleaved partial sums (order free: accumulation, not weight values).
float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void generic_gemv(const WeightRows& w, int64_t j0, int64_t j1, const GemvArgs& a) {
  float chunk[kChunk];
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
    float acc[kGemvMaxRows] = {};
    for (int64_t c = 0; c < w.k; c += kChunk) {
      const int64_t len = w.k - c < kChunk ? w.k - c : kChunk;
      dequantize(w.dtype, row + dtype_bytes(w.dtype, c), chunk, len);
      for (int r = 0; r < a.m; ++r) acc[r] += dot(chunk, a.x + r * a.ldx + c, len);
    }
    const float b = a.bias != nullptr ? a.bias[j] : 0.0f;
    for (int r = 0; r < a.m; ++r) a.out[r * a.ldo + j] = b + acc[r];
  }
}

const WeightKernels kGeneric = {"generic", generic_decode_row, generic_gemv, 2};

const WeightKernels& choose() {
  const char* cap = std::getenv("FG_CPU_KERNELS");
  const bool generic_only = cap != nullptr && std::strcmp(cap, "generic") == 0;
  const bool avx2_at_most = generic_only || (cap != nullptr && std::strcmp(cap, "avx2") == 0);
  if (!avx2_at_most && avx512_weight_kernels_supported()) return avx512_weight_kernels();
  if (!generic_only && avx2_weight_kernels_supported()) return avx2_weight_kernels();
  return kGeneric;
}

}  // namespace

const WeightKernels& generic_weight_kernels() {
  return kGeneric;
}

const WeightKernels& weight_kernels() {
  static const WeightKernels& chosen = choose();  // immutable after the first call
  return chosen;
}

}  // namespace fg::cpu
