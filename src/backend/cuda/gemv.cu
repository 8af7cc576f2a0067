// The decode-sized GEMMs' host side (gemv.h): which devices run them, the checks, the launches
// of gemv_kernel.cuh's kernel.
#include <limits>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_kernel.cuh"

namespace fg::cuda {

namespace {

using gemv::allow_gemv_smem;
using gemv::DenseKind;
using gemv::factor_rows;
using gemv::Fp8Kind;
using gemv::gemv_kernel;
using gemv::kWarps;
using gemv::QkvRopeKind;
using gemv::ring_bytes;

// The __CUDA_ARCH__ of the code the device runs (SASS built for it, or PTX of an older target
// compiled by the driver): whether a Kind's mma path was compiled in.
__global__ void code_arch_probe_kernel(int* arch) {
#if defined(__CUDA_ARCH__)
  *arch = __CUDA_ARCH__;
#endif
}

int running_code_arch() {
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return 0;
  int arch = 0;
  code_arch_probe_kernel<<<1, 1>>>(flag);  // plain: a device without code for it fails the launch
  const bool ok =
      cudaGetLastError() == cudaSuccess && cudaMemcpy(&arch, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  (void)cudaFree(flag);
  return ok ? arch : 0;
}

// A CTA per 16 weight rows; `table`: the factor table's bytes (Kind::kChunkScales).
template <class Kind, int kTiles, class Params>
void launch_tiles(size_t table, cudaStream_t stream, const Params& p) {
  launch_kernel(gemv_kernel<Kind, kTiles>, unsigned((p.n + 15) / 16), kWarps * 32, ring_bytes<Kind, kTiles>() + table,
                stream, p);
}

}  // namespace

void init_gemv_kernels() {
  auto each_act = [&]<class T>() {
    allow_gemv_smem<DenseKind<T, float>, 1>();
    allow_gemv_smem<DenseKind<T, T>, 1>();
    allow_gemv_smem<QkvRopeKind<T>, 1>();
  };
  each_act.template operator()<__nv_bfloat16>();
  each_act.template operator()<__half>();
}

bool gemv_supported() {
  return running_code_arch() >= gemv::kDenseMinArch;
}

bool gemv_fp8_supported() {
  return running_code_arch() >= gemv::kFp8MinArch;
}

bool gemv_fits(const GemvParams& p, int64_t max_weight_bytes) {
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return p.m >= 1 && p.m <= kGemvMaxRows && p.n * p.k * 2 <= max_weight_bytes && p.k % 8 == 0 && aligned(p.x) &&
         aligned(p.w) && (p.m == 1 || p.ldx % 8 == 0) && (p.n == 1 || p.ldw % 8 == 0);
}

void launch_gemv(const GemvParams& p, DType in, DType out, cudaStream_t stream) {
  if (p.n == 0) return;
  FG_CHECK(gemv_fits(p, std::numeric_limits<int64_t>::max()),
           "gemv: needs 1 <= m <= 8, k % 8 == 0 and 16-byte aligned rows of x and w");
  dispatch_act(in, [&]<class T>() {
    if (out == DType::kF32)
      launch_tiles<DenseKind<T, float>, 1>(0, stream, p);
    else
      launch_tiles<DenseKind<T, T>, 1>(0, stream, p);
  });
}

bool gemv_rope_fits(const GemvRopeParams& p, int64_t max_weight_bytes) {
  const RopeParams& r = p.rope;
  return gemv_fits(p, max_weight_bytes) && p.m <= 8 && r.head_dim % 16 == 0 && r.rotary_dim == r.head_dim && r.neox &&
         r.q_norm == nullptr && r.kv.slots != nullptr && r.num_q_heads > 0 && r.num_kv_heads > 0 &&
         p.n == int64_t(r.num_q_heads + 2 * r.num_kv_heads) * r.head_dim;
}

void launch_gemv_rope(const GemvRopeParams& p, DType act, cudaStream_t stream) {
  if (p.n == 0) return;
  FG_CHECK(gemv_rope_fits(p, std::numeric_limits<int64_t>::max()),
           "gemv_rope: needs gemv_fits, m <= 8, whole neox rotation of head_dim % 16 == 0, "
           "the KV write and n = (num_q_heads + 2 num_kv_heads) * head_dim");
  dispatch_act(act, [&]<class T>() { launch_tiles<QkvRopeKind<T>, 1>(0, stream, p); });
}

namespace {

// The token tiles of 8 rows a launch of m rows uses (the table's size and the launch both follow it).
int fp8_tiles(int64_t m) {
  return m <= 8 ? 1 : m <= 16 ? 2 : 4;
}

// Bytes of the factor table of m rows of k columns with 128-block scales.
size_t fp8_factor_table_bytes(int64_t m, int64_t k) {
  const int tiles = fp8_tiles(m);
  const int64_t rows = tiles == 1 ? factor_rows<1>(k) : tiles == 2 ? factor_rows<2>(k) : factor_rows<4>(k);
  return size_t(rows * 8 * tiles) * sizeof(float);
}

}  // namespace

bool gemv_fp8_fits(int64_t m, int64_t n, int64_t k, bool blocks) {
  // The table is dynamic shared memory beside the kernel's static partial sums (4 KiB a tile):
  // 48 KiB in all without an opt-in.
  const size_t table_limit = (size_t(48) << 10) - size_t(fp8_tiles(m)) * (4 << 10) - 64;
  return m >= 1 && m <= kGemvFp8MaxRows && (m <= 16 || n * k <= kGemvMaxWeightBytes) && k > 0 && k % 16 == 0 &&
         (!blocks || fp8_factor_table_bytes(m, k) <= table_limit);
}

void launch_gemv_fp8(const GemmFp8Params& p, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  FG_CHECK(gemv_fp8_fits(p.m, p.n, p.k, p.w_scale_stride > 0) && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.w) % 16 == 0,
           "gemv_fp8: m <= 32 (above 16, weights of at most 64 MiB), k % 16 == 0 (with 128-block scales, a "
           "factor table within 48 KiB) and 16-byte aligned operands");
  dispatch_act(out, [&]<class O>() {
    auto tiles = [&]<bool kBlocks>() {
      const size_t table = kBlocks ? fp8_factor_table_bytes(p.m, p.k) : 0;
      switch (fp8_tiles(p.m)) {
        case 1: return launch_tiles<Fp8Kind<O, kBlocks>, 1>(table, stream, p);
        case 2: return launch_tiles<Fp8Kind<O, kBlocks>, 2>(table, stream, p);
        default: return launch_tiles<Fp8Kind<O, kBlocks>, 4>(table, stream, p);
      }
    };
    if (p.w_scale_stride > 0)
      tiles.template operator()<true>();
    else
      tiles.template operator()<false>();
  });
}

}  // namespace fg::cuda
