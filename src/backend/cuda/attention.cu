// Host side of the one attention kernel: the per-step plan (tiles, KV splits, their order) written
// into buffers allocated once, and the per-layer launch of the main and merge kernels.
// Device code lives in attention_kernel.cuh. Nothing here allocates after the constructor, and
// run() only reads the plan, so CUDA graphs captured around run() stay valid across plans.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_kernel.cuh"
#include "backend/cuda/attention_prefill_kernel.cuh"
#include "backend/cuda/attention_wgmma_kernel.cuh"
#include "backend/cuda/launch.cuh"

namespace fg::cuda {

namespace {

#define FG_ATTN_CUDA(expr)                                                                     \
  do {                                                                                         \
    cudaError_t fg_err_ = (expr);                                                              \
    FG_CHECK(fg_err_ == cudaSuccess, std::string(#expr) + ": " + cudaGetErrorString(fg_err_)); \
  } while (0)

constexpr size_t kPartialFloats = size_t(8) << 20;  // 32 MB of f32 partial outputs
constexpr int kHeaderInts = 4;                      // counts[0..3] (see KernelParams::counts), ahead of the items

int ceil_div(int64_t a, int64_t b) {
  return int((a + b - 1) / b);
}

// The tile kind plan() gives a sequence of `rows` packed query rows (query tokens x group): the
// narrowest that holds them up to 64 rows, then 64-row tiles, or 128-row ones where plan() uses
// wide tiles; batch-invariant mode cuts every sequence into 16-row tiles.
int tile_kind_for(int rows, bool batch_invariant, bool use_wide) {
  return rows <= 16 || batch_invariant ? attn::kRows16
         : rows <= 32                  ? attn::kRows32
         : rows <= 64 || !use_wide     ? attn::kRows64
                                       : attn::kRows128;
}

// KV: the cache element, T itself or __nv_fp8_e4m3 (no mma.sync prefill kernel reads fp8 pages).
// wgmma: the device runs the wgmma kernel (other devices may not offer its shared memory).
template <typename T, typename KV, int D>
void set_smem_attr(bool wgmma) {
  FG_ATTN_CUDA(cudaFuncSetAttribute(attn::attention_kernel<T, KV, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    attn::SmemLayout<D, int(sizeof(KV))>::kBytes));
  if constexpr (std::is_same_v<T, KV> && attn::has_wide_tiles(D)) {
    FG_ATTN_CUDA(cudaFuncSetAttribute(attn::attention_prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      attn::PrefillSmem<D>::kBytes));
  }
#if defined(FG_WGMMA)
  if (wgmma)
    FG_ATTN_CUDA(cudaFuncSetAttribute(attn::attention_wgmma_kernel<T, KV, D>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, attn::WgmmaSmem<KV, D>::kBytes));
#else
  (void)wgmma;
#endif
}

// CTAs of the main kernel resident per SM: its launch bounds ask for two, which its shared memory
// allows up to head_dim 128 (112 KB each); at 256 (136 KB) one fits.
int main_ctas_per_sm(int head_dim) {
  return attn::has_wide_tiles(head_dim) ? 2 : 1;
}

// Whether the kernels are built for head_dim and fit a GPU whose blocks may opt into smem_optin
// bytes of shared memory.
Status head_dim_status(int head_dim, int smem_optin) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return unsupported("head_dim " + std::to_string(head_dim) +
                       " is not supported by the CUDA attention kernels (they are built for head_dim 64, 128 and 256)");
  // The main kernel's shared memory at 256, the larger of its bf16 and fp8 (kv_bytes 1) pages.
  constexpr int kBytes256 = std::max(attn::SmemLayout<256>::kBytes, attn::SmemLayout<256, 1>::kBytes);
  if (head_dim == 256 && kBytes256 > smem_optin)
    return unsupported("the CUDA attention kernels need " + std::to_string(kBytes256 / 1024) +
                       " KB of shared memory per block at head_dim 256 and this GPU offers " +
                       std::to_string(smem_optin / 1024) + " KB");
  return Status::ok();
}

int current_device_smem_optin() {
  int dev = 0, bytes = 0;
  FG_ATTN_CUDA(cudaGetDevice(&dev));
  FG_ATTN_CUDA(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

// Capacities of the plan buffers for batches of up to max_total_q tokens and max_num_seqs
// sequences on a GPU of num_sms SMs, and where each buffer sits in the workspace.
struct WorkspaceLayout {
  int item_capacity = 0;
  int merge_capacity = 0;
  size_t meta = 0, merges = 0, partial_o = 0, partial_lse = 0, bytes = 0;  // byte offsets, total

  WorkspaceLayout(int max_total_q, int max_num_seqs, int num_sms) {
    // Tiles are at most num_seqs + total_q * group / 16 (group <= 128; 16-row tiles are the
    // smallest, and batch-invariant mode takes nothing else), splits add at most about two waves
    // of CTAs (plan() only splits when the tiles leave the GPU under-filled). Both kernels' items
    // share the list, so the bound covers their sum.
    item_capacity = max_num_seqs + 8 * max_total_q + 64 * num_sms;
    merge_capacity = max_num_seqs + 8 * num_sms;
    auto align = [](size_t n) { return (n + 255) / 256 * 256; };
    meta = 0;
    merges = align(meta + meta_bytes());
    partial_o = align(merges + size_t(merge_capacity) * sizeof(attn::MergeItem));
    partial_lse = align(partial_o + kPartialFloats * sizeof(float));
    bytes = align(partial_lse + kPartialFloats / 64 * sizeof(float));
  }
  size_t meta_bytes() const { return kHeaderInts * sizeof(int) + size_t(item_capacity) * sizeof(attn::WorkItem); }
};

int current_device_sms() {
  int dev = 0, sms = 0;
  FG_ATTN_CUDA(cudaGetDevice(&dev));
  FG_ATTN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

// What a graph recorded for some bounds launches beyond its recording's own plan, so that every
// plan within the bounds runs in one round (every kernel loops over its units with a grid stride:
// a narrower grid is correct but runs the units past it after the others) and none lacks a launch
// it needs (graph_launches).
struct GraphLaunches {
  int64_t main_units = 0;  // (tile, kv head) units of the bounds' largest batch: 32 sequences x 8 kv
                           // heads were 256 units on a 232-CTA grid before, two rounds
  attn::SplitGrids split;  // main and merge grids of any split plan within the bounds; zeros where
                           // none can split (no merge launch)
  bool wide = false;       // a plan within the bounds can give the prefill kernel 128-row tiles
};

struct AttentionPlanState {
  int num_sms = 0;
  int smem_optin = 0;  // shared memory bytes a block may opt into on this device
  int item_capacity = 0;
  int merge_capacity = 0;
  // Device, inside the owner's workspace: [kHeaderInts] i32 counts, then [item_capacity]
  // WorkItem; merges and split-KV partials separately.
  char* d_meta = nullptr;
  attn::MergeItem* d_merges = nullptr;
  float* d_partial_o = nullptr;
  float* d_partial_lse = nullptr;
  // Pinned staging, double-buffered: a plan never overwrites memory an earlier upload still reads.
  char* h_meta[2] = {nullptr, nullptr};
  attn::MergeItem* h_merges[2] = {nullptr, nullptr};
  cudaEvent_t uploaded[2] = {nullptr, nullptr};
  int next_staging = 0;
  // The current plan.
  bool planned = false;
  int num_items = 0;    // items of the general kernel (items[0, num_items))
  int num_prefill = 0;  // items of the prefill kernel (items[num_items, num_items + num_prefill))
  int num_merges = 0;
  bool prefill_kernel = true;    // give unsplit 128-row tiles to a prefill kernel
  bool wgmma_available = false;  // this build has sm_90a code and the device is sm_90
  bool wgmma = false;            // the prefill kernel is attention_wgmma_kernel (else the mma.sync one)
  bool plan_wgmma = false;       // the current plan's prefill items are for the wgmma kernel
  bool batch_invariant = false;  // 16-row tiles only, no splits, no prefill kernel (use_batch_invariant)
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  int plan_max_q_len = 0, plan_max_kv_len = 0, plan_num_seqs = 0;  // of the current plan's batch
  std::optional<GraphLaunches> graph;  // between begin_capture and end_capture: the launches for its bounds

  size_t meta_bytes() const { return kHeaderInts * sizeof(int) + size_t(item_capacity) * sizeof(attn::WorkItem); }
};

namespace {

// The launches a graph recorded for bounds `b` makes (GraphLaunches), at hq q heads, hkv kv heads
// and head_dim d.
GraphLaunches graph_launches(const AttentionPlanState& s, const GraphAttentionShape& b, int hq, int hkv, int d) {
  GraphLaunches g;
  const int max_q = std::max(1, b.max_q_len), max_kv = std::max(max_q, b.max_kv_len);
  // A sequence's tiles at most: 64-row tiles where plan() could also use wider ones.
  const int rows = max_q * (hq / hkv);
  const int64_t tiles_per_seq = ceil_div(rows, attn::tile_rows(tile_kind_for(rows, s.batch_invariant, false)));
  g.main_units = int64_t(b.num_seqs) * tiles_per_seq * hkv;
  FG_CHECK(g.main_units < (int64_t(1) << 31), "attention graph bounds: too many units for one grid");
  const int64_t resident = int64_t(s.num_sms) * main_ctas_per_sm(d);
  // Every sequence of a replayed batch makes at least one tile (the engine pads its buckets to
  // num_seqs sequences).
  if (!s.batch_invariant)
    g.split = attn::graph_split_grids(g.main_units, int64_t(b.min_num_seqs) * hkv, max_kv, resident);
  // 128-row tiles for the prefill kernel: rows past 64 in as many sequences as make them pay (the
  // recorded batch, one token a sequence, never makes them, so its own plan does not say: a
  // verification graph of 17 tokens at GQA 4 and 64 sequences would get a one-CTA prefill launch
  // for its 512 tiles).
  g.wide = !s.batch_invariant && s.prefill_kernel && rows > 64 && (attn::has_wide_tiles(d) || s.wgmma) &&
           attn::wide_tiles_pay(int64_t(b.num_seqs) * ceil_div(rows, 128), hkv, resident);
  return g;
}

}  // namespace

size_t AttentionKernel::workspace_bytes(int max_total_q, int max_num_seqs) {
  return WorkspaceLayout(max_total_q, max_num_seqs, current_device_sms()).bytes;
}

AttentionKernel::AttentionKernel(int max_total_q, int max_num_seqs, void* workspace)
    : state_(std::make_unique<AttentionPlanState>()) {
  auto& s = *state_;
  FG_CHECK(max_total_q > 0 && max_num_seqs > 0 && workspace != nullptr &&
               (reinterpret_cast<uintptr_t>(workspace) & 255) == 0,
           "attention kernel: needs positive limits and a 256-byte aligned workspace");
  s.num_sms = current_device_sms();
  const WorkspaceLayout w(max_total_q, max_num_seqs, s.num_sms);
  s.item_capacity = w.item_capacity;
  s.merge_capacity = w.merge_capacity;
  char* base = static_cast<char*>(workspace);
  s.d_meta = base + w.meta;
  s.d_merges = reinterpret_cast<attn::MergeItem*>(base + w.merges);
  s.d_partial_o = reinterpret_cast<float*>(base + w.partial_o);
  s.d_partial_lse = reinterpret_cast<float*>(base + w.partial_lse);
  FG_ATTN_CUDA(cudaMemset(s.d_meta, 0, kHeaderInts * sizeof(int)));
  // The memset runs on the legacy stream; finish it before any plan uploads on the caller's
  // (possibly non-blocking) stream, or it could land after the upload and zero the counts.
  FG_ATTN_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i) {
    FG_ATTN_CUDA(cudaMallocHost(&s.h_meta[i], s.meta_bytes()));
    FG_ATTN_CUDA(cudaMallocHost(&s.h_merges[i], size_t(s.merge_capacity) * sizeof(attn::MergeItem)));
    FG_ATTN_CUDA(cudaEventCreateWithFlags(&s.uploaded[i], cudaEventDisableTiming));
  }
  s.wgmma_available = wgmma_sms() > 0;
  s.wgmma = s.wgmma_available;
  s.smem_optin = current_device_smem_optin();
  set_smem_attr<__nv_bfloat16, __nv_bfloat16, 64>(s.wgmma_available);
  set_smem_attr<__nv_bfloat16, __nv_bfloat16, 128>(s.wgmma_available);
  set_smem_attr<__half, __half, 64>(s.wgmma_available);
  set_smem_attr<__half, __half, 128>(s.wgmma_available);
  set_smem_attr<__nv_bfloat16, __nv_fp8_e4m3, 64>(s.wgmma_available);
  set_smem_attr<__nv_bfloat16, __nv_fp8_e4m3, 128>(s.wgmma_available);
  if (head_dim_status(256, s.smem_optin).is_ok()) {  // else plan() refuses head_dim 256
    set_smem_attr<__nv_bfloat16, __nv_bfloat16, 256>(s.wgmma_available);
    set_smem_attr<__half, __half, 256>(s.wgmma_available);
    set_smem_attr<__nv_bfloat16, __nv_fp8_e4m3, 256>(s.wgmma_available);
  }
}

Status AttentionKernel::supports(int head_dim) {
  return head_dim_status(head_dim, current_device_smem_optin());
}

void AttentionKernel::use_prefill_kernel(bool on) {
  state_->prefill_kernel = on;
}

void AttentionKernel::use_batch_invariant(bool on) {
  state_->batch_invariant = on;
}

void AttentionKernel::begin_capture(const GraphAttentionShape& bounds, int num_q_heads, int num_kv_heads, int head_dim,
                                    cudaStream_t stream) {
  auto& s = *state_;
  FG_CHECK(bounds.num_seqs > 0 && num_kv_heads > 0, "attention begin_capture: empty bounds");
  // The recording runs whatever plan this leaves; launch widths come from the bounds alone
  // (run()), so it plans the smallest batch, one token against one key, for callers that record
  // before planning any.
  const int32_t cu[2] = {0, 1}, kv[1] = {1};
  AttentionBatch one;
  one.num_seqs = 1;
  one.total_q = 1;
  one.max_q_len = 1;
  one.max_kv_len = 1;
  one.page_size = bounds.page_size;
  one.host_cu_seqlens_q = cu;
  one.host_seqlens_kv = kv;
  plan(one, num_q_heads, num_kv_heads, head_dim, stream);
  s.graph = graph_launches(s, bounds, num_q_heads, num_kv_heads, head_dim);
}

void AttentionKernel::end_capture() {
  state_->graph.reset();
}

bool AttentionKernel::plan_within(const GraphAttentionShape& b) const {
  const auto& s = *state_;
  if (!s.planned || s.plan_num_seqs > b.num_seqs || s.plan_num_seqs < b.min_num_seqs ||
      s.plan_max_q_len > std::max(1, b.max_q_len) || s.plan_max_kv_len > std::max(1, b.max_kv_len) ||
      s.page_size != b.page_size)
    return false;
  // The launches the graph left out because no batch within its bounds needs them.
  const GraphLaunches g = graph_launches(s, b, s.num_q_heads, s.num_kv_heads, s.head_dim);
  return (s.num_merges == 0 || g.split.merge > 0) && (s.num_prefill == 0 || g.wide);
}

void AttentionKernel::use_wgmma(bool on) {
  state_->wgmma = on && state_->wgmma_available;
}

bool AttentionKernel::wgmma_active() const {
  return state_->wgmma;
}

AttentionKernel::~AttentionKernel() {
  if (!state_) return;
  auto& s = *state_;
  for (int i = 0; i < 2; ++i) {
    if (s.uploaded[i]) cudaEventSynchronize(s.uploaded[i]);
    if (s.uploaded[i]) cudaEventDestroy(s.uploaded[i]);
    cudaFreeHost(s.h_meta[i]);
    cudaFreeHost(s.h_merges[i]);
  }
}

void AttentionKernel::plan(const AttentionBatch& batch, int num_q_heads, int num_kv_heads, int head_dim,
                           cudaStream_t stream) {
  auto& s = *state_;
  FG_CHECK(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0,
           "attention plan: num_q_heads " + std::to_string(num_q_heads) + " is not a multiple of num_kv_heads " +
               std::to_string(num_kv_heads));
  {
    const Status st = head_dim_status(head_dim, s.smem_optin);
    FG_CHECK(st.is_ok(), "attention plan: " + st.message());
  }
  FG_CHECK(
      int(batch.host_cu_seqlens_q.size()) >= batch.num_seqs + 1 && int(batch.host_seqlens_kv.size()) >= batch.num_seqs,
      "attention plan: host metadata shorter than num_seqs");
  const int group = num_q_heads / num_kv_heads;

  // ---- tiles: (sequence, packed-row block); extent = keys a causal tile can see.
  struct Tile {
    int seq, q_start, q_len, kv_len, m0, kind, extent;
  };
  // 128-row tiles where they pay (attn::wide_tiles_pay), else 64-row ones.
  // Where it exists the wgmma kernel takes every batch of wide tiles: measured on an H100 against
  // the mma.sync prefill kernel down to 16 x 512 (mean causal extent 256 keys), it ties or wins.
  const int resident = s.num_sms * main_ctas_per_sm(head_dim);
  int64_t wide_tiles = 0;
  for (int q = 0; q < batch.num_seqs; ++q) {
    const int rows = (batch.host_cu_seqlens_q[q + 1] - batch.host_cu_seqlens_q[q]) * group;
    if (rows > 64) wide_tiles += ceil_div(rows, 128);
  }
  const bool wgmma = !s.batch_invariant && s.prefill_kernel && s.wgmma;
  // At head_dim 256 only the wgmma kernel has 128-row tiles (attn::has_wide_tiles). Wide tiles
  // make at least 1.5 waves of CTAs, so the split below never cuts them (it needs less than one).
  const bool use_wide =
      (attn::has_wide_tiles(head_dim) || wgmma) && attn::wide_tiles_pay(wide_tiles, num_kv_heads, resident);
  std::vector<Tile> tiles;
  int max_q_len = 0, max_kv_len = 0;
  for (int q = 0; q < batch.num_seqs; ++q) {
    const int q_start = batch.host_cu_seqlens_q[q];
    const int q_len = batch.host_cu_seqlens_q[q + 1] - q_start;
    const int kv_len = batch.host_seqlens_kv[q];
    if (q_len <= 0) continue;
    max_q_len = std::max(max_q_len, q_len);
    max_kv_len = std::max(max_kv_len, kv_len);
    FG_CHECK(kv_len >= q_len, "attention plan: sequence " + std::to_string(q) + " has seqlens_kv " +
                                  std::to_string(kv_len) + " < its " + std::to_string(q_len) + " new tokens");
    const int rows = q_len * group;
    const int kind = tile_kind_for(rows, s.batch_invariant, use_wide);
    const int tr = attn::tile_rows(kind);
    for (int m0 = 0; m0 < rows; m0 += tr) {
      const int t_last = std::min(q_len - 1, (m0 + tr - 1) / group);
      const int extent = kv_len - q_len + t_last + 1;
      tiles.push_back({q, q_start, q_len, kv_len, m0, kind, extent});
    }
  }

  // ---- splits (attention_plan.h): only when the tiles x kv heads leave the SMs under-filled.
  int chunk = 0;  // 0 = no split
  if (!s.batch_invariant) {
    std::vector<int> extents(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) extents[i] = tiles[i].extent;
    attn::SplitStep step;
    step.extents = extents;
    step.num_kv_heads = num_kv_heads;
    step.head_dim = head_dim;
    step.num_sms = s.num_sms;
    step.ctas_per_sm = main_ctas_per_sm(head_dim);
    chunk = attn::split_chunk(step);
  }
  if (chunk > 0) {
    // Grow the chunk until the partial outputs fit the buffer allocated once.
    for (;;) {
      size_t floats = 0;
      int merges = 0;
      for (const Tile& t : tiles) {
        const int n = attn::splits_of(t.extent, chunk);
        if (n > 1) {
          floats += size_t(n) * num_kv_heads * attn::tile_rows(t.kind) * head_dim;
          ++merges;
        }
      }
      if (floats <= kPartialFloats && merges <= s.merge_capacity) break;
      chunk *= 2;
    }
  }

  // ---- work items, most keys first (longest-processing-time order balances causal prefill).
  const int st = s.next_staging;
  s.next_staging ^= 1;
  FG_ATTN_CUDA(cudaEventSynchronize(s.uploaded[st]));
  auto* header = reinterpret_cast<int*>(s.h_meta[st]);
  auto* items = reinterpret_cast<attn::WorkItem*>(s.h_meta[st] + kHeaderInts * sizeof(int));
  attn::MergeItem* merges = s.h_merges[st];
  int n_items = 0, n_merges = 0, next_slot = 0;
  struct Keyed {
    int64_t cost;
    attn::WorkItem item;
  };
  std::vector<Keyed> keyed, keyed_prefill;
  keyed.reserve(tiles.size());
  // Unsplit 128-row tiles go to a prefill kernel: the wgmma one takes any page size, the mma.sync
  // one needs pages that hold whole 8-key groups.
  const bool prefill_pages =
      wgmma || (!s.batch_invariant && s.prefill_kernel && attn::prefill_page_size_ok(batch.page_size));
  for (const Tile& t : tiles) {
    const int n = attn::splits_of(t.extent, chunk);
    const int rows = attn::tile_rows(t.kind);
    FG_CHECK(attn::has_wide_tiles(head_dim) || t.kind != attn::kRows128 || (n == 1 && wgmma),
             "attention plan: a 128-row tile at head_dim 256 that the wgmma kernel does not take");
    if (n == 1 && prefill_pages && t.kind == attn::kRows128) {
      keyed_prefill.push_back(
          {t.extent, {t.seq, t.q_start, t.q_len, t.kv_len, t.m0, 0, t.kv_len, -1, t.kind, {0, 0, 0}}});
      continue;
    }
    // Larger tiles do more math per key (the 16- and 32-row kinds are bound by reading K/V).
    const int64_t row_weight = t.kind == attn::kRows128 ? 4 : t.kind == attn::kRows64 ? 2 : 1;
    if (n == 1) {
      keyed.push_back({int64_t(t.extent) * row_weight,
                       {t.seq, t.q_start, t.q_len, t.kv_len, t.m0, 0, t.kv_len, -1, t.kind, {0, 0, 0}}});
      continue;
    }
    FG_CHECK(n_merges < s.merge_capacity, "attention plan: merge list overflow");
    // Partial rows of split i, kv head h, tile row r: slot + (i * num_kv_heads + h) * rows + r.
    // Slots count rows (not splits) because tiles of different row counts share the buffer.
    merges[n_merges++] = {t.q_start, t.q_len, t.m0, rows, n, next_slot, {0, 0}};
    for (int i = 0; i < n; ++i) {
      const int begin = i * chunk;
      const int end = i == n - 1 ? t.kv_len : (i + 1) * chunk;  // the last split also covers keys a
                                                                // non-causal run would see
      const int64_t cost = std::min(end, t.extent) - begin;
      keyed.push_back({cost * row_weight,
                       {t.seq,
                        t.q_start,
                        t.q_len,
                        t.kv_len,
                        t.m0,
                        begin,
                        end,
                        next_slot + i * num_kv_heads * rows,
                        t.kind,
                        {0, 0, 0}}});
    }
    next_slot += n * num_kv_heads * rows;
  }
  FG_CHECK(int(keyed.size() + keyed_prefill.size()) <= s.item_capacity,
           "attention plan: " + std::to_string(keyed.size() + keyed_prefill.size()) +
               " work items exceed the capacity " + std::to_string(s.item_capacity) +
               " sized from max_total_q/max_num_seqs");
  auto by_cost = [](const Keyed& a, const Keyed& b) { return a.cost > b.cost; };
  std::stable_sort(keyed.begin(), keyed.end(), by_cost);
  std::stable_sort(keyed_prefill.begin(), keyed_prefill.end(), by_cost);
  for (const Keyed& k : keyed) items[n_items++] = k.item;
  const int n_general = n_items;
  for (const Keyed& k : keyed_prefill) items[n_items++] = k.item;
  header[0] = n_general;
  header[1] = n_merges;
  header[2] = n_items - n_general;
  header[3] = n_general;

  FG_ATTN_CUDA(cudaMemcpyAsync(s.d_meta, s.h_meta[st],
                               kHeaderInts * sizeof(int) + size_t(n_items) * sizeof(attn::WorkItem),
                               cudaMemcpyHostToDevice, stream));
  if (n_merges > 0)
    FG_ATTN_CUDA(cudaMemcpyAsync(s.d_merges, merges, size_t(n_merges) * sizeof(attn::MergeItem), cudaMemcpyHostToDevice,
                                 stream));
  FG_ATTN_CUDA(cudaEventRecord(s.uploaded[st], stream));
  s.planned = true;
  s.num_items = n_general;
  s.num_prefill = n_items - n_general;
  s.num_merges = n_merges;
  s.plan_wgmma = wgmma;
  s.plan_max_q_len = max_q_len;
  s.plan_max_kv_len = max_kv_len;
  s.plan_num_seqs = batch.num_seqs;
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.page_size = batch.page_size;
}

namespace {

// Grids of 0 skip a kernel. The prefill kernel runs first: its tiles are the longest. Head sizes
// without the general kernel's 128-row tiles have no mma.sync prefill kernel (run() passes
// prefill_grid 0 unless the prefill kernel is the wgmma one). KV as in set_smem_attr (fp8 pages
// never go to the mma.sync prefill kernel: run() sets its grid to 0).
template <typename T, typename KV, int D>
void launch(const attn::KernelParams& kp, bool wgmma, int prefill_grid, int main_grid, int merge_grid,
            cudaStream_t stream) {
  if (prefill_grid > 0 && wgmma) {
#if defined(FG_WGMMA)
    launch_kernel(attn::attention_wgmma_kernel<T, KV, D>, prefill_grid, attn::kWgThreads,
                  attn::WgmmaSmem<KV, D>::kBytes, stream, kp);
#endif
  } else if (prefill_grid > 0) {
    if constexpr (std::is_same_v<T, KV> && attn::has_wide_tiles(D)) {
      launch_kernel(attn::attention_prefill_kernel<T, D>, prefill_grid, attn::kThreads, attn::PrefillSmem<D>::kBytes,
                    stream, kp);
    }
  }
  if (main_grid > 0) {
    launch_kernel(attn::attention_kernel<T, KV, D>, main_grid, attn::kThreads,
                  attn::SmemLayout<D, int(sizeof(KV))>::kBytes, stream, kp);
  }
  if (merge_grid > 0) {
    launch_kernel(attn::attention_merge_kernel<T, D>, merge_grid, attn::kThreads, 0, stream, kp);
  }
}

// d: a head size plan() accepted (64, 128 or 256).
template <typename T, typename KV>
void launch_head_dim(int d, const attn::KernelParams& kp, bool wgmma, int prefill_grid, int main_grid, int merge_grid,
                     cudaStream_t stream) {
  if (d == 64)
    launch<T, KV, 64>(kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
  else if (d == 128)
    launch<T, KV, 128>(kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
  else
    launch<T, KV, 256>(kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

void AttentionKernel::run(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch,
                          const AttentionParams& params, Tensor& out, Tensor* lse, cudaStream_t stream) const {
  auto& s = *state_;
  FG_CHECK(s.planned, "attention run() before plan()");
  FG_CHECK(q.ndim == 3 && out.ndim == 3 && cache.k.ndim == 4 && cache.v.ndim == 4, "attention: tensor ranks");
  const int hq = int(q.shape[1]), d = int(q.shape[2]);
  const int hkv = int(cache.k.shape[2]);
  FG_CHECK(hq == s.num_q_heads && hkv == s.num_kv_heads && d == s.head_dim,
           "attention: run() shapes differ from the plan (heads/head_dim)");
  // fp8 pages (backend.h's KvCacheLayer) with bf16 activations: e4m3 codes and a scale per kv head.
  const bool fp8 = cache.k.dtype == DType::kF8E4M3;
  FG_CHECK(q.dtype == out.dtype && (q.dtype == DType::kBF16 || q.dtype == DType::kF16) &&
               cache.v.dtype == cache.k.dtype && (fp8 ? q.dtype == DType::kBF16 : q.dtype == cache.k.dtype),
           "attention: q/out must be bf16 or f16 and the K/V cache of the same dtype, or f8_e4m3 with bf16: " +
               q.describe() + " vs " + cache.k.describe());
  if (fp8)
    for (const Tensor* t : {&cache.k_scale, &cache.v_scale})
      FG_CHECK(t->data != nullptr && t->device == Device::kCuda && t->dtype == DType::kF32 && t->ndim == 1 &&
                   t->shape[0] == hkv && (hkv == 1 || t->stride[0] == 1),
               "attention: an fp8 KV cache needs k_scale and v_scale [num_kv_heads] f32 on the device, got " +
                   t->describe());
  // Elements per 16-byte chunk of a K/V row: strides and bases must be whole chunks.
  const int64_t ec = 16 / int64_t(dtype_size(cache.k.dtype));
  FG_CHECK(q.stride[2] == 1 && out.stride[2] == 1 && cache.k.stride[3] == 1 && cache.v.stride[3] == 1,
           "attention: the head_dim axis must be contiguous");
  for (int i = 0; i < 3; ++i)
    FG_CHECK(cache.k.stride[i] == cache.v.stride[i], "attention: k and v caches must share strides");
  FG_CHECK(q.stride[0] % 8 == 0 && q.stride[1] % 8 == 0 && out.stride[0] % 8 == 0 && out.stride[1] % 8 == 0 &&
               cache.k.stride[0] % ec == 0 && cache.k.stride[1] % ec == 0 && cache.k.stride[2] % ec == 0 &&
               aligned16(q.data) && aligned16(out.data) && aligned16(cache.k.data) && aligned16(cache.v.data),
           "attention: q/out/cache rows must be 16-byte aligned");
  FG_CHECK(int(cache.k.shape[1]) == batch.page_size && batch.page_size >= 1, "attention: page size mismatch");
  FG_CHECK(batch.block_table.dtype == DType::kI32, "attention: block_table must be i32");
  FG_CHECK(params.scale > 0.f, "attention: scale must be positive");
  FG_CHECK(s.num_prefill == 0 || batch.page_size == s.page_size || s.plan_wgmma,
           "attention: run() page size differs from the plan's");

  attn::KernelParams kp{};
  kp.q = q.data;
  kp.q_stride_tok = q.stride[0];
  kp.q_stride_head = q.stride[1];
  kp.k = cache.k.data;
  kp.v = cache.v.data;
  {
    // K/V rows are addressed in 32-bit counts of 16-byte chunks (strides are whole chunks,
    // checked above).
    int64_t span = 1;
    for (int i = 0; i < 4; ++i) span += (cache.k.shape[i] - 1) * cache.k.stride[i];
    FG_CHECK(span / ec < (int64_t(1) << 32), "attention: a KV cache layer of " + std::to_string(span) +
                                                 " elements exceeds the kernels' 2^32-chunk addressing");
  }
  kp.kv_page_chunks = uint32_t(cache.k.stride[0] / ec);
  kp.kv_slot_chunks = uint32_t(cache.k.stride[1] / ec);
  kp.kv_stride_head = cache.k.stride[2];
  kp.out = out.data;
  kp.out_stride_tok = out.stride[0];
  kp.out_stride_head = out.stride[1];
  if (lse != nullptr && lse->data != nullptr) {
    FG_CHECK(lse->dtype == DType::kF32 && lse->ndim == 2, "attention: lse must be f32 [total_q, num_q_heads]");
    kp.lse = lse->ptr<float>();
    kp.lse_stride_tok = lse->stride[0];
    kp.lse_stride_head = lse->stride[1];
  }
  kp.block_table = batch.block_table.ptr<const int>();
  kp.bt_stride = batch.block_table.ndim == 2 ? batch.block_table.stride[0] : 0;
  kp.page_size = batch.page_size;
  kp.page_shift = -1;
  if ((batch.page_size & (batch.page_size - 1)) == 0) {
    int sh = 0;
    while ((1 << sh) < batch.page_size) ++sh;
    kp.page_shift = sh;
  } else {
    // page_index() divides by a multiply-high, exact for key positions below 2^32 / page_size;
    // no sequence reaches more keys than its block table row holds.
    const int64_t row_pages = batch.block_table.ndim == 2 ? batch.block_table.shape[1] : batch.block_table.numel();
    const int64_t max_keys = row_pages * batch.page_size;
    FG_CHECK(max_keys <= (int64_t(1) << 32) / batch.page_size,
             "attention: page size " + std::to_string(batch.page_size) + " with " + std::to_string(max_keys) +
                 " addressable keys is beyond the kernels' key indexing");
    kp.page_magic = uint32_t(((uint64_t(1) << 32) + batch.page_size - 1) / batch.page_size);
  }
  kp.num_kv_heads = hkv;
  kp.group = hq / hkv;
  // The kernels divide packed rows (< total_q x group, plus a tile's 128 rows of padding) by the
  // group and work units (< the item list's capacity x kv heads) by the kv heads with
  // attn::fast_div, exact below 2^32 / divisor.
  FG_CHECK((int64_t(q.shape[0]) * kp.group + 128) * kp.group < (int64_t(1) << 32) &&
               int64_t(std::max(s.item_capacity, s.merge_capacity)) * hkv * hkv < (int64_t(1) << 32),
           "attention: " + std::to_string(q.shape[0]) + " query tokens at group " + std::to_string(kp.group) + " or " +
               std::to_string(hkv) + " kv heads exceed the kernels' index division");
  kp.group_magic = attn::fast_div_magic(kp.group);
  kp.kv_heads_magic = attn::fast_div_magic(hkv);
  kp.scale_log2 = params.scale * attn::kLog2e;
  if (params.softcap > 0.f) {
    kp.softcap_log2 = params.softcap * attn::kLog2e;
    kp.softcap_in = params.scale / params.softcap;
  }
  kp.causal = params.causal ? 1 : 0;
  kp.window = std::max(0, params.sliding_window);
  kp.counts = reinterpret_cast<const int*>(s.d_meta);
  kp.items = reinterpret_cast<const attn::WorkItem*>(s.d_meta + kHeaderInts * sizeof(int));
  kp.merges = s.d_merges;
  kp.partial_o = s.d_partial_o;
  kp.partial_lse = s.d_partial_lse;
  if (fp8) {
    kp.k_scale = cache.k_scale.ptr<const float>();
    kp.v_scale = cache.v_scale.ptr<const float>();
  }

  // A graph being captured must hold every launch even if this plan leaves one empty: a later
  // plan replayed through the same graph may split or have prefill tiles (every kernel loops
  // over its units with a grid stride, so any grid is correct). The prefill kernel's grid stays
  // fixed in the graph: a full one (one CTA per resident slot; the persistent wgmma kernel, one
  // per SM) when the captured plan has prefill tiles, else a single CTA, so that the decode-only
  // graphs the engine captures do not pay an empty 132-CTA launch per layer (a later plan with
  // prefill tiles replayed through such a graph is correct but runs them on one SM).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FG_ATTN_CUDA(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  // Whether a plan's tiles go to the wgmma kernel depends on the options only, never on the batch,
  // so a recorded graph's prefill launch serves every later plan of the same options.
  const bool wgmma = s.plan_wgmma;
  int prefill_grid = s.num_prefill * hkv;
  if (wgmma) prefill_grid = std::min(prefill_grid, s.num_sms);
  int main_grid = s.num_items * hkv;
  int merge_grid = s.num_merges * hkv;
  // fp8 pages and no wgmma kernel: the general kernel runs the prefill items too (its 128-row
  // tile shape), since the mma.sync prefill kernel reads act-dtype pages only.
  if (fp8 && !wgmma) {
    kp.general_runs_prefill = 1;
    main_grid += s.num_prefill * hkv;
    prefill_grid = 0;
  }
  if (capturing) {
    // With begin_capture's bounds, the launches any plan within them needs (GraphLaunches); without
    // (a graph of this plan alone), its own, at least one CTA each.
    const GraphLaunches g = s.graph.value_or(GraphLaunches{});
    prefill_grid = kp.general_runs_prefill         ? 0
                   : s.num_prefill == 0 && !g.wide ? 1
                   : wgmma                         ? s.num_sms
                                                   : std::max(prefill_grid, 2 * s.num_sms);
    main_grid = std::max({main_grid, int(g.main_units), int(g.split.main), 1});
    merge_grid = std::max({merge_grid, int(g.split.merge), 1});
    // Launches no batch within the bounds can need (plan_within checks each replayed plan).
    if (s.graph && !g.wide) prefill_grid = 0;
    if (s.graph && g.split.merge == 0) merge_grid = 0;
    // No plan of batch-invariant mode has prefill items or splits.
    if (s.batch_invariant) prefill_grid = merge_grid = 0;
  }
  if (!attn::has_wide_tiles(d) && !wgmma) prefill_grid = 0;  // no mma.sync prefill kernel at this head size

  if (fp8)
    launch_head_dim<__nv_bfloat16, __nv_fp8_e4m3>(d, kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
  else if (q.dtype == DType::kBF16)
    launch_head_dim<__nv_bfloat16, __nv_bfloat16>(d, kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
  else
    launch_head_dim<__half, __half>(d, kp, wgmma, prefill_grid, main_grid, merge_grid, stream);
}

}  // namespace fg::cuda
