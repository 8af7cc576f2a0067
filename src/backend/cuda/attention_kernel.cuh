// Device code of the one attention kernel (see attention.h): tile types, the work-list records the
// host plan writes, the main kernel (FlashAttention-2-style online softmax on mma.sync m16n8k16
// tensor cores, f32 accumulation) and the split-KV merge kernel.
//
// A tile's rows are packed (q token of one sequence) x (the q heads sharing one kv head): packed
// row pr = t * group + g reads q[q_start + t, kv_head * group + g, :]. So decode (q_len 1) with
// GQA 4 fills 4 rows of a 16-row tile and reads each KV page once per kv head.
//
// Four tile kinds share one kernel (so any mix of prefills and decodes is one launch here; the
// unsplit 128-row tiles of long prefills go to a prefill kernel, a second launch in the same
// run(): attention_wgmma_kernel.cuh on sm_90a, else attention_prefill_kernel.cuh when the page
// size allows it):
//  - kRows16: 16 rows, the 4 warps split each 64-key block into 4 x 16 keys (fp8 pages at
//    head_dim 128: 128-key blocks, 4 x 32) and merge their softmax states at the end (decode,
//    short speculative windows);
//  - kRows32: 32 rows, 2 row warps x 2 key warps (speculative windows of 5..8 tokens at GQA 4);
//    one warp holding both m-tiles over 16 keys would read K/V once, but its Q fragments (64
//    registers) and O (128) push the one kernel that holds all kinds into ~1.2 KB of spills;
//  - kRows64: 64 rows, one warp per 16 rows, every warp sees all 64 keys (short prefill chunks);
//  - kRows128: 128 rows, one warp per 32 rows (two m-tiles, so each K/V fragment read from
//    shared memory feeds two mma), 32 keys per iteration, Q fragments re-read from shared memory
//    (prefill).
// K/V rows are gathered through the block table per key position (any page size >= 1) with 16-byte
// cp.async copies, 2 or 3 stages deep; each key's page is looked up once, a block ahead, into a
// ring of row offsets in shared memory that the copying threads read. Head sizes 64, 128 and 256;
// at 256 the kinds stop at 64 rows and only the wgmma prefill kernel exists (has_wide_tiles,
// TileShapes<256>). An fp8 KV cache (KV = __nv_fp8_e4m3, act bf16) is copied as stored (half the
// bytes) into raw stages. At head_dim 128 each warp converts the bytes its own MMA fragments need
// in registers (fp8_in_registers): K's head dimension and V's output columns are read in permuted
// orders that make those bytes contiguous, and they become f16 (one instruction per pair), so those
// tiles run f16 MMAs with Q scaled into f16 by a power of two. At 64 and 256 a pass converts each
// landed block into one act-dtype K/V block in the layout the MMAs read. The conversion is exact
// either way (every e4m3 value is an f16 and a bf16 value); the kv head's K scale is folded into
// the score scale and its V scale into the output's 1 / l, so the MMAs never see a scale. This file
// must never allocate or synchronize the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/launch.cuh"

namespace fg::cuda::attn {

constexpr int kThreads = 128;  // 4 warps per CTA
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

enum TileKind : int { kRows16 = 0, kRows32 = 1, kRows64 = 2, kRows128 = 3 };
constexpr int tile_rows(int kind) {
  return 16 << kind;
}

// One unit of work for one CTA per kv head: a row tile of one sequence against the key range
// [kv_begin, kv_end) (clamped further by the causal mask and the window in the kernel).
struct alignas(16) WorkItem {
  int seq;       // row of block_table
  int q_start;   // first q row of the sequence in q / out
  int q_len;     // new tokens of the sequence
  int kv_len;    // keys of the sequence including the new tokens
  int m0;        // first packed row of the tile (packed row = token * group + g)
  int kv_begin;  // split range, a multiple of kBlockN
  int kv_end;
  int slot;  // -1: write out/lse directly; else first partial row of this split (see MergeItem)
  int kind;  // TileKind
  int pad[3];
};

// One split tile whose partial outputs the merge kernel combines.
struct alignas(16) MergeItem {
  int q_start, q_len, m0, rows;
  int num_splits;
  int slot;  // first partial row: split s, kv head h, tile row r is row slot + (s * num_kv_heads + h) * rows + r
  int pad[2];
};

// The key range of one tile of a work item, as every kernel sees it: `rows` packed rows from
// it.m0 against keys [kv_begin, kv_end), clamped by the causal mask (bottom-right: query t sits at
// key position offset + t) and the sliding window; walked in blocks of `bn` keys from block_begin.
// min_hi / max_lo bound the blocks that need masking.
struct TileGeom {
  int rows_valid, offset, split_end, kv_begin;
  int tile_lo, tile_hi, min_hi, max_lo, block_begin, n_blocks;
  int causal, window;
  __device__ __forceinline__ int row_hi(int t) const {  // inclusive upper key bound of query t
    int h = split_end - 1;
    if (causal) h = min(h, offset + t);
    return h;
  }
  __device__ __forceinline__ int row_lo(int t) const {
    int l = kv_begin;
    if (window > 0) l = max(l, offset + t - window + 1);
    return l;
  }
};

// Everything the kernels read. Strides in elements. Shapes:
//   q:   [total_q, num_q_heads, D] act, last dim contiguous, 16-byte aligned rows
//   k,v: [num_pages, page_size, num_kv_heads, D] act (the strides below), last dim contiguous
//   out: [total_q, num_q_heads, D] act; lse: optional [total_q, num_q_heads] f32
//   block_table: [num_seqs, max_pages_per_seq] i32, row stride bt_stride
//   counts: [4] i32 = {items of attention_kernel (from items[0]), merge items, items of
//           attention_prefill_kernel, index of its first item} (device, written by plan)
//   partial_o: [partial rows, D] f32; partial_lse: [partial rows] f32 (rows addressed by WorkItem::slot)
struct KernelParams {
  const void* q;
  int64_t q_stride_tok, q_stride_head;
  const void* k;
  const void* v;
  // Page and slot strides in 16-byte chunks: every K/V row is addressed as a 32-bit chunk offset
  // from its kv head's base (run() checks that the cache spans fewer than 2^32 chunks).
  uint32_t kv_page_chunks, kv_slot_chunks;
  uint32_t page_magic;  // ceil(2^32 / page_size) when it is not a power of two (see page_index)
  // fast_div magics of group and num_kv_heads: every kernel divides packed rows by the group and
  // work units by the kv heads (an integer division is ~25 instructions of code).
  uint32_t group_magic, kv_heads_magic;
  uint32_t pad0;
  int64_t kv_stride_head;
  void* out;
  int64_t out_stride_tok, out_stride_head;
  float* lse;
  int64_t lse_stride_tok, lse_stride_head;
  const int* block_table;
  int64_t bt_stride;
  int page_size;
  int page_shift;  // log2(page_size) when a power of two, else -1
  int num_kv_heads;
  int group;           // num_q_heads / num_kv_heads
  float scale_log2;    // scale * log2(e), used without softcap
  float softcap_log2;  // softcap * log2(e); 0 = softcap off
  float softcap_in;    // scale / softcap
  int causal;
  int window;  // 0 = off
  const int* counts;
  const WorkItem* items;
  const MergeItem* merges;
  float* partial_o;
  float* partial_lse;
  // fp8 KV cache: [num_kv_heads] f32 scales (null otherwise); and whether attention_kernel also
  // runs the prefill items (items[counts[3], counts[3] + counts[2]), right after its own) because
  // no prefill kernel reads fp8 pages on this device.
  const float* k_scale;
  const float* v_scale;
  int general_runs_prefill;
};

// The KV cache element a kernel reads: the act dtype T itself, or e4m3 (__nv_fp8_e4m3).
template <typename KV>
constexpr bool kv_is_fp8() {
  return std::is_same_v<KV, __nv_fp8_e4m3>;
}

// n / d for 0 <= n < 2^32 / d by a multiply-high: magic = ceil(2^32 / d), or 0 for d = 1
// (attn::fast_div_magic on the host; run() checks the ranges the kernels divide).
__host__ __device__ constexpr uint32_t fast_div_magic(int d) {
  return d == 1 ? 0u : uint32_t(((uint64_t(1) << 32) + uint64_t(d) - 1) / uint64_t(d));
}
__device__ __forceinline__ int fast_div(int n, uint32_t magic) {
  return magic == 0 ? n : int(__umulhi(uint32_t(n), magic));
}
// A packed row's token (row / group) and a work unit's item (unit / num_kv_heads).
__device__ __forceinline__ int group_div(const KernelParams& p, int n) {
  return fast_div(n, p.group_magic);
}
__device__ __forceinline__ int kv_heads_div(const KernelParams& p, int n) {
  return fast_div(n, p.kv_heads_magic);
}

// Two e4m3 values (the low 16 bits of v, element 0 in the lowest byte) -> the same two values as
// a packed pair of T (bf16 or f16). Exact: e4m3 -> f16 is exact, and so is f16 -> f32 -> bf16 for
// values of 4 significant bits within 2^-9 .. 448.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint32_t v) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v & 0xffffu), __NV_E4M3);
  if constexpr (std::is_same_v<T, __half>) {
    return uint32_t(raw.x) | (uint32_t(raw.y) << 16);
  } else {
    const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(raw)));
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// 16 e4m3 values (one 16-byte chunk, element 0 in the lowest byte) -> the same 16 values in T,
// as two 16-byte chunks.
template <typename T>
__device__ __forceinline__ void e4m3x16_to(const uint4& in, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3x2_to<T>(in.x), e4m3x2_to<T>(in.x >> 16), e4m3x2_to<T>(in.y), e4m3x2_to<T>(in.y >> 16));
  hi = make_uint4(e4m3x2_to<T>(in.z), e4m3x2_to<T>(in.z >> 16), e4m3x2_to<T>(in.w), e4m3x2_to<T>(in.w >> 16));
}

