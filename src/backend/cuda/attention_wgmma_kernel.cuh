// Device code of the Hopper prefill kernel (sm_90a only): the unsplit 128-row tiles of long
// prefills on warpgroup MMA (wgmma), with a producer warpgroup gathering K/V pages. On other
// architectures attention_prefill_kernel.cuh (mma.sync) runs the same tiles; plan() picks one.
//
// One CTA per SM, persistent over the prefill work units (item, kv head), 384 threads:
//  - warpgroup 0, the producer: gathers each tile's Q (128 packed rows, as attention_kernel.cuh
//    packs them) and its K/V blocks of WgmmaSmem::kBn keys (128 for act-dtype pages at head_dim
//    128, else 64) through the block table (any page size) with 16-byte cp.async into
//    128-byte-swizzled shared memory; each copy batch signals an mbarrier when it lands
//    (cp.async.mbarrier.arrive.noinc). A tile's first K/V block is fetched before its Q, so the
//    ring (WgmmaSmem::kStages) keeps filling across tiles; Q is double-buffered where shared memory
//    allows (64-key blocks below head_dim 256);
//  - warpgroups 1 and 2, the consumers: 64 rows each. Per key block: S = Q K^T as a chain of
//    m64nBk16 wgmma (B = the block's keys) with both operands in shared memory, the online
//    softmax on the S accumulators in registers (scale folded into the exponent, FlashAttention-2
//    rescaling), then O += P V as m64nDk16 wgmma with P from registers and V read MN-major
//    (transposed) from shared memory. Within a warpgroup, S of block b + 1 is issued ahead of P V
//    of block b (but ptxas moves the wait for P V ahead of the softmax: see the loop); between
//    the two warpgroups, named barriers make them take turns issuing (ping-pong), so one's
//    softmax runs under the other's MMAs. A consumer releases a stage (mbarrier arrive) once its
//    P V is done.
// Work units are dealt to the persistent CTAs in a snake (wg_unit), most keys first.
// Shared memory (head_dim 128): act-dtype pages one 32 KB Q buffer + 3 x 64 KB K/V stages
// (224 KB), fp8 pages 2 x 32 KB Q + 4 x 32 KB stages (192 KB). At head_dim 256 (the only prefill
// kernel of that size: has_wide_tiles) one 64 KB Q buffer and two 64 KB stages (192 KB), O as
// m64n256 (128 registers per consumer thread). Where the consumers need more than the 168
// registers the launch bounds leave (128-key blocks, head_dim 256) the producer gives them some
// (setmaxnreg, WgmmaSmem).
// Layout of every operand tile: 64-column panels (D / 64 of them); in a panel, row r at r * 128
// bytes, 16-byte chunk c of the row at ((c ^ (r & 7)) * 16): the hardware's 128-byte swizzle, so
// descriptors use swizzle mode 1 with 1024-byte 8-row groups (SBO) and panels 1024-aligned.
// Items it runs are never split (plan() guarantees it), so it always writes out/lse directly.
// An fp8 KV cache (KV = __nv_fp8_e4m3): the producer loads each K/V block's e4m3 rows into
// registers (before it waits for the stage to be free), converts them to bf16 (exact) and stores
// them swizzled into the same stage layout, then fences them for the async proxy and arrives; the
// consumers fold the kv head's K scale into the score factor and its V scale into 1 / l.
// This file must never allocate or synchronize the host.
#pragma once

#include "backend/cuda/attention_kernel.cuh"
#include "backend/cuda/wgmma_util.cuh"

