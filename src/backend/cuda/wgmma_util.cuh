// Hopper (sm_90a) building blocks shared by the kernels on warpgroup MMA (the prefill attention
// kernel, attention_wgmma_kernel.cuh, and moe.cu's grouped GEMM): shared-memory matrix
// descriptors, mbarriers, the wgmma fence/commit/wait, the GEMMs' ring of stages and its consumer
// loop, and the generated MMA wrappers. Only compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include <cstdint>

#include "backend/cuda/wgmma_ops.cuh"

namespace fg::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Shared-memory matrix descriptor: 128-byte swizzle, SBO = 1024 (8-row groups), LBO = lbo bytes
// (the panel stride of an MN-major operand; unused by K-major ones).
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// The descriptor of the operand `off` bytes past desc's: shared-memory addresses are below 2^18,
// so the start address field (addr >> 4, the low 14 bits) takes off >> 4 without carrying into
// the next field, and one 32-bit add of the low word makes it.
__device__ __forceinline__ uint64_t wg_desc_plus(uint64_t desc, uint32_t off) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (off >> 4));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives on bar once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Waits until at most one committed group is still running.
__device__ __forceinline__ void wgmma_wait1() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator reads/writes across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[i][e])::"memory");
}

// A position in a ring of kStages shared-memory stages fed by a producer warpgroup: the stage and
// the parity of its current use. Barriers at `bars`: kStages "full" ones (the producer's copies
// landed), then kStages "empty" ones (every consumer thread is done with the stage).
template <int kStages>
struct StageRing {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void next() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// Makes a ring's barriers at bars (thread 0; then the whole block synchronizes): each stage full
// once the producer warpgroup's 128 threads arrive, empty once `consumers` threads do.
template <int kStages>
__device__ __forceinline__ void init_stage_ring(uint32_t bars, int consumers) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bars + 8 * s, 128);
      mbar_init(bars + 8 * (kStages + s), consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// A consumer warpgroup's MMAs over the next `steps` (>= 1) stages of the ring into acc: for each,
// wait until it is full, issue mma(stage) between the wgmma fences and commit, then give the stage
// before it back to the producer once its MMAs are done (so one stage's MMAs run while the next
// are issued); the last stage goes back after all MMAs complete.
template <int kStages, int N, class Mma>
__device__ __forceinline__ void consume_stages(StageRing<kStages>& ring, uint32_t bars, int steps, float (&acc)[N][4],
                                               Mma&& mma) {
  int prev = 0;
  for (int s = 0; s < steps; ++s) {
    mbar_wait(bars + 8 * ring.stage, ring.phase);                   // full
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async bytes -> wgmma reads
    reg_fence(acc);
    wgmma_fence();
    mma(ring.stage);
    wgmma_commit();
    reg_fence(acc);
    if (s > 0) {
      wgmma_wait1();
      mbar_arrive(bars + 8 * (kStages + prev));  // empty
    }
    prev = ring.stage;
    ring.next();
  }
  wgmma_wait0();
  reg_fence(acc);
  mbar_arrive(bars + 8 * (kStages + prev));
}

__device__ __forceinline__ void st_shared16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace fg::cuda
