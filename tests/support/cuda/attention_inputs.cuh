// Inputs of the attention correctness sweep (attention_check.cu) and of attention_bench: CUDA
// error checks, seeded random fills (never zeros), and a paged batch (q, a fragmented KV page
// pool, block table, metadata) built on the device.
// Test and benchmark code only: it allocates freely and must never be linked into the server.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.h"

namespace fg::bench {

#define BENCH_CUDA(expr)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

// An attention plan (cuda::AttentionKernel) with a workspace of its own; the engine's plans get
// theirs from the backend's arena (Backend::make_attention_plan).
struct BenchKernel {
  BenchKernel(int max_total_q, int max_num_seqs)
      : workspace(alloc_workspace(max_total_q, max_num_seqs)), kernel(max_total_q, max_num_seqs, workspace) {}
  ~BenchKernel() { cudaFree(workspace); }
  BenchKernel(const BenchKernel&) = delete;
  BenchKernel& operator=(const BenchKernel&) = delete;

  void* workspace;  // before kernel: made first, freed last
  cuda::AttentionKernel kernel;

 private:
  static void* alloc_workspace(int max_total_q, int max_num_seqs) {
    void* p = nullptr;
    BENCH_CUDA(cudaMalloc(&p, cuda::AttentionKernel::workspace_bytes(max_total_q, max_num_seqs)));
    return p;
  }
};

__device__ __forceinline__ uint32_t hash_u32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return uint32_t(x);
}

// Uniform in [lo, hi) from (seed, index); with lo < 0 < hi an exact zero is vanishingly rare.
template <typename T>
__global__ void fill_uniform_kernel(T* p, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = (hash_u32(seed * 0x9e3779b97f4a7c15ULL + uint64_t(i)) >> 8) * (1.0f / 16777216.0f);
    p[i] = T(lo + (hi - lo) * u);
  }
}

template <typename T>
inline void fill_uniform(T* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t st = nullptr) {
  const int grid = int(std::min<int64_t>((n + 255) / 256, 8192));
  fill_uniform_kernel<T><<<std::max(grid, 1), 256, 0, st>>>(p, n, lo, hi, seed);
  BENCH_CUDA(cudaGetLastError());
}

inline void fill_act(void* p, DType dt, int64_t n, uint64_t seed, cudaStream_t st = nullptr) {
  if (dt == DType::kBF16)
    fill_uniform(static_cast<__nv_bfloat16*>(p), n, -1.f, 1.f, seed, st);
  else
    fill_uniform(static_cast<__half*>(p), n, -1.f, 1.f, seed, st);
}

// The metadata of one ragged batch plus a paged KV layout (pages randomly permuted).
struct PagedLayout {
  std::vector<int32_t> q_lens, kv_lens;
  std::vector<int32_t> cu_seqlens_q, block_table;  // host copies
  int page_size = 16;
  int max_pages = 0;  // per sequence (block_table row length)
  int num_pages = 0;  // pages in the pool (all used)
  int total_q = 0;
  int64_t total_kv = 0;

  PagedLayout(std::vector<int32_t> ql, std::vector<int32_t> kl, int ps, uint64_t seed, int extra_pages = 0)
      : q_lens(std::move(ql)), kv_lens(std::move(kl)), page_size(ps) {
    const int n = int(q_lens.size());
    cu_seqlens_q.assign(n + 1, 0);
    for (int i = 0; i < n; ++i) {
      cu_seqlens_q[i + 1] = cu_seqlens_q[i] + q_lens[i];
      max_pages = std::max(max_pages, (kv_lens[i] + ps - 1) / ps);
      total_kv += kv_lens[i];
    }
    total_q = cu_seqlens_q[n];
    max_pages = std::max(max_pages, 1);
    int used = 0;
    for (int i = 0; i < n; ++i) used += (kv_lens[i] + ps - 1) / ps;
    num_pages = used + extra_pages;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_table.assign(size_t(n) * max_pages, 0);
    int next = 0;
    for (int i = 0; i < n; ++i) {
      const int pages = (kv_lens[i] + ps - 1) / ps;
      for (int j = 0; j < pages; ++j) block_table[size_t(i) * max_pages + j] = perm[next++];
    }
  }
  int num_seqs() const { return int(q_lens.size()); }
};

// Device copies of a PagedLayout's metadata, as the AttentionBatch the kernel takes.
struct DeviceBatch {
  int32_t* d_cu = nullptr;
  int32_t* d_kv = nullptr;
  int32_t* d_bt = nullptr;
  AttentionBatch batch;

  explicit DeviceBatch(const PagedLayout& l) {
    const int n = l.num_seqs();
    BENCH_CUDA(cudaMalloc(&d_cu, (n + 1) * sizeof(int32_t)));
    BENCH_CUDA(cudaMalloc(&d_kv, std::max(n, 1) * sizeof(int32_t)));
    BENCH_CUDA(cudaMalloc(&d_bt, std::max<size_t>(l.block_table.size(), 1) * sizeof(int32_t)));
    BENCH_CUDA(cudaMemcpy(d_cu, l.cu_seqlens_q.data(), (n + 1) * sizeof(int32_t), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_kv, l.kv_lens.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_bt, l.block_table.data(), l.block_table.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    batch.cu_seqlens_q = Tensor::contiguous(d_cu, DType::kI32, Device::kCuda, {n + 1});
    batch.seqlens_kv = Tensor::contiguous(d_kv, DType::kI32, Device::kCuda, {n});
    batch.block_table = Tensor::contiguous(d_bt, DType::kI32, Device::kCuda, {n, l.max_pages});
    batch.num_seqs = n;
    batch.total_q = l.total_q;
    batch.max_q_len = *std::max_element(l.q_lens.begin(), l.q_lens.end());
    batch.max_kv_len = *std::max_element(l.kv_lens.begin(), l.kv_lens.end());
    batch.page_size = l.page_size;
    batch.host_cu_seqlens_q = l.cu_seqlens_q;
    batch.host_seqlens_kv = l.kv_lens;
  }
  ~DeviceBatch() {
    cudaFree(d_cu);
    cudaFree(d_kv);
    cudaFree(d_bt);
  }
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
};

}  // namespace fg::bench