// Whether fp8 pages of head size D are converted in registers, each warp converting only the
// bytes its own MMA fragments need (attend_tile), instead of by a pass over the landed block into
// an act-dtype copy in shared memory (head sizes 64 and 256: their fragment reads would need other
// swizzles, and at 256 O leaves no registers).
constexpr bool fp8_in_registers(int head_dim) {
  return head_dim == 128;
}

__device__ __forceinline__ TileGeom tile_geom(const KernelParams& p, const WorkItem& it, int rows, int bn) {
  TileGeom g;
  const int G = p.group;
  g.rows_valid = min(rows, it.q_len * G - it.m0);
  g.offset = it.kv_len - it.q_len;
  g.split_end = min(it.kv_end, it.kv_len);  // exclusive
  g.kv_begin = it.kv_begin;
  g.causal = p.causal;
  g.window = p.window;
  const int t_first = group_div(p, it.m0);
  const int t_last = group_div(p, it.m0 + g.rows_valid - 1);
  g.tile_lo = g.row_lo(t_first);
  g.tile_hi = g.row_hi(t_last) + 1;  // exclusive
  g.min_hi = g.row_hi(t_first);
  g.max_lo = g.row_lo(t_last);
  g.block_begin = (g.tile_lo / bn) * bn;
  g.n_blocks = g.tile_hi > g.tile_lo ? (g.tile_hi - g.block_begin + bn - 1) / bn : 0;
  return g;
}

// Chunk c (8 elements) of packed row r of a tile's Q: token (m0 + r) / group of the sequence, q
// head kvh * group + (m0 + r) % group. Every kernel's Q gather reads through it.
template <typename T>
__device__ __forceinline__ const T* q_chunk(const KernelParams& p, const WorkItem& it, int kvh, int r, int c) {
  const int pr = it.m0 + r;
  const int t = group_div(p, pr), g = pr - t * p.group;
  return static_cast<const T*>(p.q) + int64_t(it.q_start + t) * p.q_stride_tok +
         int64_t(kvh * p.group + g) * p.q_stride_head + c * 8;
}