namespace fg::cuda::attn {

constexpr int kWgRows = 128;     // packed rows per tile (tile kind kRows128)
constexpr int kWgThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kWgConsumers = 256;

// Per head size and KV dtype: keys per K/V block (kBn), the K/V ring's depth, Q buffers, and the
// registers the producer warpgroup gives the consumers (setmaxnreg; 0: none, every thread keeps
// the 168 the launch bounds leave). Act-dtype pages at head_dim 128 take 128-key blocks: half the
// per-key cost of what runs once a block (O's rescale, the row max's shuffles, barriers and
// descriptors); S (64 f32), O (64) and two P sets (32 + 32) need the consumers at 216 registers,
// and the producer's 56 hold a whole block's row offsets. fp8 pages keep 64-key blocks: their
// producer converts rows in registers, and at 128 keys measured 12-30 % slower with two rows a
// batch (within 40 or 56 registers) and up to 18 % with four (docs/perf.md, twenty-fourth and
// twenty-fifth sessions).
template <typename KV, int D>
struct WgmmaSmem {
  static constexpr int kBn = D == 128 && !kv_is_fp8<KV>() ? 128 : 64;
  static constexpr int kStages = kBn == 128 ? 3 : D <= 128 ? 4 : 2;  // K/V ring depth
  static constexpr int kQBufs = kBn == 128 || D == 256 ? 1 : 2;      // Q buffers
  static constexpr int kProducerRegs = kBn == 128 ? 56 : D == 256 ? 40 : 0;
  static constexpr int kConsumerRegs = kBn == 128 ? 216 : D == 256 ? 232 : 0;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * 384, "the registers the launch bounds leave");
  static constexpr int kQBytes = kWgRows * D * 2;  // one Q buffer
  static constexpr int kQPanel = kWgRows * 128;    // bytes per 64-column panel of Q
  static constexpr int kKvBytes = kBn * D * 2;     // one K (or V) block
  static constexpr int kKvPanel = kBn * 128;
  static constexpr int kStageBytes = 2 * kKvBytes;  // K then V
  static constexpr int kKvOffset = kQBufs * kQBytes;
  static constexpr int kBarOffset = kKvOffset + kStages * kStageBytes;
  static constexpr int kNumBars = 2 * kStages + 2 * kQBufs;  // full[S], empty[S], q_full[Q], q_empty[Q]
  // + 1 KB so the kernel can align the base to the 1024 bytes the swizzle atoms need.
  static constexpr int kBytes = kBarOffset + kNumBars * 8 + 1024;
  static_assert(kBytes <= 232448, "within the shared memory an sm_90 block may opt into");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The chunk offset (kv_row_chunk) of key j's row, or of the tile's last key's row when j is past
// it (the caller zero-fills that row): no branch around the table read, so a block's reads issue
// back to back (under `j < tile_hi ? ... : 0` ptxas put each under a branch, one after another).
__device__ __forceinline__ uint32_t wg_row_chunk(const KernelParams& p, const int* bt, int j, int tile_hi) {
  j = min(j, tile_hi - 1);
  return kv_row_chunk(p, __ldg(bt + page_index(p, j)), j);
}

// The work unit a CTA takes in its round `r`: the units (most keys first, as plan() orders them)
// dealt out in a snake, forward in even rounds and backward in odd ones, so that every CTA's
// rounds add up to about the same number of keys (a plain stride gives CTA 0 the longest unit of
// every round). Only the last round is partial: a CTA stops at its first unit past the end.
__device__ __forceinline__ int wg_unit(int r) {
  return r * int(gridDim.x) + ((r & 1) ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x));
}

