// Abort path of CUDA_CHECK / CUBLAS_CHECK (cuda_check.h).
#include "backend/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>

namespace fg::cuda {

void cuda_check_failed(const char* expr, const char* error, const char* file, int line) {
  int device = -1;
  // The device query itself may fail in a broken context; report -1 then.
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  std::fprintf(stderr, "flashgen: CUDA call failed: %s -> %s at %s:%d (device %d)\n", expr, error, file, line, device);
  std::fflush(stderr);
  std::abort();
}

}  // namespace fg::cuda