// ---------------------------------------------------------------------------------------------
// PTX helpers.

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// Key position j of a sequence -> its index in the block table row, and the 16-byte chunk offset
// of its row in a kv head's K or V cache given the page id found there. Shared by every K/V loader.
// Page sizes that are not powers of two divide by a multiply-high, exact for j < 2^32 / page_size
// (run() checks the block table's reach).
__device__ __forceinline__ int page_index(const KernelParams& p, int j) {
  return p.page_shift >= 0 ? j >> p.page_shift : int(__umulhi(uint32_t(j), p.page_magic));
}
// Chunk 0 of kv head kvh's row in a K or V cache (`cache` is p.k or p.v): kv_row_chunk offsets from
// here, plus the copying thread's chunk within the row.
template <typename T>
__device__ __forceinline__ const uint4* kv_head_base(const KernelParams& p, const void* cache, int kvh) {
  return reinterpret_cast<const uint4*>(static_cast<const T*>(cache) + int64_t(kvh) * p.kv_stride_head);
}
__device__ __forceinline__ uint32_t kv_row_chunk(const KernelParams& p, int page_id, int j) {
  const int in_page = j - page_index(p, j) * p.page_size;
  return uint32_t(page_id) * p.kv_page_chunks + uint32_t(in_page) * p.kv_slot_chunks;
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// A packed pair of T times `scale` as a packed f16 pair (round to nearest).
template <typename T>
__device__ __forceinline__ uint32_t to_f16x2(uint32_t v, float scale) {
  float2 f;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    f = __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
  return pack2<__half>(f.x * scale, f.y * scale);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One online-softmax step over a 16-row fragment of S in the mma.sync / wgmma accumulator
// layout: this thread holds row a in elements 0, 1 and row b in elements 2, 3 of each n8 tile s[i]
// (key j0 + 8 i + 2 (lane % 4) + e % 2); the four threads of a quad share a row. Scores enter the
// exponent as s * sc in one FMA (sc = scale * log2 e, times an fp8 cache's K scale), or softcapped
// into the log2 domain when p.softcap_log2 != 0 (tanh of s * cap_in; then sc = 1; the max commutes
// with sc since sc > 0). kScaleFirst (the general kernel) multiplies the scores by sc before the
// max instead, a separate rounded multiply that is never fused into the exponent's subtraction
// (the FMA form made its fp8 decode tile 4-6 % slower at large batch on an H100, with 16 fewer
// instructions a block; docs/perf.md, thirty-first session); under softcap it ignores sc. With
// `mask`, keys outside a row's [lo, hi] (bounds(lo_a, hi_a, lo_b, hi_b)) are dropped. Updates the
// rows' running max m (log2 domain) and sum l (this thread's columns), leaves P in s, and returns
// the factors the rows of O must be scaled by in alpha_a / alpha_b.
template <bool kScaleFirst = false, int kNi, typename Bounds>
__device__ __forceinline__ void softmax_step(float (&s)[kNi][4], const KernelParams& p, float sc, float cap_in, int j0,
                                             int lane, bool mask, const Bounds& bounds, float& m_a, float& m_b,
                                             float& l_a, float& l_b, float& alpha_a, float& alpha_b) {
  // One uniform branch around the loop: a per-element select would issue the tanh path's
  // instructions (predicated off) for every score even without softcap.
  if (p.softcap_log2 != 0.f) {
#pragma unroll
    for (int i = 0; i < kNi; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = p.softcap_log2 * fast_tanh(s[i][e] * cap_in);
  } else if constexpr (kScaleFirst) {
#pragma unroll
    for (int i = 0; i < kNi; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = __fmul_rn(s[i][e], sc);
  }
  if (mask) {
    int lo_a, hi_a, lo_b, hi_b;
    bounds(lo_a, hi_a, lo_b, hi_b);
#pragma unroll
    for (int i = 0; i < kNi; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + i * 8 + 2 * (lane & 3) + (e & 1);
        const bool ok = e < 2 ? (j >= lo_a && j <= hi_a) : (j >= lo_b && j <= hi_b);
        if (!ok) s[i][e] = -INFINITY;
      }
  }
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int i = 0; i < kNi; ++i) {
    mx_a = fmaxf(mx_a, fmaxf(s[i][0], s[i][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[i][2], s[i][3]));
  }
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
  if constexpr (!kScaleFirst) {
    mx_a *= sc;
    mx_b *= sc;
  }
  const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
  const float mu_a = mn_a == -INFINITY ? 0.f : mn_a;  // a row with nothing visible yet
  const float mu_b = mn_b == -INFINITY ? 0.f : mn_b;
  alpha_a = fast_exp2(m_a - mu_a);
  alpha_b = fast_exp2(m_b - mu_b);
  m_a = mn_a;
  m_b = mn_b;
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int i = 0; i < kNi; ++i) {
    if constexpr (kScaleFirst) {
      s[i][0] = fast_exp2(s[i][0] - mu_a);
      s[i][1] = fast_exp2(s[i][1] - mu_a);
      s[i][2] = fast_exp2(s[i][2] - mu_b);
      s[i][3] = fast_exp2(s[i][3] - mu_b);
    } else {
      s[i][0] = fast_exp2(fmaf(s[i][0], sc, -mu_a));
      s[i][1] = fast_exp2(fmaf(s[i][1], sc, -mu_a));
      s[i][2] = fast_exp2(fmaf(s[i][2], sc, -mu_b));
      s[i][3] = fast_exp2(fmaf(s[i][3], sc, -mu_b));
    }
    sum_a += s[i][0] + s[i][1];
    sum_b += s[i][2] + s[i][3];
  }
  l_a = l_a * alpha_a + sum_a;
  l_b = l_b * alpha_b + sum_b;
}

// P (the fragment softmax_step left in s) as the A operand of P V: 16 keys per k-step.
template <typename T, int kNi>
__device__ __forceinline__ void pack_p(const float (&s)[kNi][4], uint32_t (&pa)[kNi / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < kNi / 2; ++kk) {
    pa[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][D] shared tile. The XOR
// swizzle spreads the 8 rows an ldmatrix reads at one chunk column over all 32 banks.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// ---------------------------------------------------------------------------------------------
// Tile shapes. kRowWarps x kColWarps warps; each warp owns kMt 16-row m-tiles and kBn /
// kColWarps keys of every block, so each K or V fragment it reads from shared memory feeds kMt
// mma instructions (the shared-memory traffic per FLOP falls by kMt). kQRegs: the Q fragments
// stay in registers for the whole tile; otherwise they are re-read from shared memory per block
// (the 128-row kind cannot hold 2 x 16 rows of Q, O and S in 255 registers). kSt: cp.async stages.
template <int kRowWarps_, int kColWarps_, int kMt_, bool kQRegs_, int kSt_, int kBn_>
struct TileShape {
  static constexpr int kRowWarps = kRowWarps_;
  static constexpr int kColWarps = kColWarps_;
  static constexpr int kMt = kMt_;
  static constexpr bool kQRegs = kQRegs_;
  static constexpr int kSt = kSt_;
  static constexpr int kBn = kBn_;  // keys per main-loop iteration (divides kBlockN)
  static constexpr int kRows = 16 * kMt * kRowWarps;
  static_assert(kRowWarps * kColWarps == kThreads / 32, "a tile uses all warps of the CTA");
  static_assert(kSt >= 2, "the loader needs at least two stages");
  static_assert(kBlockN % kBn == 0 && kBn % (16 * kColWarps) == 0, "blocks split evenly over warps");
};
using Shape16 = TileShape<1, 4, 1, true, 3, 64>;    // decode, short speculative windows
using Shape32 = TileShape<2, 2, 1, true, 3, 64>;    // speculative windows of 5..8 tokens at GQA 4
using Shape64 = TileShape<4, 1, 1, true, 3, 64>;    // short prefill chunks
using Shape128 = TileShape<4, 1, 2, false, 3, 32>;  // prefill

// Whether the general kernel and the mma.sync prefill kernel have 128-row tiles at head size D.
// At head_dim 256 one 16-row m-tile's O accumulators alone take 128 registers per thread, so two
// m-tiles per warp cannot fit: there only the wgmma prefill kernel (a 64-row half per consumer
// warpgroup) takes 128-row tiles, and without it plan() cuts every tile at 64 rows.
constexpr bool has_wide_tiles(int head_dim) {
  return head_dim <= 128;
}

// The tile shapes of head size D and KV element size kKvBytes (S128 only where has_wide_tiles(D)).
template <int D, int kKvBytes = 2>
struct TileShapes {
  using S16 = Shape16;
  using S32 = Shape32;
  using S64 = Shape64;
  using S128 = Shape128;
};
// fp8 pages at head_dim 128 (converted in registers): the 16-row tile takes 128-key blocks, 32
// keys a warp, in two 32 KB stages. A decode tile's per-block work (barrier, page-id ring, online
// softmax's max and O's rescale) then comes once per 128 keys instead of once per 64: its loop
// runs ~8 instructions a key instead of ~12. On an H100 large-batch rows ran 2-5 % faster than
// with three 64-key stages (96 % of the read-only stream), batch 1 at 32k keys 4 % slower; three
// 128-key stages were no faster anywhere (docs/perf.md, thirty-first session).
template <>
struct TileShapes<128, 1> {
  using S16 = TileShape<1, 4, 1, true, 2, 128>;
  using S32 = Shape32;
  using S64 = Shape64;
  using S128 = Shape128;
};
// head_dim 256: O takes 128 registers per thread, so Q fragments are re-read from shared memory
// (in registers they would add 64), the 32- and 64-row kinds step 32 keys (with 64 the loader's
// 16 page ids per thread and 32 more S registers spilled ~1 KB), and two K/V stages: a 64-key
// block of K and V is 64 KB, so the 16-row kind takes 8 + 2 x 64 = 136 KB (one CTA per SM; within
// the 163 KB an sm_80 block may opt into).
template <int kKvBytes>
struct TileShapes<256, kKvBytes> {
  using S16 = TileShape<1, 4, 1, false, 2, 64>;
  using S32 = TileShape<2, 2, 1, false, 2, 32>;
  using S64 = TileShape<4, 1, 1, false, 2, 32>;
};

constexpr int const_max(int a, int b) {
  return a > b ? a : b;
}

// Shared memory of one tile shape, in bytes: Q tile + kSt x (K, V) blocks as stored (kKvBytes per
// element) + for fp8 converted by a pass one converted (K, V) block + the loader's ring of row
// offsets (kSt x kBn), or the epilogue's per-warp softmax states, whichever is larger.
template <int D, typename S, int kKvBytes = 2>
struct TileSmem {
  static constexpr int kQBytes = S::kRows * D * 2;
  static constexpr int kKvBlockBytes = S::kBn * D * 2;                     // one K or V block in the act dtype
  static constexpr int kStageBytes = 2 * S::kBn * D * kKvBytes;            // K then V as stored
  static constexpr int kConvertedOffset = kQBytes + S::kSt * kStageBytes;  // fp8: the converted block
  static constexpr int kRingOffset = kConvertedOffset + (kKvBytes == 1 && !fp8_in_registers(D) ? 2 * kKvBlockBytes : 0);
  static constexpr int kMainBytes = kRingOffset + S::kSt * S::kBn * 4;
  static constexpr int kRedStride = D + 8;  // floats per row of the epilogue's O buffer
  static constexpr int kRedBytes = S::kColWarps * S::kRows * (kRedStride + 2) * 4;
  static constexpr int kBytes = const_max(kMainBytes, kRedBytes);
};

// Dynamic shared memory of the main kernel: the largest tile shape (Shape64 at 112 KB for
// head_dim 128, which still lets two CTAs share an SM; 69 KB with fp8 pages, Shape16's; 136 KB at
// 256, one CTA per SM, with fp8 pages too: half-size stages plus the converted block).
template <int D, int kKvBytes = 2>
constexpr int main_kernel_smem_bytes() {
  using Sh = TileShapes<D, kKvBytes>;
  int bytes = const_max(
      const_max(TileSmem<D, typename Sh::S16, kKvBytes>::kBytes, TileSmem<D, typename Sh::S32, kKvBytes>::kBytes),
      TileSmem<D, typename Sh::S64, kKvBytes>::kBytes);
  if constexpr (has_wide_tiles(D)) bytes = const_max(bytes, TileSmem<D, typename Sh::S128, kKvBytes>::kBytes);
  return bytes;
}
template <int D, int kKvBytes = 2>
struct SmemLayout {
  static constexpr int kBytes = main_kernel_smem_bytes<D, kKvBytes>();
};

// ---------------------------------------------------------------------------------------------
// One tile: rows [m0, m0 + S::kRows) of a sequence's packed rows, one kv head.

template <typename T, typename KV, int D, typename S>
__device__ __forceinline__ void attend_tile(const KernelParams& p, const WorkItem& it, int kvh, char* smem) {
  constexpr bool kFp8 = kv_is_fp8<KV>();
  // fp8 pages converted in registers: the stage rows are swizzled in 16-byte chunks, K's head
  // dimension is read in a permuted order (the same for Q, so Q.K^T is unchanged) that gives each
  // thread 32 contiguous bytes of a key, and V's (O's columns, undone in the epilogue) one that
  // gives it 16 contiguous bytes of each of its keys.
  constexpr bool kFp8Regs = kFp8 && fp8_in_registers(D);
  // The MMAs' operand type: T, or f16 for fp8 pages converted in registers (e4m3 -> f16 is one
  // instruction per pair, e4m3 -> bf16 four); Q then enters as f16 times kQToF16 (a power of two:
  // exact, and |Q| up to 2^24 stays finite), undone in the score scale, and P as f16.
  using M = std::conditional_t<kFp8Regs, __half, T>;
  constexpr float kQToF16 = 1.0f / 256.0f;
  constexpr int kRows = S::kRows;
  constexpr int kMt = S::kMt;
  constexpr int kSt = S::kSt;
  constexpr int kColWarps = S::kColWarps;
  constexpr int kCols = S::kBn / kColWarps;            // keys per warp per block
  constexpr int kNi = kCols / 8;                       // S n-tiles per warp and m-tile
  constexpr int kKi = D / 16;                          // k-steps of Q.K^T
  constexpr int kDi = D / 8;                           // O n-tiles
  constexpr int kChunks = D / 8;                       // 16-byte chunks per row
  constexpr int kKvChunks = D * int(sizeof(KV)) / 16;  // ... per K/V row as stored
  constexpr int kRowsPerPass = kThreads / kKvChunks;
  constexpr int kR = 2 * kMt;  // accumulator rows per thread
  using L = TileSmem<D, S, int(sizeof(KV))>;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int rw = warp / kColWarps;
  const int cw = warp % kColWarps;
  const int G = p.group;

  T* q_s = reinterpret_cast<T*>(smem);
  char* kv_raw = smem + L::kQBytes;  // kSt stages of (K, V) blocks as stored
  // The K/V block the MMAs read: stage b % kSt itself, or (fp8) its conversion.
  T* kv_converted = reinterpret_cast<T*>(smem + L::kConvertedOffset);
  const TileGeom geo = tile_geom(p, it, kRows, S::kBn);

  // This thread's accumulator rows: i = 2 * mt + h is tile row rw * 16 * kMt + mt * 16 + lane / 4 + 8 * h.
  const int warp_row0 = rw * 16 * kMt;
  auto acc_row = [&](int i) { return warp_row0 + (i >> 1) * 16 + (lane >> 2) + (i & 1) * 8; };
  // Key bounds of accumulator row i, computed only in the few masked blocks (registers are
  // the scarce resource of the two-m-tile shapes).
  auto acc_t = [&](int i) { return min(group_div(p, it.m0 + acc_row(i)), it.q_len - 1); };

  // ---- K/V block loader: gathers each key row through the block table. One thread per key of a
  // block looks up its page a block ahead (fetch_page, into a register, so that the latency hides
  // behind a block of math) and, before the next barrier, leaves the row's chunk offset in a ring
  // of kSt slots in shared memory (put_offset); the copying threads read their rows' offsets from
  // there. One lookup per key instead of one per copying thread and row keeps the loader's code
  // short: a decode tile runs it only a few times, from a cold instruction cache.
  constexpr int kPasses = S::kBn / kRowsPerPass;
  const int my_row = tid / kKvChunks;
  const int my_chunk = tid % kKvChunks;
  // This thread's chunk of K row 0 of its kv head; V's row is a fixed distance from K's.
  const char* kbase = reinterpret_cast<const char*>(kv_head_base<KV>(p, p.k, kvh) + my_chunk);
  const int64_t v_minus_k = reinterpret_cast<const char*>(kv_head_base<KV>(p, p.v, kvh) + my_chunk) - kbase;
  const int* bt = p.block_table + int64_t(it.seq) * p.bt_stride;
  uint32_t* ring = reinterpret_cast<uint32_t*>(smem + L::kRingOffset);  // [kSt][kBn] chunk offsets
  // Key k of the tile (from block_begin): its page id, then its row's offset into ring[slot].
  auto fetch_page = [&](int k) {
    const int j = geo.block_begin + k;
    return j < geo.tile_hi ? __ldg(bt + page_index(p, j)) : 0;
  };
  auto put_offset = [&](int slot, int k, int page) {
    const int j = geo.block_begin + k;
    ring[slot] = j < geo.tile_hi ? kv_row_chunk(p, page, j) : 0u;
  };
  auto load_block = [&](int b) {  // reads block b's ring slot, filled before the last barrier
    const int j0 = geo.block_begin + b * S::kBn;
    char* stage = kv_raw + (b % kSt) * L::kStageBytes;
    const uint32_t* offs = ring + (b % kSt) * S::kBn;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int rr = my_row + pass * kRowsPerPass;
      const bool valid = j0 + rr < geo.tile_hi;
      const char* ksrc = kbase + uint64_t(offs[rr]) * 16u;
      if constexpr (kFp8) {  // [kBn][D] byte rows: chunks swizzled (kFp8Regs) or plain (convert_block swizzles)
        char* kd = stage + rr * D + (kFp8Regs ? my_chunk ^ (rr & 7) : my_chunk) * 16;
        cp_async16(smem_addr(kd), ksrc, valid);
        cp_async16(smem_addr(kd + S::kBn * D), ksrc + v_minus_k, valid);
      } else {
        T* ks = reinterpret_cast<T*>(stage);
        cp_async16(smem_addr(ks + swz<D>(rr, my_chunk)), ksrc, valid);
        cp_async16(smem_addr(ks + S::kBn * D + swz<D>(rr, my_chunk)), ksrc + v_minus_k, valid);
      }
    }
  };
  // fp8: the landed stage of block b -> kv_converted (K then V, swizzled as the MMAs read them).
  // At head_dim 256 one chunk at a time: O's 128 registers leave no room for more in flight.
  auto convert_chunk = [&](const char* stage, int i) {
    const int kv = i / (S::kBn * kKvChunks), rem = i % (S::kBn * kKvChunks);
    const int r = rem / kKvChunks, c = rem % kKvChunks;
    uint4 lo, hi;
    e4m3x16_to<T>(*reinterpret_cast<const uint4*>(stage + (kv * S::kBn + r) * D + c * 16), lo, hi);
    T* dst = kv_converted + kv * S::kBn * D;
    *reinterpret_cast<uint4*>(dst + swz<D>(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(dst + swz<D>(r, 2 * c + 1)) = hi;
  };
  auto convert_block = [&](int b) {
    const char* stage = kv_raw + (b % kSt) * L::kStageBytes;
    if constexpr (D == 256) {
#pragma unroll 1
      for (int i = tid; i < 2 * S::kBn * kKvChunks; i += kThreads) convert_chunk(stage, i);
    } else {
      for (int i = tid; i < 2 * S::kBn * kKvChunks; i += kThreads) convert_chunk(stage, i);
    }
  };

  // The first blocks' page ids come from the step's block table, complete before the previous
  // kernel began (launch.cuh): fetched before waiting for that kernel, which wrote Q and this
  // step's K/V rows (and may have set the fp8 scales).
  // Blocks 0 .. kSt - 2 are slots 0 .. kSt - 2 of the ring: thread t takes key t of the tile.
  constexpr int kFirstKeys = (kSt - 1) * S::kBn;
  static_assert(kFirstKeys <= kThreads, "one thread per key of the first blocks");
  const int first_page = tid < kFirstKeys ? fetch_page(tid) : 0;
  pdl_enter();
  // fp8: the kv head's K scale, folded into the score scale (its V scale goes into 1 / l, read in
  // the epilogue: at head_dim 256 O leaves few registers).
  float k_scale = 1.f;
  if constexpr (kFp8) k_scale = p.k_scale[kvh];
  if constexpr (kFp8Regs) k_scale *= 1.0f / kQToF16;

  // ---- Q tile -> shared (zero rows past the sequence)
  {
    // Not unrolled: each chunk's address divides by the group size, and a decode tile runs this once.
#pragma unroll 1
    for (int i = tid; i < kRows * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = r < geo.rows_valid;
      cp_async16(smem_addr(q_s + swz<D>(r, c)), valid ? q_chunk<T>(p, it, kvh, r, c) : p.q, valid);
    }
    cp_async_commit();
  }

  if (tid < kFirstKeys) put_offset(tid, tid, first_page);
  __syncthreads();
  // Block b + kSt's page ids (threads < kBn), fetched in iteration b and put in the ring at the
  // top of iteration b + 1.
  int next_page = 0;

  // Q fragments [k-step][m-tile] (only when kept in registers; see TileShape).
  uint32_t qf[S::kQRegs ? kKi : 1][kMt][4];
  float o[kMt][kDi][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int i = 0; i < kDi; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m_run[kR], l_run[kR];  // running max (log2 domain) and sum (this thread's columns) per row
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
  }
  auto ldsm_q = [&](int kk, int mt, uint32_t(&a)[4]) {
    if constexpr (kFp8Regs) {
      // Head dimension in K's permuted order: k-step kk's columns 2t, 2t + 1 (a0, a1) and
      // 2t + 8, 2t + 9 (a2, a3) are dims 32t + 4kk + {0, 1} and {2, 3} (t = lane % 4).
      const int row = warp_row0 + mt * 16 + (lane >> 2);
      const int col = 32 * (lane & 3) + 4 * kk;
      const T* r0 = q_s + swz<D>(row, col >> 3) + (col & 7);
      const T* r1 = q_s + swz<D>(row + 8, col >> 3) + (col & 7);
      a[0] = to_f16x2<T>(*reinterpret_cast<const uint32_t*>(r0), kQToF16);
      a[1] = to_f16x2<T>(*reinterpret_cast<const uint32_t*>(r1), kQToF16);
      a[2] = to_f16x2<T>(*reinterpret_cast<const uint32_t*>(r0 + 2), kQToF16);
      a[3] = to_f16x2<T>(*reinterpret_cast<const uint32_t*>(r1 + 2), kQToF16);
    } else {
      const int row = warp_row0 + mt * 16 + (lane & 15);
      ldsm_x4(smem_addr(q_s + swz<D>(row, kk * 2 + (lane >> 4))), a[0], a[1], a[2], a[3]);
    }
  };

  // Iterations b < 0 only issue the copies of blocks 0 .. kSt - 2: the same code as the copies
  // issued kSt - 1 blocks ahead in the others (a decode tile runs each instruction cold).
  for (int b = 1 - kSt; b < geo.n_blocks; ++b) {
    if (b >= 0) {
      // Block b + kSt - 1's slot last held block b - 1, whose copies were issued before the
      // previous barrier.
      if (tid < S::kBn) put_offset(((b + kSt - 1) % kSt) * S::kBn + tid, (b + kSt - 1) * S::kBn + tid, next_page);
      cp_async_wait<kSt - 2>();
      __syncthreads();
      if constexpr (S::kQRegs) {
        if (b == 0) {
#pragma unroll
          for (int kk = 0; kk < kKi; ++kk)
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt) ldsm_q(kk, mt, qf[kk][mt]);
        }
      }
    }
    if (b + kSt - 1 < geo.n_blocks) load_block(b + kSt - 1);
    if (b >= -1 && tid < S::kBn) next_page = fetch_page((b + kSt) * S::kBn + tid);
    cp_async_commit();
    if (b < 0) continue;

    // The block's K/V in T: its stage, or (fp8) converted now that it has landed. The previous
    // block's MMAs are done (the barrier above), so the converted block is free.
    const char* stage = kv_raw + (b % kSt) * L::kStageBytes;  // as stored
    const T* ks = reinterpret_cast<const T*>(stage);
    if constexpr (kFp8 && !kFp8Regs) {
      convert_block(b);
      __syncthreads();
      ks = kv_converted;
    }
    const T* vs = ks + S::kBn * D;
    const int j0 = geo.block_begin + b * S::kBn;

    // S = Q K^T for this warp's kCols keys; each K fragment feeds all kMt m-tiles.
    float s[kMt][kNi][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int i = 0; i < kNi; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
    // fp8 in registers: key row cw * kCols + 8i + lane / 4 of n-tile i, its bytes 32t + 16h ..
    // + 15 (chunk 2t + h) hold k-steps 4h .. 4h + 3 in the permuted order (word kk % 4: b0 in
    // the low half, b1 in the high one).
    [[maybe_unused]] uint4 kchunk[kFp8Regs ? kNi : 1];
#pragma unroll
    for (int kk = 0; kk < kKi; ++kk) {
      uint32_t qa[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        if constexpr (S::kQRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mt][e] = qf[kk][mt][e];
        } else {
          ldsm_q(kk, mt, qa[mt]);
        }
      }
      if constexpr (kFp8Regs) {
        if (kk % 4 == 0) {
#pragma unroll
          for (int i = 0; i < kNi; ++i) {
            const int row = cw * kCols + i * 8 + (lane >> 2);
            const int chunk = (2 * (lane & 3) + kk / 4) ^ (row & 7);
            kchunk[i] = *reinterpret_cast<const uint4*>(stage + row * D + chunk * 16);
          }
        }
#pragma unroll
        for (int i = 0; i < kNi; ++i) {
          const uint32_t w = (kk % 4 == 0)   ? kchunk[i].x
                             : (kk % 4 == 1) ? kchunk[i].y
                             : (kk % 4 == 2) ? kchunk[i].z
                                             : kchunk[i].w;
          const uint32_t b0 = e4m3x2_to<M>(w), b1 = e4m3x2_to<M>(w >> 16);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) mma16816<M>(s[mt][i], qa[mt], b0, b1);
        }
      } else {
#pragma unroll
        for (int nj = 0; nj < kNi / 2; ++nj) {
          const int row = cw * kCols + nj * 16 + ((lane >> 4) << 3) + (lane & 7);
          uint32_t b0, b1, b2, b3;
          ldsm_x4(smem_addr(ks + swz<D>(row, kk * 2 + ((lane >> 3) & 1))), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            mma16816<T>(s[mt][2 * nj], qa[mt], b0, b1);
            mma16816<T>(s[mt][2 * nj + 1], qa[mt], b2, b3);
          }
        }
      }
    }

    // Scale (and softcap) into the log2 domain; mask edge blocks; online softmax per row.
    const bool need_mask = (j0 + S::kBn - 1 > geo.min_hi) || (j0 < geo.max_lo);
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      const int ia = 2 * mt, ib = 2 * mt + 1;  // rows of elements 0,1 and 2,3
      float alpha0, alpha1;
      softmax_step<true>(
          s[mt], p, p.scale_log2 * k_scale, p.softcap_in * k_scale, j0 + cw * kCols, lane, need_mask,
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
    }

    // O += P V (P from the S accumulators, V via transposed ldmatrix); each V fragment feeds all
    // kMt m-tiles.
#pragma unroll
    for (int kk = 0; kk < kCols / 16; ++kk) {
      uint32_t a[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        a[mt][0] = pack2<M>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<M>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<M>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<M>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      if constexpr (kFp8Regs) {
        // Keys 2t, 2t + 1, 2t + 8, 2t + 9 of this 16-key chunk (the B rows of this thread), each
        // at its 16 bytes of dims 16g .. 16g + 15 (g = lane / 4): O's n-tile dn column g is dim
        // 16g + dn. Byte pairs of two keys at one dim make a B register.
        const char* vraw = stage + S::kBn * D;
        uint32_t vw[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int key = cw * kCols + kk * 16 + 2 * (lane & 3) + (r & 1) + 8 * (r >> 1);
          const uint4 c = *reinterpret_cast<const uint4*>(vraw + key * D + (((lane >> 2) ^ (key & 7)) * 16));
          vw[r][0] = c.x;
          vw[r][1] = c.y;
          vw[r][2] = c.z;
          vw[r][3] = c.w;
        }
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t lo01 = __byte_perm(vw[0][w], vw[1][w], 0x5140), hi01 = __byte_perm(vw[0][w], vw[1][w], 0x7362);
          const uint32_t lo23 = __byte_perm(vw[2][w], vw[3][w], 0x5140), hi23 = __byte_perm(vw[2][w], vw[3][w], 0x7362);
          const uint32_t b0[4] = {e4m3x2_to<M>(lo01), e4m3x2_to<M>(lo01 >> 16), e4m3x2_to<M>(hi01),
                                  e4m3x2_to<M>(hi01 >> 16)};
          const uint32_t b1[4] = {e4m3x2_to<M>(lo23), e4m3x2_to<M>(lo23 >> 16), e4m3x2_to<M>(hi23),
                                  e4m3x2_to<M>(hi23 >> 16)};
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt) mma16816<M>(o[mt][4 * w + j], a[mt], b0[j], b1[j]);
        }
      } else {
        const int row = cw * kCols + kk * 16 + (lane & 15);
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(smem_addr(vs + swz<D>(row, dn * 2 + (lane >> 4))), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            mma16816<T>(o[mt][2 * dn], a[mt], b0, b1);
            mma16816<T>(o[mt][2 * dn + 1], a[mt], b2, b3);
          }
        }
      }
    }
  }

  // ---- epilogue: per-warp states -> shared, combine across column warps, write.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
  }
  float* red_o = reinterpret_cast<float*>(smem);             // [kColWarps][kRows][kRedStride]
  float* red_m = red_o + kColWarps * kRows * L::kRedStride;  // [kColWarps][kRows]
  float* red_l = red_m + kColWarps * kRows;                  // [kColWarps][kRows]
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int r = acc_row(i);
    float* base = red_o + (cw * kRows + r) * L::kRedStride + 2 * (lane & 3);
    const int h = i & 1;
#pragma unroll
    for (int dn = 0; dn < kDi; ++dn) {
      if constexpr (kFp8Regs) {  // n-tile dn's column c is dim kDi * c + dn
        base[-2 * (lane & 3) + kDi * (2 * (lane & 3)) + dn] = o[i >> 1][dn][2 * h];
        base[-2 * (lane & 3) + kDi * (2 * (lane & 3) + 1) + dn] = o[i >> 1][dn][2 * h + 1];
      } else {
        *reinterpret_cast<float2*>(base + dn * 8) = make_float2(o[i >> 1][dn][2 * h], o[i >> 1][dn][2 * h + 1]);
      }
    }
    if ((lane & 3) == 0) {
      red_m[cw * kRows + r] = m_run[i];
      red_l[cw * kRows + r] = l_run[i];
    }
  }
  __syncthreads();

  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r >= geo.rows_valid) break;  // rows ascend with i
    float mmax = -INFINITY;