// fp8 pages: K/V block b of a tile into `stage` as bf16, as load_block's cp.async would have
// laid out the act-dtype rows. Thread tid handles 16-byte e4m3 chunk tid % (D / 16) of rows
// tid / (D / 16) + k * (128 / (D / 16)). The rows are loaded into registers kBatch passes at a
// time, the first batch before waiting for the stage to be free: every pass up to head_dim 128;
// at 256 (eight passes, 64 registers of K/V alone) two, within the producer's 40 registers.
template <typename T, int D>
__device__ __forceinline__ void wg_load_fp8_block(const KernelParams& p, const TileGeom& g, const int* bt,
                                                  const uint4* kbase, const uint4* vbase, int b, uint32_t empty_bar,
                                                  uint32_t empty_parity, uint32_t full_bar, uint32_t k_stage) {
  using L = WgmmaSmem<__nv_fp8_e4m3, D>;
  constexpr int kChunks8 = D / 16;              // 16-byte e4m3 chunks per row
  constexpr int kRowsPerPass = 128 / kChunks8;  // 32 (head_dim 64), 16 (128) or 8 (256)
  constexpr int kPasses = L::kBn / kRowsPerPass;
  constexpr int kBatch = L::kProducerRegs == 0 ? kPasses : 2;
  static_assert(kPasses % kBatch == 0, "batches cover the block");
  const int c = threadIdx.x % kChunks8;
  const int r0 = threadIdx.x / kChunks8;
  const int j0 = g.block_begin + b * L::kBn;
#pragma unroll 1
  for (int p0 = 0; p0 < kPasses; p0 += kBatch) {
    uint4 kr[kBatch], vr[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int j = j0 + r0 + (p0 + i) * kRowsPerPass;
      const uint32_t off = wg_row_chunk(p, bt, j, g.tile_hi);
      kr[i] = __ldg(kbase + off);
      vr[i] = __ldg(vbase + off);
      if (j >= g.tile_hi) kr[i] = vr[i] = make_uint4(0, 0, 0, 0);
    }
    if (p0 == 0) mbar_wait(empty_bar, empty_parity);
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + (p0 + i) * kRowsPerPass;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        uint4 lo, hi;
        e4m3x16_to<T>(kv == 0 ? kr[i] : vr[i], lo, hi);
        const uint32_t row = k_stage + kv * L::kKvBytes + r * 128;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int cc = 2 * c + h;  // bf16 chunk of the row
          st_shared16(row + (cc >> 3) * L::kKvPanel + (((cc & 7) ^ (r & 7)) << 4), h == 0 ? lo : hi);
        }
      }
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // st.shared -> the wgmma reads
  mbar_arrive(full_bar);
}

