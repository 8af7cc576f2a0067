// The decode-sized GEMMs' host side (gemv.h): which devices run them, the checks, the launches
// of gemv_kernel.cuh's kernel.
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_kernel.cuh"

namespace fg::cuda {

namespace {

using gemv::DenseKind;
using gemv::factor_rows;
using gemv::Fp8Kind;
using gemv::gemv_kernel;
using gemv::kWarps;

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

}  // namespace

bool gemv_supported() {
  return running_code_arch() >= gemv::kDenseMinArch;
}

bool gemv_fp8_supported() {
  return running_code_arch() >= gemv::kFp8MinArch;
}

bool gemv_fits(const GemvParams& p) {
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return p.m >= 1 && p.m <= kGemvMaxRows && p.n * p.k * 2 <= kGemvMaxWeightBytes && p.k % 8 == 0 && aligned(p.x) &&
         aligned(p.w) && (p.m == 1 || p.ldx % 8 == 0) && (p.n == 1 || p.ldw % 8 == 0);
}

void launch_gemv(const GemvParams& p, DType in, DType out, cudaStream_t stream) {
  if (p.n == 0) return;
  FG_CHECK(gemv_fits(p),
           "gemv: needs 1 <= m <= 8, n * k * 2 <= 64 MiB, k % 8 == 0 and 16-byte aligned rows of x and w");
  const unsigned grid = unsigned((p.n + 15) / 16);
  dispatch_act(in, [&]<class T>() {
    if (out == DType::kF32)
      launch_kernel(gemv_kernel<DenseKind<T, float>, 1>, grid, kWarps * 32, 0, stream, p);
    else
      launch_kernel(gemv_kernel<DenseKind<T, T>, 1>, grid, kWarps * 32, 0, stream, p);
  });
}

void launch_gemv_fp8(const GemmFp8Params& p, DType out, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  FG_CHECK(p.m <= kGemvFp8MaxRows && p.k % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && (p.w_scale_stride == 0 || p.k <= kGemvFp8MaxBlockK),
           "gemv_fp8: m <= 16, k % 16 == 0 (k <= 65536 with 128-block scales) and 16-byte aligned operands");
  const unsigned grid = unsigned((p.n + 15) / 16);
  dispatch_act(out, [&]<class O>() {
    if (p.w_scale_stride > 0) {
      const size_t table = size_t(p.m <= 8 ? factor_rows<1>(p.k) * 8 : factor_rows<2>(p.k) * 16) * sizeof(float);
      if (p.m <= 8)
        launch_kernel(gemv_kernel<Fp8Kind<O, true>, 1>, grid, kWarps * 32, table, stream, p);
      else
        launch_kernel(gemv_kernel<Fp8Kind<O, true>, 2>, grid, kWarps * 32, table, stream, p);
    } else if (p.m <= 8) {
      launch_kernel(gemv_kernel<Fp8Kind<O, false>, 1>, grid, kWarps * 32, 0, stream, p);
    } else {
      launch_kernel(gemv_kernel<Fp8Kind<O, false>, 2>, grid, kWarps * 32, 0, stream, p);
    }
  });
}

}  // namespace fg::cuda