#pragma unroll
    for (int w = 0; w < kColWarps; ++w) mmax = fmaxf(mmax, red_m[w * kRows + r]);
    float lsum = 0.f;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kColWarps; ++w) {
      const float sc = mmax == -INFINITY ? 0.f : fast_exp2(red_m[w * kRows + r] - mmax);
      lsum += red_l[w * kRows + r] * sc;
      const float4* src = reinterpret_cast<const float4*>(red_o + (w * kRows + r) * L::kRedStride + c * 8);
      const float4 x0 = src[0], x1 = src[1];
      acc[0] += sc * x0.x;
      acc[1] += sc * x0.y;
      acc[2] += sc * x0.z;
      acc[3] += sc * x0.w;
      acc[4] += sc * x1.x;
      acc[5] += sc * x1.y;
      acc[6] += sc * x1.z;
      acc[7] += sc * x1.w;
    }
    const float inv = lsum > 0.f ? (kFp8 ? p.v_scale[kvh] : 1.f) / lsum : 0.f;
    const float lse = lsum > 0.f ? (mmax + __log2f(lsum)) * kLn2 : -INFINITY;
    const int pr = it.m0 + r;
    const int t = group_div(p, pr), g = pr - t * G;
    if (it.slot < 0) {
      const int head = kvh * G + g;
      T* out = static_cast<T*>(p.out) + int64_t(it.q_start + t) * p.out_stride_tok + int64_t(head) * p.out_stride_head;
      uint4 v;
      v.x = pack2<T>(acc[0] * inv, acc[1] * inv);
      v.y = pack2<T>(acc[2] * inv, acc[3] * inv);
      v.z = pack2<T>(acc[4] * inv, acc[5] * inv);
      v.w = pack2<T>(acc[6] * inv, acc[7] * inv);
      *reinterpret_cast<uint4*>(out + c * 8) = v;
      if (c == 0 && p.lse != nullptr)
        p.lse[int64_t(it.q_start + t) * p.lse_stride_tok + int64_t(head) * p.lse_stride_head] = lse;
    } else {
      const int64_t prow = int64_t(it.slot) + kvh * kRows + r;
      float4* dst = reinterpret_cast<float4*>(p.partial_o + prow * D + c * 8);
      dst[0] = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      dst[1] = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
      if (c == 0) p.partial_lse[prow] = lse;
    }
  }
}