template <typename T, typename KV, int D>
__device__ __forceinline__ void wg_producer(const KernelParams& p, uint32_t base, int first, int num_units) {
  using L = WgmmaSmem<KV, D>;
  constexpr int kStages = L::kStages;
  constexpr int kChunks = D / 8;               // 16-byte chunks per row
  constexpr int kRowsPerPass = 128 / kChunks;  // 16 (head_dim 64), 8 (128) or 4 (256)
  const int tid = threadIdx.x;                 // 0..127
  const int c = tid % kChunks;
  const int r0 = tid / kChunks;
  // The swizzled chunk offset of this thread's row r0 + pass * kRowsPerPass: fixed when rows
  // step by a multiple of 8 (head_dim <= 128), else it alternates between two values.
  const uint32_t chunk_off = ((c & 7) ^ (r0 & 7)) << 4;
  auto row_off = [&](int pass) -> uint32_t {
    if constexpr (kRowsPerPass % 8 == 0) {
      return chunk_off;
    } else {
      return ((c & 7) ^ ((r0 + pass * kRowsPerPass) & 7)) << 4;
    }
  };
  const int panel = c >> 3;

  int stage = 0;
  uint32_t phase = 0;
  int local = 0;
  for (int u = wg_unit(0); u < num_units; u = wg_unit(++local)) {
    const int item = kv_heads_div(p, u);
    const WorkItem it = p.items[first + item];
    const int kvh = u - item * p.num_kv_heads;
    const TileGeom g = tile_geom(p, it, kWgRows, L::kBn);

    const int* bt = p.block_table + int64_t(it.seq) * p.bt_stride;
    auto load_block = [&](int b) {  // K/V block b -> the next ring stage
      const uint32_t empty_bar = base + L::kBarOffset + 8 * (kStages + stage);
      const uint32_t full_bar = base + L::kBarOffset + 8 * stage;
      if constexpr (kv_is_fp8<KV>()) {
        wg_load_fp8_block<T, D>(p, g, bt, kv_head_base<KV>(p, p.k, kvh) + tid % (D / 16),
                                kv_head_base<KV>(p, p.v, kvh) + tid % (D / 16), b, empty_bar, phase ^ 1, full_bar,
                                base + L::kKvOffset + stage * L::kStageBytes);
      } else {
        const uint4* kbase = kv_head_base<T>(p, p.k, kvh) + c;
        const uint4* vbase = kv_head_base<T>(p, p.v, kvh) + c;
        const int j0 = g.block_begin + b * L::kBn;
        // The rows' page-table reads and offsets of the first kEarly passes (all of them, except
        // within the 40 registers of head_dim 256: a quarter) before the wait for the stage to be
        // free: their latency runs while the consumers finish with it.
        constexpr int kPasses = L::kBn / kRowsPerPass;
        constexpr int kEarly = L::kProducerRegs == 40 ? kPasses / 4 : kPasses;
        auto row_chunk = [&](int pass) { return wg_row_chunk(p, bt, j0 + r0 + pass * kRowsPerPass, g.tile_hi); };
        uint32_t early[kEarly];
#pragma unroll
        for (int pass = 0; pass < kEarly; ++pass) early[pass] = row_chunk(pass);
        mbar_wait(empty_bar, phase ^ 1);
        const uint32_t k_dst = base + L::kKvOffset + stage * L::kStageBytes + panel * L::kKvPanel;
        const uint32_t v_dst = k_dst + L::kKvBytes;
        auto copy_row = [&](int pass, uint32_t off) {
          const int r = r0 + pass * kRowsPerPass;
          const bool valid = j0 + r < g.tile_hi;
          cp_async16(k_dst + r * 128 + row_off(pass), kbase + off, valid);
          cp_async16(v_dst + r * 128 + row_off(pass), vbase + off, valid);
        };
#pragma unroll
        for (int pass = 0; pass < kEarly; ++pass) {
          copy_row(pass, early[pass]);
        }
        // The rest (head_dim 256) four passes at a time: their reads batched within the registers.
#pragma unroll 4
        for (int pass = kEarly; pass < kPasses; ++pass) {
          copy_row(pass, row_chunk(pass));
        }
        mbar_arrive_cp_async(full_bar);
      }
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    };

    // The tile's first K/V block goes out before its Q, which waits for the previous tile's
    // last Q K^T: the ring keeps filling across the tile boundary.
    if (g.n_blocks > 0) load_block(0);
    const int qb = local % L::kQBufs;
    mbar_wait(base + L::kBarOffset + 8 * (2 * kStages + L::kQBufs + qb), ((local / L::kQBufs) & 1) ^ 1);  // q_empty
    const uint32_t q_dst = base + qb * L::kQBytes + panel * L::kQPanel;
#pragma unroll 4
    for (int pass = 0; pass < kWgRows / kRowsPerPass; ++pass) {
      const int r = r0 + pass * kRowsPerPass;
      const bool valid = r < g.rows_valid;
      cp_async16(q_dst + r * 128 + row_off(pass), valid ? q_chunk<T>(p, it, kvh, r, c) : p.q, valid);
    }
    mbar_arrive_cp_async(base + L::kBarOffset + 8 * (2 * kStages + qb));  // q_full
    for (int b = 1; b < g.n_blocks; ++b) load_block(b);
  }
}

