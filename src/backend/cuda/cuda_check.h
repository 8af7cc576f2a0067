// CUDA_CHECK / CUBLAS_CHECK: the "broken invariant" tier of STYLE.md for CUDA calls. A failing call
// aborts with the expression, the error, file:line and the current device, in release builds too.
// Recoverable conditions (no GPU at all) are reported by make_cuda_backend as a Status instead;
// this header must never be used for those.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace fg::cuda {

[[noreturn]] void cuda_check_failed(const char* expr, const char* error, const char* file, int line);

}  // namespace fg::cuda

#define CUDA_CHECK(expr)                                                                          \
  do {                                                                                            \
    cudaError_t fg_cuda_err_ = (expr);                                                            \
    if (fg_cuda_err_ != cudaSuccess) [[unlikely]]                                                 \
      ::fg::cuda::cuda_check_failed(#expr, cudaGetErrorString(fg_cuda_err_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                              \
  do {                                                                                                  \
    cublasStatus_t fg_cublas_st_ = (expr);                                                              \
    if (fg_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                            \
      ::fg::cuda::cuda_check_failed(#expr, cublasLtGetStatusString(fg_cublas_st_), __FILE__, __LINE__); \
  } while (0)