// grid.x: work units (item, kv head), strided so that a graph captured with one plan stays
// correct when replayed after a plan with more or fewer items.
template <typename T, typename KV, int D>
__global__ void __launch_bounds__(kThreads, 2) attention_kernel(const __grid_constant__ KernelParams p) {
  extern __shared__ __align__(128) char smem[];
  const int num_units = (p.counts[0] + (p.general_runs_prefill ? p.counts[2] : 0)) * p.num_kv_heads;
  for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
    const int item = kv_heads_div(p, u);
    const WorkItem it = p.items[item];
    const int kvh = u - item * p.num_kv_heads;
    using Sh = TileShapes<D, int(sizeof(KV))>;
    if (it.kind == kRows16) {
      attend_tile<T, KV, D, typename Sh::S16>(p, it, kvh, smem);
    } else if (it.kind == kRows32) {
      attend_tile<T, KV, D, typename Sh::S32>(p, it, kvh, smem);
    } else if constexpr (has_wide_tiles(D)) {
      if (it.kind == kRows64) {
        attend_tile<T, KV, D, typename Sh::S64>(p, it, kvh, smem);
      } else {
        attend_tile<T, KV, D, typename Sh::S128>(p, it, kvh, smem);
      }
    } else {
      attend_tile<T, KV, D, typename Sh::S64>(p, it, kvh, smem);  // plan() makes no 128-row tiles here
    }
    __syncthreads();
  }
}