template <typename T, typename KV, int D>
__device__ __forceinline__ void wg_consumer(const KernelParams& p, uint32_t base, int first, int num_units) {
  using L = WgmmaSmem<KV, D>;
  constexpr int kStages = L::kStages;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kDi = D / 8;  // O n-tiles
  constexpr int kBn = L::kBn;
  constexpr int kNi = kBn / 8;   // S n-tiles
  constexpr int kPk = kBn / 16;  // k-steps of P V
  const int ctid = threadIdx.x - 128;
  // Consumer warpgroup: rows 64 wg .. 64 wg + 63. Read through a shuffle from lane 0 so the
  // compiler knows it is the same in every lane: the descriptors derived from it stay in uniform
  // registers instead of moving there (R2UR) before every wgmma.
  const int wg = __shfl_sync(0xffffffffu, ctid >> 7, 0);
  const int warp = (ctid >> 5) & 3;
  const int lane = ctid & 31;
  const int G = p.group;
  const int row_a = 64 * wg + 16 * warp + (lane >> 2);  // this thread's accumulator rows
  const int row_b = row_a + 8;
  const uint32_t bars = base + L::kBarOffset;
  auto full_bar = [&](int st) { return bars + 8 * st; };
  auto empty_bar = [&](int st) { return bars + 8 * (kStages + st); };

  int stage = 0;
  uint32_t phase = 0;
  int local = 0;
  // Warpgroup 0 issues first: warpgroup 1 pre-arrives on its barrier (matched by a last wait of
  // warpgroup 0 after the loop, so no arrival is left pending at exit).
  if (wg == 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
  float s[kNi][4];
#pragma unroll
  for (int i = 0; i < kNi; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
  for (int u = wg_unit(0); u < num_units; u = wg_unit(++local)) {
    const int item = kv_heads_div(p, u);
    const WorkItem it = p.items[first + item];
    const int kvh = u - item * p.num_kv_heads;
    const TileGeom g = tile_geom(p, it, kWgRows, kBn);
    const int qb = local % L::kQBufs;
    const uint32_t q_empty = bars + 8 * (2 * kStages + L::kQBufs + qb);
    mbar_wait(bars + 8 * (2 * kStages + qb), (local / L::kQBufs) & 1);  // q_full
    if (g.n_blocks == 0) mbar_arrive(q_empty);
    const uint32_t q_addr = base + qb * L::kQBytes + 64 * wg * 128;
    const int ta = min(group_div(p, it.m0 + row_a), it.q_len - 1);
    const int tb = min(group_div(p, it.m0 + row_b), it.q_len - 1);
    // fp8 pages: the kv head's K scale joins softmax_step's score factors, its V scale O's 1 / l.
    const float k_scale = kv_is_fp8<KV>() ? p.k_scale[kvh] : 1.f;
    const float v_scale = kv_is_fp8<KV>() ? p.v_scale[kvh] : 1.f;
    const float sc = p.softcap_log2 != 0.f ? 1.f : p.scale_log2 * k_scale;  // see softmax_step
    const float cap_in = p.softcap_in * k_scale;

    float o[kDi][4];
#pragma unroll
    for (int i = 0; i < kDi; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows a, b (log2 domain)
    uint32_t pa[kPk][4];  // P of the block whose P V is next, as the register A operand

    // Waits until the block in stage `st` has landed, and orders its cp.async bytes (and Q's)
    // before the async proxy (wgmma) reads them. Kept outside the fence..wgmma sequences: a
    // branch between wgmma.fence and wgmma makes ptxas serialize every wgmma.
    auto wait_full = [&](int st, uint32_t ph) {
      mbar_wait(full_bar(st), ph);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    };
    // S = Q K^T of the block in `st` (64 x kBn per warpgroup), both operands from shared memory.
    auto issue_s = [&](int st) {
      const uint64_t da0 = wg_desc(q_addr, 16);
      const uint64_t db0 = wg_desc(base + L::kKvOffset + st * L::kStageBytes, 16);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk & 3) * 32;  // k-step within a 128-byte panel row
        const uint64_t da = wg_desc_plus(da0, (kk >> 2) * L::kQPanel + off);
        const uint64_t db = wg_desc_plus(db0, (kk >> 2) * L::kKvPanel + off);
        if constexpr (kBn == 128) {
          wgmma_ss_n128<kBf16>(s, da, db, kk > 0 ? 1 : 0);
        } else {
          wgmma_ss_n64<kBf16>(s, da, db, kk > 0 ? 1 : 0);
        }
      }
    };
    // O += P V of the block in `st`: V MN-major (keys are the k dimension), panels LBO apart.
    auto issue_pv = [&](int st) {
      const uint64_t dv0 = wg_desc(base + L::kKvOffset + st * L::kStageBytes + L::kKvBytes, L::kKvPanel);
#pragma unroll
      for (int kk = 0; kk < kPk; ++kk) {
        const uint64_t dv = wg_desc_plus(dv0, kk * 16 * 128);
        if constexpr (D == 256) {
          wgmma_rs_n256<kBf16>(o, pa[kk], dv);
        } else if constexpr (D == 128) {
          wgmma_rs_n128<kBf16>(o, pa[kk], dv);
        } else {
          wgmma_rs_n64<kBf16>(o, pa[kk], dv);
        }
      }
    };
    // Online softmax of block b (scores in s) for this thread's two rows: updates m and l, packs
    // P into p_out and returns the factors O must be rescaled by before this block's P V.
    auto softmax = [&](int b, uint32_t(&p_out)[kPk][4], float& alpha0, float& alpha1) {
      const int j0 = g.block_begin + b * kBn;
      softmax_step(
          s, p, sc, cap_in, j0, lane, (j0 + kBn - 1 > g.min_hi) || (j0 < g.max_lo),
          [&](int& lo_a, int& hi_a, int& lo_b, int& hi_b) {
            lo_a = g.row_lo(ta), hi_a = g.row_hi(ta), lo_b = g.row_lo(tb), hi_b = g.row_hi(tb);
          },
          m0, m1, l0, l1, alpha0, alpha1);
      pack_p<T>(s, p_out);
    };
    auto keep = [](uint32_t(&r)[kPk][4]) {  // r stays live (the in-flight P V reads it)
#pragma unroll
      for (int kk = 0; kk < kPk; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[kk][e])::"memory");
    };

    // Ping-pong: the two consumer warpgroups take turns issuing their MMAs (named barriers 1 and
    // 2), so one warpgroup's softmax runs while the other's MMAs occupy the tensor cores.
    auto pp_wait = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory"); };
    auto pp_pass = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory"); };
    // Pipeline: S of block b + 1 is issued before P V of block b, so wait_group 1 returns with S
    // done and P V still running. In the SASS ptxas puts the wait_group 0 below at the start of the
    // softmax's basic block, so the softmax of block b + 1 runs after P V of block b, not under it;
    // a never-taken branch that kept it below the softmax measured no faster (docs/perf.md,
    // twenty-first session). O is rescaled by block b + 1's factors once P V of block b is done.
    // The last block's P V is peeled off so no wgmma sits under a branch.
    if (g.n_blocks > 0) {
      wait_full(stage, phase);
      reg_fence(s);
      pp_wait();
      wgmma_fence();
      issue_s(stage);
      wgmma_commit();
      pp_pass();
      wgmma_wait0();
      reg_fence(s);
      if (g.n_blocks == 1) mbar_arrive(q_empty);  // this warpgroup no longer reads Q
      float a0, a1;
      softmax(0, pa, a0, a1);  // O is zero: nothing to rescale
      for (int b = 0; b + 1 < g.n_blocks; ++b) {
        const int cur = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
        wait_full(stage, phase);
        reg_fence(s);
        reg_fence(o);
        pp_wait();
        wgmma_fence();
        issue_s(stage);
        wgmma_commit();
        issue_pv(cur);
        wgmma_commit();
        pp_pass();
        wgmma_wait1();
        reg_fence(s);
        if (b + 2 == g.n_blocks) mbar_arrive(q_empty);
        float alpha0, alpha1;
        uint32_t pn[kPk][4];
        softmax(b + 1, pn, alpha0, alpha1);
        wgmma_wait0();
        reg_fence(o);
        keep(pa);
        mbar_arrive(empty_bar(cur));
        // Always rescaled: skipping it for warps whose rows kept their max (a lazy max, P up to
        // 2^8) put a branch over O's multiplies, and ptxas then serialized every wgmma (C7513):
        // 1x16k 493 -> 378 TFLOP/s (docs/perf.md, twenty-third session).
#pragma unroll
        for (int i = 0; i < kDi; ++i) {
          o[i][0] *= alpha0;
          o[i][1] *= alpha0;
          o[i][2] *= alpha1;
          o[i][3] *= alpha1;
        }
#pragma unroll
        for (int kk = 0; kk < kPk; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e) pa[kk][e] = pn[kk][e];
      }
      const int cur = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
      reg_fence(o);
      pp_wait();
      wgmma_fence();
      issue_pv(cur);
      wgmma_commit();
      pp_pass();
      wgmma_wait0();
      reg_fence(o);
      keep(pa);
      mbar_arrive(empty_bar(cur));
    }

    // ---- epilogue: rows a and b of this thread, straight from registers.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? row_a : row_b;
      if (r >= g.rows_valid) continue;
      const float l = h == 0 ? l0 : l1;
      const float m = h == 0 ? m0 : m1;
      const float inv = l > 0.f ? v_scale / l : 0.f;
      const int pr = it.m0 + r;
      const int t = group_div(p, pr), gg = pr - t * G;
      const int head = kvh * G + gg;
      T* out = static_cast<T*>(p.out) + int64_t(it.q_start + t) * p.out_stride_tok + int64_t(head) * p.out_stride_head +
               2 * (lane & 3);
#pragma unroll
      for (int dn = 0; dn < kDi; ++dn)
        *reinterpret_cast<uint32_t*>(out + dn * 8) = pack2<T>(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
      if ((lane & 3) == 0 && p.lse != nullptr)
        p.lse[int64_t(it.q_start + t) * p.lse_stride_tok + int64_t(head) * p.lse_stride_head] =
            l > 0.f ? (m + __log2f(l)) * kLn2 : -INFINITY;
    }
  }
  if (wg == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// grid.x: persistent CTAs (at most one per SM); units (prefill item, kv head) dealt to them in a
// snake (wg_unit), counts[2] items from items[counts[3]] as attention_prefill_kernel. Launched
// only on sm_90 by a build that includes sm_90a (attention.cu checks both); elsewhere the body is
// empty.
template <typename T, typename KV, int D>
__global__ void __launch_bounds__(kWgThreads, 1) attention_wgmma_kernel(const __grid_constant__ KernelParams p) {
  pdl_enter();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char smem_raw[];
  using L = WgmmaSmem<KV, D>;
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  if (threadIdx.x == 0) {
    const uint32_t bars = base + L::kBarOffset;
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(bars + 8 * s, 128);                          // full: the producer's 128 threads
      mbar_init(bars + 8 * (L::kStages + s), kWgConsumers);  // empty: every consumer thread
    }
    for (int i = 0; i < L::kQBufs; ++i) {
      mbar_init(bars + 8 * (2 * L::kStages + i), 128);
      mbar_init(bars + 8 * (2 * L::kStages + L::kQBufs + i), kWgConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int first = p.counts[3];
  const int num_units = p.counts[2] * p.num_kv_heads;
  // The producer's warpgroup gives registers to the consumers where WgmmaSmem says so.
  if (threadIdx.x < 128) {
    if constexpr (L::kProducerRegs != 0)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(L::kProducerRegs) : "memory");
    wg_producer<T, KV, D>(p, base, first, num_units);
  } else {
    if constexpr (L::kConsumerRegs != 0)
      asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(L::kConsumerRegs) : "memory");
    wg_consumer<T, KV, D>(p, base, first, num_units);
  }
#endif
}

}  // namespace fg::cuda::attn
