// pdl_enabled (launch.cuh): decided once per process.
#include "backend/cuda/launch.cuh"

#include <cstdlib>
#include <cstring>

namespace fg::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("FG_PDL");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace fg::cuda