// Combines the partial outputs of split tiles by their log-sum-exps: one warp per packed row. The
// lanes read the splits' lse (lane, lane + 32, ...) at once, then the partial rows in batches of
// kBatch splits whose loads are all issued before any is used (the first batch before the weights
// are computed), so a decode tile split 32 ways waits for three memory latencies, not one per
// split. The sum runs over the splits in order (s = 0, 1, ...) whatever the batching.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_merge_kernel(const __grid_constant__ KernelParams p) {
  pdl_enter();
  constexpr int kPerLane = D / 32;
  constexpr int kLseRegs = kMaxSplits / 32;
  constexpr int kBatch = merge_batch(D);            // 64 registers of partial rows per lane
  __shared__ float w_s[kThreads / 32][kMaxSplits];  // each warp's row: the splits' weights
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int G = p.group;
  const int Hkv = p.num_kv_heads;
  const int num_units = p.counts[1] * Hkv;
  for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
    const int item = kv_heads_div(p, u);
    const MergeItem mi = p.merges[item];
    const int kvh = u - item * Hkv;
    const int n = mi.num_splits;
    const int rows_valid = min(mi.rows, mi.q_len * G - mi.m0);
    for (int r = warp; r < rows_valid; r += kThreads / 32) {
      auto prow = [&](int s) { return int64_t(mi.slot) + (int64_t(s) * Hkv + kvh) * mi.rows + r; };
      float w[kLseRegs];
#pragma unroll
      for (int k = 0; k < kLseRegs; ++k) {
        const int s = lane + 32 * k;
        w[k] = s < n ? p.partial_lse[prow(s)] : -INFINITY;
      }
      float x[kBatch][kPerLane];
      auto load_batch = [&](int s0) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const float* src = p.partial_o + prow(s0 + j) * D + lane * kPerLane;
          const bool in = s0 + j < n;
          if constexpr (kPerLane % 4 == 0) {  // head_dim 128 and 256
#pragma unroll
            for (int e = 0; e < kPerLane; e += 4) {
              const float4 v = in ? *reinterpret_cast<const float4*>(src + e) : make_float4(0.f, 0.f, 0.f, 0.f);
              x[j][e] = v.x;
              x[j][e + 1] = v.y;
              x[j][e + 2] = v.z;
              x[j][e + 3] = v.w;
            }
          } else {
#pragma unroll
            for (int e = 0; e < kPerLane; ++e) x[j][e] = in ? src[e] : 0.f;
          }
        }
      };
      load_batch(0);  // in flight while the weights are computed
      float mmax = -INFINITY;
