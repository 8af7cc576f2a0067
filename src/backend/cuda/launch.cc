// pdl_enabled (launch.cuh): decided once per process; wgmma_sms.
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

int wgmma_sms() {
#if defined(FG_WGMMA)
  int dev = 0, major = 0, minor = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (major == 9 && minor == 0) return sms;
#endif
  return 0;
}

}  // namespace fg::cuda
