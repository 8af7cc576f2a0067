// Device code of the prefill specialisation of the attention kernel (see attention.h): a second
// kernel that plan() gives the 128-row tiles of long prefills when nothing of them is split and
// the page size is a power of two >= 8. It shares the work-item records, the tile geometry and
// the mma.sync m16n8k16 fragment layout of attention_kernel.cuh, but drops what prefill does not
// need from the inner loop, so its registers go to a larger key block instead:
//  - one tile shape only (compile time): 128 packed rows x 64 keys per iteration, one warp per
//    32 rows (two m-tiles: each K/V fragment read from shared memory feeds two mma), Q
//    fragments re-read from shared memory; one barrier and one online-softmax rescale of O per
//    64 keys (the general kernel's 128-row shape steps 32 keys);
//  - page ids once per 8 keys instead of per key row: with a power-of-two page size >= 8 the 8
//    keys of an aligned group share a page. Threads 0..7 fetch the ids of block b + 2 while
//    block b is computed and leave them in a small shared ring, so the copies of block b + 1
//    never wait on the block table and the loader holds no page ids in registers;
//  - K/V blocks double-buffered (16-byte cp.async, copy of block b + 1 overlaps the math on
//    block b): 96 KB of shared memory at head_dim 128, two CTAs per SM;
//  - scale folded into the exponent (one FFMA per score), no column-warp merge in the epilogue
//    (each warp stages its own rows through shared memory for 16-byte stores).
// Items it runs are never split (plan() guarantees it), so it always writes out/lse directly.
// This file must never allocate or synchronize the host.
#pragma once

#include "backend/cuda/attention_kernel.cuh"

namespace fg::cuda::attn {

constexpr int kPfRows = 128;          // packed rows per tile (tile kind kRows128)
constexpr int kPfBn = 64;             // keys per iteration (divides kBlockN, so blocks align with splits)
constexpr int kPfGroups = kPfBn / 8;  // page-id entries per key block (one per 8 keys)
constexpr int kPfMinPageSize = 8;

// The page sizes the prefill kernel reads whole 8-key groups from: powers of two >= 8.
constexpr bool prefill_page_size_ok(int page_size) {
  return page_size >= kPfMinPageSize && (page_size & (page_size - 1)) == 0;
}

// Shared memory: Q tile [128][D], two stages of (K, V) blocks [64][D] each, the page-id ring
// [2][kPfGroups] i32.
template <int D>
struct PrefillSmem {
  static constexpr int kQBytes = kPfRows * D * 2;
  static constexpr int kKvBlockBytes = kPfBn * D * 2;
  static constexpr int kPagesOffset = kQBytes + 2 * 2 * kKvBlockBytes;
  static constexpr int kBytes = kPagesOffset + 2 * kPfGroups * 4;
};

template <typename T, int D>
__device__ __forceinline__ void prefill_tile(const KernelParams& p, const WorkItem& it, int kvh, char* smem) {
  constexpr int kKi = D / 16;                       // k-steps of Q.K^T
  constexpr int kDi = D / 8;                        // O n-tiles
  constexpr int kNi = kPfBn / 8;                    // S n-tiles per m-tile
  constexpr int kChunks = D / 8;                    // 16-byte chunks per row
  constexpr int kRowsPerPass = kThreads / kChunks;  // 8 (head_dim 128) or 16 (64)
  constexpr int kPasses = kPfBn / kRowsPerPass;
  using L = PrefillSmem<D>;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int G = p.group;
  T* q_s = reinterpret_cast<T*>(smem);
  T* kv_s = reinterpret_cast<T*>(smem + L::kQBytes);
  uint32_t* pg_s = reinterpret_cast<uint32_t*>(smem + L::kPagesOffset);

  const TileGeom geo = tile_geom(p, it, kPfRows, kPfBn);

  const int warp_row0 = warp * 32;
  auto acc_row = [&](int i) { return warp_row0 + (i >> 1) * 16 + (lane >> 2) + (i & 1) * 8; };
  auto acc_t = [&](int i) { return min(group_div(p, it.m0 + acc_row(i)), it.q_len - 1); };

  // ---- Q tile -> shared (zero rows past the sequence)
  {
    for (int i = tid; i < kPfRows * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = r < geo.rows_valid;
      cp_async16(smem_addr(q_s + swz<D>(r, c)), valid ? q_chunk<T>(p, it, kvh, r, c) : p.q, valid);
    }
  }

  // ---- pages: entry e of block b is the chunk offset (see kv_row_chunk) of the page of key
  // block_begin + 64 b + 8 e (0 past the tile, where the copies zero-fill and never read the table).
  const int* bt = p.block_table + int64_t(it.seq) * p.bt_stride;
  auto page_id = [&](int b, int e) {
    const int j = geo.block_begin + b * kPfBn + 8 * e;
    return j < geo.tile_hi ? uint32_t(__ldg(bt + (j >> p.page_shift))) * p.kv_page_chunks : 0u;
  };
  if (tid < kPfGroups) {
    if (geo.n_blocks > 0) pg_s[tid] = page_id(0, tid);
    if (geo.n_blocks > 1) pg_s[kPfGroups + tid] = page_id(1, tid);
  }
  __syncthreads();

  const int my_row = tid / kChunks;
  const int my_chunk = tid % kChunks;
  const uint4* kbase = kv_head_base<T>(p, p.k, kvh) + my_chunk;
  const uint4* vbase = kv_head_base<T>(p, p.v, kvh) + my_chunk;
  const uint32_t in_page_mask = p.page_size - 1;
  auto load_block = [&](int b) {  // K/V block b -> stage b & 1, pages from ring slot b & 1
    const int j0 = geo.block_begin + b * kPfBn;
    T* ks = kv_s + (b & 1) * 2 * kPfBn * D;
    T* vs = ks + kPfBn * D;
    const uint32_t* pg = pg_s + (b & 1) * kPfGroups;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int rr = my_row + pass * kRowsPerPass;
      const int j = j0 + rr;
      const bool valid = j < geo.tile_hi;
      const uint32_t off = valid ? pg[rr >> 3] + uint32_t(j & in_page_mask) * p.kv_slot_chunks : 0;
      cp_async16(smem_addr(ks + swz<D>(rr, my_chunk)), kbase + off, valid);
      cp_async16(smem_addr(vs + swz<D>(rr, my_chunk)), vbase + off, valid);
    }
  };
  if (geo.n_blocks > 0) load_block(0);
  cp_async_commit();  // one group: Q and block 0