#pragma unroll
      for (int k = 0; k < kLseRegs; ++k) mmax = fmaxf(mmax, w[k]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
      float lsum = 0.f;
#pragma unroll
      for (int k = 0; k < kLseRegs; ++k) {
        w[k] = mmax == -INFINITY || w[k] == -INFINITY ? 0.f : __expf(w[k] - mmax);
        lsum += w[k];
        w_s[warp][lane + 32 * k] = w[k];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
      __syncwarp();
      float acc[kPerLane] = {};
      for (int s0 = 0;;) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (s0 + j < n) {
            const float ws = w_s[warp][s0 + j];
#pragma unroll
            for (int e = 0; e < kPerLane; ++e) acc[e] += ws * x[j][e];
          }
        }
        s0 += kBatch;
        if (s0 >= n) break;
        load_batch(s0);
      }
      __syncwarp();  // w_s is rewritten for the warp's next row
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
      const int pr = mi.m0 + r;
      const int t = group_div(p, pr), g = pr - t * G;
      const int head = kvh * G + g;
      T* out = static_cast<T*>(p.out) + int64_t(mi.q_start + t) * p.out_stride_tok + int64_t(head) * p.out_stride_head +
               lane * kPerLane;
#pragma unroll
      for (int e = 0; e < kPerLane; e += 2)
        *reinterpret_cast<uint32_t*>(out + e) = pack2<T>(acc[e] * inv, acc[e + 1] * inv);
      if (lane == 0 && p.lse != nullptr)
        p.lse[int64_t(mi.q_start + t) * p.lse_stride_tok + int64_t(head) * p.lse_stride_head] =
            lsum > 0.f ? mmax + __logf(lsum) : -INFINITY;
    }
  }
}

}  // namespace fg::cuda::attn
