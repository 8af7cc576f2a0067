// Kernel launches of the CUDA backend, with programmatic dependent launch (PDL, sm_90 and newer):
// every kernel of the backend is launched through launch_kernel, which lets it start while the
// kernel before it in the stream is still finishing, so its CTAs are resident (and, in graphs, its
// node already launched) when that kernel completes instead of a launch gap later.
//
// The contract every kernel keeps (device side below):
//   - pdl_wait() before its first read of anything the kernel before it may write, and before
//     its first global write (that kernel may still be reading what it would overwrite). It
//     returns once that kernel has completed and its writes are visible. Calling it again is free.
//   - pdl_trigger() only after pdl_wait(): the next kernel may then launch. So when a kernel
//     starts, everything enqueued before the kernel right before it has completed, and what it
//     reads before pdl_wait() must be of that kind: a step's plan and metadata (uploaded by copies
//     at the start of the step), weights, the block table.
// Kernels of other libraries (cuBLASLt, NCCL) are launched plainly: they wait for ours in full,
// and ours wait for theirs at pdl_wait(). The launch is plain before sm_90 and with FG_PDL=0 (the
// switch for measuring what PDL gives, docs/perf.md).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"

namespace fg::cuda {

// Whether launches carry the PDL attribute: the current device is sm_90 or newer and FG_PDL is
// not "0". Decided once per process (on its first call).
bool pdl_enabled();

// The current device's SM count where the kernels on warpgroup MMA run (the build has sm_90a code,
// FG_WGMMA, and the device is sm_90), else 0.
int wgmma_sms();

// launch_kernel with thread-block clusters of `cluster` CTAs along x (sm_90 and newer; 1: none).
template <class... Params, class... Args>
void launch_kernel_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                             unsigned cluster, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  config.attrs = attr;
  config.numAttrs = n;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel_clustered(kernel, grid, block, smem_bytes, stream, 1u, std::forward<Args>(args)...);
}

// Device side: no-ops where the instructions do not exist (a launch without the attribute has no
// early start to wait for either).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The usual prologue: nothing read before the previous kernel is done.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

}  // namespace fg::cuda