  float o[2][kDi][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < kDi; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m_run[4], l_run[4];  // running max (log2 domain) and sum (this thread's columns) per row
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
  }
  const float sc = p.softcap_log2 != 0.f ? 1.f : p.scale_log2;  // see softmax_step

  // ldmatrix byte offsets. In swz<D>, chunk 2 k + c of a row sits at ((2 k + c) ^ (row & 7)) * 16
  // bytes, which is (c ^ (row & 7)) * 16 XOR k * 32 (rows are D * 2 >= 128 bytes, so the XOR
  // never reaches the row part): one base offset per operand and an XOR per k-step, instead
  // of an address register per k-step.
  constexpr uint32_t kRowBytes = D * 2;
  const uint32_t q_addr = smem_addr(q_s);
  const uint32_t kv_addr = smem_addr(kv_s);
  const uint32_t q_off = (warp_row0 + (lane & 15)) * kRowBytes + (((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t k_off = (((lane >> 4) << 3) + (lane & 7)) * kRowBytes + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  const uint32_t v_off = (lane & 15) * kRowBytes + (((lane >> 4) ^ (lane & 7)) << 4);

  for (int b = 0; b < geo.n_blocks; ++b) {
    const bool fetch = tid < kPfGroups && b + 2 < geo.n_blocks;
    const uint32_t next_page = fetch ? page_id(b + 2, tid) : 0u;
    cp_async_wait<0>();
    __syncthreads();  // block b is in shared memory for every thread; block b - 1 is done
    if (b + 1 < geo.n_blocks) {
      load_block(b + 1);
      cp_async_commit();
    }
    // Ring slot b & 1 held block b's pages, read by load_block(b) before this barrier.
    if (fetch) pg_s[(b & 1) * kPfGroups + tid] = next_page;

    const uint32_t ks_addr = kv_addr + (b & 1) * 2 * PrefillSmem<D>::kKvBlockBytes;
    const uint32_t vs_addr = ks_addr + PrefillSmem<D>::kKvBlockBytes;
    const int j0 = geo.block_begin + b * kPfBn;

    float s[2][kNi][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int i = 0; i < kNi; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKi; ++kk) {
      uint32_t qa[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldsm_x4(q_addr + mt * 16 * kRowBytes + (q_off ^ (kk << 5)), qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
#pragma unroll
      for (int nj = 0; nj < kNi / 2; ++nj) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(ks_addr + nj * 16 * kRowBytes + (k_off ^ (kk << 5)), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma16816<T>(s[mt][2 * nj], qa[mt], b0, b1);
          mma16816<T>(s[mt][2 * nj + 1], qa[mt], b2, b3);
        }
      }
    }

    const bool need_mask = (j0 + kPfBn - 1 > geo.min_hi) || (j0 < geo.max_lo);
    uint32_t pa[2][kPfBn / 16][4];  // P as the A operand of P V, packed per m-tile as soon as it is known
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int ia = 2 * mt, ib = 2 * mt + 1;
      float alpha0, alpha1;
      softmax_step(
          s[mt], p, sc, p.softcap_in, j0, lane, need_mask,
          [&](int& lo_a, int& hi_a, int& lo_b, int& hi_b) {
            const int ta = acc_t(ia), tb = acc_t(ib);
            lo_a = geo.row_lo(ta), hi_a = geo.row_hi(ta), lo_b = geo.row_lo(tb), hi_b = geo.row_hi(tb);
          },
          m_run[ia], m_run[ib], l_run[ia], l_run[ib], alpha0, alpha1);
#pragma unroll
      for (int i = 0; i < kDi; ++i) {
        o[mt][i][0] *= alpha0;
        o[mt][i][1] *= alpha0;
        o[mt][i][2] *= alpha1;
        o[mt][i][3] *= alpha1;
      }
      pack_p<T>(s[mt], pa[mt]);
    }

    // O += P V; each V fragment feeds both m-tiles.
#pragma unroll
    for (int kk = 0; kk < kPfBn / 16; ++kk) {
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(vs_addr + kk * 16 * kRowBytes + (v_off ^ (dn << 5)), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma16816<T>(o[mt][2 * dn], pa[mt][kk], b0, b1);
          mma16816<T>(o[mt][2 * dn + 1], pa[mt][kk], b2, b3);
        }
      }
    }
  }

  // ---- epilogue: each warp normalizes its 32 rows, stages them as T in its own rows of the Q
  // tile (only this warp ever read them), then writes 16-byte chunks per row. The barrier
  // matters when the tile had no key block: Q's copies of other threads may still be landing.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = acc_row(i);
    const int h = i & 1;
    const float inv = l_run[i] > 0.f ? 1.f / l_run[i] : 0.f;
#pragma unroll
    for (int dn = 0; dn < kDi; ++dn)
      *reinterpret_cast<uint32_t*>(q_s + swz<D>(r, dn) + 2 * (lane & 3)) =
          pack2<T>(o[i >> 1][dn][2 * h] * inv, o[i >> 1][dn][2 * h + 1] * inv);
    if ((lane & 3) == 0 && p.lse != nullptr && r < geo.rows_valid) {
      const int pr = it.m0 + r;
      const int t = group_div(p, pr), g = pr - t * G;
      p.lse[int64_t(it.q_start + t) * p.lse_stride_tok + int64_t(kvh * G + g) * p.lse_stride_head] =
          l_run[i] > 0.f ? (m_run[i] + __log2f(l_run[i])) * kLn2 : -INFINITY;
    }
  }
  __syncwarp();
  for (int i = lane; i < 32 * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, c = i % kChunks;
    if (r >= geo.rows_valid) break;  // rows ascend with i
    const int pr = it.m0 + r;
    const int t = group_div(p, pr), g = pr - t * G;
    T* out =
        static_cast<T*>(p.out) + int64_t(it.q_start + t) * p.out_stride_tok + int64_t(kvh * G + g) * p.out_stride_head;
    *reinterpret_cast<uint4*>(out + c * 8) = *reinterpret_cast<const uint4*>(q_s + swz<D>(r, c));
  }
}

// grid.x: work units (prefill item, kv head), strided like attention_kernel so a captured graph
// stays correct under later plans. Items: counts[2] of them from items[counts[3]].
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill_kernel(const __grid_constant__ KernelParams p) {
  pdl_enter();
  extern __shared__ __align__(128) char smem[];
  const int first = p.counts[3];
  const int num_units = p.counts[2] * p.num_kv_heads;
  for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
    const int item = kv_heads_div(p, u);
    const WorkItem it = p.items[first + item];
    prefill_tile<T, D>(p, it, u - item * p.num_kv_heads, smem);
    __syncthreads();
  }
}

}  // namespace fg::cuda::attn
