// Token sampling on the device, exactly the rule of backend/sampling_rule.h, without sorting the
// vocabulary. Each row is sampled by a cluster of kCluster CTAs (thread-block clusters, sm_90; one
// CTA elsewhere), each over a slice of the vocabulary, exchanging partial results through
// distributed shared memory.
//
// Every candidate gets a 64-bit key (its probability's f32 bits, then the bitwise complement of
// its id) whose descending order is the rule's order (p descending, lower id first); keys are
// unique. "Keep a prefix of that order" and "walk the kept prefix until the cumulative p exceeds
// a target" then become radix descents over the key bits, 8 bits per pass: each pass builds a
// 256-bucket histogram (count and probability mass) of the candidates that share the key bits
// fixed so far, and picks the bucket where the condition first holds (eight passes would isolate
// one candidate; the list below ends a descent by the seventh). A descent is run only where the rule needs its answer
// (the top-p boundary, the kept set when top-k or min-p cut it, the sampled token). Each CTA keeps its slice's p in
// shared memory from the first histogram on (where the slice fits; else every pass recomputes p, a division in double
// among others). Once a descent's prefix leaves at most kListCap candidates, the CTAs gather their keys into the first
// CTA's shared memory, which sorts them and finds the answer by a prefix sum instead of the remaining passes. A warp
// adds into a histogram once per distinct bucket among its lanes (most candidates of a row share the first passes'
// buckets, where one atomic per candidate on one shared address serialised every pass). Greedy rows take the arg-max
// alone.
//
// Probability mass is accumulated in 2^-62 fixed point with integers, so histograms do not depend
// on the order anything is added in: the same inputs give the same token on every run. p is
// computed as on the CPU backend (f32 terms, double sum); only the order of that sum (fixed: per
// CTA, then the cluster's CTAs in rank order, whatever the batch) and fixed-point vs double
// cumulative sums differ, so only near-ties can pick a different token.
#include <cooperative_groups.h>

#include <climits>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/sampling_rule.h"

namespace fg::cuda {

namespace {

constexpr int kThreads = 1024;        // mask_logits
constexpr int kSampleThreads = 1024;  // a sampling CTA
constexpr int kCluster = 8;           // CTAs per row where clusters exist
constexpr int kBuckets = 256;
constexpr float kMassScale = 0x1p62f;
// A descent's candidates the first CTA sorts: gathered once the prefix leaves at most this many.
constexpr int kListCap = 2048;
static_assert(kListCap % kSampleThreads == 0, "finish_list gives each thread the same number of entries");

// The row's CTAs: rank, barrier and peers' shared memory. C == 1: the block alone.
template <int C>
struct Cluster {
  __device__ static unsigned rank() {
    if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      return cooperative_groups::this_cluster().block_rank();
#endif
    }
    return 0;
  }
  // A barrier of every thread of the cluster whose shared-memory writes before it are visible
  // to every peer after it.
  __device__ static void sync() {
    if constexpr (C == 1) {
      __syncthreads();
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      cooperative_groups::this_cluster().sync();
#else
      __trap();
#endif
    }
  }
  template <class T>
  __device__ static T* peer(T* p, unsigned r) {
    if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      return cooperative_groups::this_cluster().map_shared_rank(p, r);
#else
      __trap();
#endif
    }
    return p;
  }
};

struct RowStats {
  float temperature;
  float z_max;   // max of logits / temperature
  double z_sum;  // sum of exp(logit / temperature - z_max), each term f32, summed in double
};

// This CTA's slice of a row's logits, and its candidates' p once computed (shared memory, or null
// where the slice does not fit: then p is recomputed from the logits).
struct Slice {
  const float* logits;  // the row
  int begin, end;
  float* p;     // [end - begin]
  bool cached;  // p holds the slice's values
};

// p of candidate i as the CPU backend computes it: f32 terms, the quotient by the double sum
// rounded to f32. The same instruction sequence everywhere, so every pass sees the same p.
__device__ __forceinline__ float candidate_p(float logit, const RowStats& s) {
  float e = expf(__fsub_rn(__fdiv_rn(logit, s.temperature), s.z_max));
  return __double2float_rn(__ddiv_rn(double(e), s.z_sum));
}

__device__ double block_sum_f64(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();
  return t;
}

__device__ __forceinline__ uint64_t candidate_key(float p, int id) {
  return (uint64_t(__float_as_uint(p)) << 32) | uint64_t(0xffffffffu - uint32_t(id));
}

__device__ __forceinline__ int key_id(uint64_t key) {
  return int(0xffffffffu - uint32_t(key & 0xffffffffu));
}

__device__ __forceinline__ uint64_t fixed_mass(float p) {
  return __float2ull_rz(p * kMassScale);
}

enum class Stop { kCountAtLeast, kMassAtLeast, kMassAbove };

struct Descent {
  uint64_t key;
  uint64_t count;  // candidates up to and including `key` in the rule's order
  uint64_t mass;   // their probability mass, fixed point
  bool found;
};

struct Hist {
  unsigned int count[kBuckets];
  unsigned long long mass[kBuckets];
};

// A CTA's histogram while warps add into it: the mass as two 32-bit words, the low word's
// carries added into the high one (shared memory has 32-bit atomic adds; a 64-bit add is a
// compare-and-swap loop, which warps adding into the same bucket kept retrying).
struct LocalHist {
  unsigned int count[kBuckets];
  unsigned int mass_lo[kBuckets];
  unsigned int mass_hi[kBuckets];
};

struct Shared {
  unsigned long long list[kListCap];  // the first CTA's: a descent's last candidates
  unsigned long long scan[kSampleThreads / 32];
  unsigned int list_len;
  int list_hit;
  Descent result;                  // the first CTA's: the descent's answer
  LocalHist local[2];              // this CTA's histogram of a pass; alternate passes alternate (peers read it)
  Hist total;                      // the cluster's sums of the current pass
  Hist total0;                     // the first pass's, the same for every descent
  unsigned long long total0_mass;  // the row's whole mass
  // Values peers read, each written once per launch.
  float x_max;
  double x_sum;
  unsigned int x_count;
  float x_best;
  int x_best_id;
  float scratch[32];
  double scratch_f64[32];
  int chosen_bucket;
  unsigned long long above_count;
  unsigned long long above_mass;
};

// Adds the lanes that `take` into bucket b of h with one set of atomics per distinct bucket of
// the warp (one match where the takers do not all share a bucket). Every lane of the warp calls it
// (converged); the sums are integers, so the result does not depend on how lanes group. A mass is
// below 2^62: three 21-bit parts of 32 lanes fit 32 bits.
__device__ __forceinline__ void hist_add(LocalHist& h, bool take, int b, uint64_t m) {
  const unsigned takers = __ballot_sync(0xffffffffu, take);
  if (!take) return;
  const int first = __ffs(takers) - 1;
  unsigned group = takers;
  if (!__all_sync(takers, b == __shfl_sync(takers, b, first))) group = __match_any_sync(takers, b);
  const unsigned lo = __reduce_add_sync(group, unsigned(m) & 0x1fffffu);
  const unsigned mid = __reduce_add_sync(group, unsigned(m >> 21) & 0x1fffffu);
  const unsigned hi = __reduce_add_sync(group, unsigned(m >> 42));
  if (int(threadIdx.x & 31) == __ffs(group) - 1) {
    atomicAdd(&h.count[b], unsigned(__popc(group)));
    const uint64_t sum = uint64_t(lo) + (uint64_t(mid) << 21) + (uint64_t(hi) << 42);
    const unsigned add_lo = unsigned(sum), old = atomicAdd(&h.mass_lo[b], add_lo);
    atomicAdd(&h.mass_hi[b], unsigned(sum >> 32) + (old + add_lo < old ? 1u : 0u));
  }
}

__device__ __forceinline__ void clear_hist(LocalHist& h) {
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
    h.count[b] = 0;
    h.mass_lo[b] = 0;
    h.mass_hi[b] = 0;
  }
  __syncthreads();
}

// Calls f(logit) for each logit of the slice, four loads in flight per thread.
template <class F>
__device__ __forceinline__ void for_logits(const Slice& s, F&& f) {
  constexpr int kUnroll = 4;
  const int stride = int(blockDim.x);
  int i = s.begin + int(threadIdx.x);
  for (; i + (kUnroll - 1) * stride < s.end; i += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = s.logits[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(v[u]);
  }
  for (; i < s.end; i += stride) f(s.logits[i]);
}

// Calls f(i, p) for each candidate i of the slice, every lane of a warp the same number of times
// (i = -1 past the end), four loads in flight per thread. `store`: the pass that computes p keeps
// it in s.p (where the slice fits).
template <class F>
__device__ __forceinline__ void for_candidates(const Slice& s, const RowStats& st, bool store, F&& f) {
  constexpr int kUnroll = 4;
  const int stride = int(blockDim.x);
  for (int i0 = s.begin + int(threadIdx.x & ~31u); i0 < s.end; i0 += kUnroll * stride) {
    const int lane_i = i0 + int(threadIdx.x & 31);
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = lane_i + u * stride;
      v[u] = i >= s.end ? 0.0f : s.cached ? s.p[i - s.begin] : s.logits[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = lane_i + u * stride;
      float p = v[u];
      if (!s.cached) {
        p = candidate_p(v[u], st);
        if (store && s.p != nullptr && i < s.end) s.p[i - s.begin] = p;
      }
      f(i < s.end ? i : -1, p);
    }
  }
}

// This CTA's histogram of the 8 key bits at `shift` over its slice's candidates whose higher bits
// equal `prefix`'s (all of them when `all`: the first pass, which keeps p where the slice fits).
__device__ void build_histogram(const Slice& s, const RowStats& st, int shift, uint64_t prefix, bool all,
                                LocalHist& h) {
  clear_hist(h);
  for_candidates(s, st, all, [&](int i, float p) {
    const uint64_t key = candidate_key(p, i);
    const bool take = i >= 0 && (all || (key >> (shift + 8)) == (prefix >> (shift + 8)));
    hist_add(h, take, int((key >> shift) & 0xff), fixed_mass(p));
  });
}

// The keys of every candidate of the slice whose bits from `shift` up equal `prefix`'s, appended
// to `root`'s list (the first CTA's; in any order: it sorts them). The caller knows there are at
// most kListCap in the cluster.
__device__ void gather_list(const Slice& s, const RowStats& st, int shift, uint64_t prefix, Shared& root) {
  for_candidates(s, st, false, [&](int i, float p) {
    const uint64_t key = candidate_key(p, i);
    const bool take = i >= 0 && (key >> shift) == (prefix >> shift);
    const unsigned takers = __ballot_sync(0xffffffffu, take);
    if (takers == 0) return;
    const int lane = int(threadIdx.x & 31), leader = __ffs(takers) - 1;
    unsigned base = 0;
    if (lane == leader) base = atomicAdd(&root.list_len, unsigned(__popc(takers)));
    base = __shfl_sync(0xffffffffu, base, leader);
    const unsigned slot = base + unsigned(__popc(takers & ((1u << lane) - 1u)));
    if (take && slot < unsigned(kListCap)) root.list[slot] = key;  // always: the histogram counted them
  });
}

// The cluster's sums of every CTA's local[buf] into `out`.
template <int C>
__device__ void reduce_hist(Shared& sh, int buf, Hist& out) {
  Cluster<C>::sync();  // every CTA's histogram is complete
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
    unsigned int n[C];
    unsigned long long m[C];
#pragma unroll
    for (int r = 0; r < C; ++r) {  // every load first: peers' memory is far
      const LocalHist* h = Cluster<C>::peer(&sh.local[buf], unsigned(r));
      n[r] = h->count[b];
      m[r] = (uint64_t(h->mass_hi[b]) << 32) | h->mass_lo[b];
    }
    unsigned int c = 0;
    unsigned long long mass = 0;
#pragma unroll
    for (int r = 0; r < C; ++r) {
      c += n[r];
      mass += m[r];
    }
    out.count[b] = c;
    out.mass[b] = mass;
  }
  __syncthreads();
}

__device__ bool stop_holds(Stop stop, uint64_t target, uint64_t count, uint64_t mass) {
  switch (stop) {
    case Stop::kCountAtLeast: return count >= target;
    case Stop::kMassAtLeast: return mass >= target;
    case Stop::kMassAbove: return mass > target;
  }
  return false;
}

// Walks t's non-empty buckets from the highest, after sh.above_count / above_mass candidates and
// mass, to the first where `stop` holds for the prefix through it: sh.chosen_bucket (-1 if none)
// and the count and mass above it. Warp 0's lanes take 8 buckets each.
__device__ void choose_bucket(const Hist& t, Stop stop, uint64_t target, Shared& sh) {
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    const int top = kBuckets - 1 - 8 * lane;
    uint64_t c = 0, m = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      c += t.count[top - j];
      m += t.mass[top - j];
    }
    uint64_t ic = c, im = m;  // inclusive prefix over lanes (lane 0 holds the highest buckets)
    for (int o = 1; o < 32; o <<= 1) {
      const uint64_t xc = __shfl_up_sync(0xffffffffu, ic, o), xm = __shfl_up_sync(0xffffffffu, im, o);
      if (lane >= o) {
        ic += xc;
        im += xm;
      }
    }
    uint64_t cc = sh.above_count + ic - c, cm = sh.above_mass + im - m;
    int hit = -1;
    for (int j = 0; j < 8; ++j) {
      const int b = top - j;
      const unsigned int n = t.count[b];
      if (n == 0) continue;
      if (stop_holds(stop, target, cc + n, cm + t.mass[b])) {
        hit = b;
        break;
      }
      cc += n;
      cm += t.mass[b];
    }
    const unsigned hits = __ballot_sync(0xffffffffu, hit >= 0);
    if (hits == 0) {
      if (lane == 0) sh.chosen_bucket = -1;
    } else if (lane == __ffs(hits) - 1) {
      sh.chosen_bucket = hit;
      sh.above_count = cc;
      sh.above_mass = cm;
    }
  }
  __syncthreads();
}

// The first CTA's end of a descent: its list (the candidates under the prefix, after
// sh.above_count / above_mass in the rule's order) sorted by key descending, their masses summed
// in that order, and the first where `stop` holds: sh.result. Empties the list.
__device__ void finish_list(Shared& sh, Stop stop, uint64_t target) {
  const int n = int(sh.list_len);
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + int(threadIdx.x); i < size; i += blockDim.x) sh.list[i] = 0;  // no key is 0
  if (threadIdx.x == 0) sh.list_hit = INT_MAX;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {  // bitonic sort, descending
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int o = i ^ j;
        if (o <= i) continue;
        const unsigned long long a = sh.list[i], b = sh.list[o];
        if (((i & k) == 0) ? a < b : a > b) {
          sh.list[i] = b;
          sh.list[o] = a;
        }
      }
      __syncthreads();
    }
  }
  // Thread t takes entries [kPer t, kPer (t + 1)): their masses, then the block's exclusive prefix.
  constexpr int kPer = kListCap / kSampleThreads;
  const int first = kPer * int(threadIdx.x);
  uint64_t m[kPer], own = 0;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    m[u] = first + u < n ? fixed_mass(__uint_as_float(uint32_t(sh.list[first + u] >> 32))) : 0;
    own += m[u];
  }
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  uint64_t incl = own;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  if (lane == 31) sh.scan[warp] = incl;
  __syncthreads();
  uint64_t before = incl - own;
  for (int w = 0; w < warp; ++w) before += sh.scan[w];
  uint64_t c = sh.above_count + uint64_t(first), mass = sh.above_mass + before;
  int hit = -1;
  uint64_t hit_mass = 0;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (hit < 0 && first + u < n && stop_holds(stop, target, c + 1, mass + m[u])) {
      hit = first + u;
      hit_mass = mass + m[u];
    }
    ++c;
    mass += m[u];
  }
  if (hit >= 0) atomicMin(&sh.list_hit, hit);
  __syncthreads();
  if (hit >= 0 && hit == sh.list_hit)
    sh.result = Descent{sh.list[hit], sh.above_count + uint64_t(hit) + 1, hit_mass, true};
  if (threadIdx.x == 0) {
    if (sh.list_hit == INT_MAX) sh.result = Descent{0, 0, 0, false};
    sh.list_len = 0;
  }
}

// The first candidate in the rule's order at which `stop` holds for the prefix through it.
// `phase` counts the cluster's histogram passes (which local buffer a pass fills).
template <int C>
__device__ Descent descend(const Slice& s, const RowStats& st, Stop stop, uint64_t target, Shared& sh,
                           unsigned& phase) {
  uint64_t prefix = 0;
  if (threadIdx.x == 0) {
    sh.above_count = 0;
    sh.above_mass = 0;
  }
  __syncthreads();
  int shift = 56;
  for (int pass = 0;; ++pass) {  // ends by pass 6: its bucket holds at most 256 candidates
    shift = 56 - 8 * pass;
    const Hist* t = &sh.total0;
    if (pass > 0) {
      const int buf = int(phase++ & 1u);
      build_histogram(s, st, shift, prefix, false, sh.local[buf]);
      reduce_hist<C>(sh, buf, sh.total);
      t = &sh.total;
    }
    choose_bucket(*t, stop, target, sh);
    const int chosen = sh.chosen_bucket;
    if (chosen < 0) return Descent{0, 0, 0, false};  // uniform across the cluster
    prefix |= uint64_t(chosen) << shift;
    if (t->count[chosen] <= unsigned(kListCap)) break;
  }
  // The first CTA's list is empty: it emptied it before the barrier that ended the last descent
  // (or the kernel's first barrier).
  Shared& root = *Cluster<C>::peer(&sh, 0);
  gather_list(s, st, shift, prefix, root);
  Cluster<C>::sync();
  if (Cluster<C>::rank() == 0) finish_list(sh, stop, target);
  Cluster<C>::sync();
  return root.result;
}

__device__ __forceinline__ bool better(float v, int i, float best, int best_id) {
  return v > best || (v == best && i < best_id);
}

// The row's largest logit, the lowest id among equals (NaN never wins; all NaN: id 0). The
// choice does not depend on the order candidates are visited in, so a thread reads 16-byte
// vectors four at a time (16 logits in flight) and the tail one by one; each CTA takes its slice,
// then every CTA combines the cluster's answers.
template <int C>
__device__ int argmax_lowest_id(const Slice& s, Shared& sh) {
  float best = -INFINITY;
  int best_id = INT_MAX;
  auto consider = [&](float v, int i) {
    if (better(v, i, best, best_id)) {
      best = v;
      best_id = i;
    }
  };
  int tail = s.begin;
  const float* base = s.logits + s.begin;
  if ((reinterpret_cast<uintptr_t>(base) & 15) == 0) {
    const int n4 = (s.end - s.begin) / 4;
    const int stride = int(blockDim.x);
    const float4* v4 = reinterpret_cast<const float4*>(base);
    int i = int(threadIdx.x);
    for (; i + 3 * stride < n4; i += 4 * stride) {
      float4 a[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) a[u] = v4[i + u * stride];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int id = s.begin + 4 * (i + u * stride);
        consider(a[u].x, id);
        consider(a[u].y, id + 1);
        consider(a[u].z, id + 2);
        consider(a[u].w, id + 3);
      }
    }
    for (; i < n4; i += stride) {
      const float4 a = v4[i];
      const int id = s.begin + 4 * i;
      consider(a.x, id);
      consider(a.y, id + 1);
      consider(a.z, id + 2);
      consider(a.w, id + 3);
    }
    tail = s.begin + 4 * n4;
  }
  for (int i = tail + int(threadIdx.x); i < s.end; i += blockDim.x) consider(s.logits[i], i);
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (better(ov, oi, best, best_id)) {
      best = ov;
      best_id = oi;
    }
  }
  __shared__ float warp_best[32];
  __shared__ int warp_id[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_id[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (better(warp_best[w], warp_id[w], best, best_id)) {
        best = warp_best[w];
        best_id = warp_id[w];
      }
    sh.x_best = best;
    sh.x_best_id = best_id;
  }
  Cluster<C>::sync();
  best = -INFINITY;
  best_id = INT_MAX;
  for (unsigned r = 0; r < unsigned(C); ++r) {
    const float v = *Cluster<C>::peer(&sh.x_best, r);
    const int i = *Cluster<C>::peer(&sh.x_best_id, r);
    if (better(v, i, best, best_id)) {
      best = v;
      best_id = i;
    }
  }
  return best_id == INT_MAX ? 0 : best_id;  // all NaN: id 0
}

// cache_p: the dynamic shared memory holds a slice's p (one float per candidate).
template <int C>
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(SampleParams p, int cache_p) {
  pdl_enter();
  __shared__ Shared sh;
  extern __shared__ float slice_p[];
  const int row = int(blockIdx.x) / C;
  const unsigned rank = Cluster<C>::rank();
  const SampleRowParams s = p.settings[row];
  const int vocab = p.vocab;
  const int per = ((vocab + C - 1) / C + 3) & ~3;  // a multiple of 4: slices start 16-byte aligned
  Slice slice{p.logits + int64_t(row) * p.row_stride, min(vocab, int(rank) * per), min(vocab, int(rank + 1) * per),
              cache_p ? slice_p : nullptr, false};
  if (threadIdx.x == 0) {  // before the first cluster barrier
    sh.list_len = 0;
    sh.x_count = 0;
  }
  int out = -1;
  // The row's distribution, where asked for: a point mass on `out` unless the rule has one.
  float* const dist = s.dist_row >= 0 && p.dist != nullptr ? p.dist + int64_t(s.dist_row) * p.dist_stride : nullptr;
  bool point_mass = true;

  if (!(s.temperature > 0.0f)) {
    out = argmax_lowest_id<C>(slice, sh);
  } else {
    RowStats st{s.temperature, 0.0f, 1.0};
    float local_max = -INFINITY;
    for_logits(slice, [&](float v) { local_max = fmaxf(local_max, __fdiv_rn(v, st.temperature)); });
    local_max = block_max(local_max, sh.scratch);
    if (threadIdx.x == 0) sh.x_max = local_max;
    Cluster<C>::sync();
    st.z_max = -INFINITY;
    for (unsigned r = 0; r < unsigned(C); ++r) st.z_max = fmaxf(st.z_max, *Cluster<C>::peer(&sh.x_max, r));
    if (!isfinite(st.z_max)) {
      // No distribution (all -inf, or a +inf): the greedy rule, as on the CPU backend.
      out = argmax_lowest_id<C>(slice, sh);
    } else {
      double local_sum = 0.0;
      for_logits(slice, [&](float v) { local_sum += double(expf(__fsub_rn(__fdiv_rn(v, st.temperature), st.z_max))); });
      local_sum = block_sum_f64(local_sum, sh.scratch_f64);
      if (threadIdx.x == 0) sh.x_sum = local_sum;
      Cluster<C>::sync();
      st.z_sum = 0.0;
      for (unsigned r = 0; r < unsigned(C); ++r) st.z_sum += *Cluster<C>::peer(&sh.x_sum, r);

      unsigned phase = 0;
      build_histogram(slice, st, 56, 0, true, sh.local[0]);  // keeps p where the slice fits
      ++phase;
      slice.cached = slice.p != nullptr;
      reduce_hist<C>(sh, 0, sh.total0);
      if (threadIdx.x < 32) {
        uint64_t m = 0;
        for (int b = int(threadIdx.x); b < kBuckets; b += 32) m += sh.total0.mass[b];
        for (int o = 16; o > 0; o >>= 1) m += __shfl_xor_sync(0xffffffffu, m, o);
        if (threadIdx.x == 0) sh.total0_mass = m;
      }
      __syncthreads();

      // The kept prefix: its size, and its last candidate and mass where known without a descent.
      uint64_t kept = uint64_t(vocab);
      Descent last{0, uint64_t(vocab), sh.total0_mass, true};  // every candidate kept
      if (s.top_k > 0 && uint64_t(s.top_k) < kept) {
        kept = uint64_t(s.top_k);
        last.found = false;
      }
      if (s.top_p < 1.0f) {
        const Descent d = descend<C>(slice, st, Stop::kMassAtLeast, fixed_mass(s.top_p), sh, phase);
        if (d.found && d.count < kept) {
          kept = d.count;
          last = d;  // the top-p boundary is the last kept candidate
        }
      }
      if (s.min_p > 0.0f) {
        // p_max is the arg-max candidate's p: exp(0) / z_sum.
        const float threshold = s.min_p * __double2float_rn(__ddiv_rn(1.0, st.z_sum));
        unsigned local = 0;
        for_candidates(slice, st, false, [&](int i, float pi) {
          local += unsigned(__popc(__ballot_sync(0xffffffffu, i >= 0 && pi >= threshold)));
        });
        if ((threadIdx.x & 31) == 0) atomicAdd(&sh.x_count, local);  // zeroed in the prologue
        Cluster<C>::sync();
        uint64_t n_min = 0;
        for (unsigned r = 0; r < unsigned(C); ++r) n_min += *Cluster<C>::peer(&sh.x_count, r);
        if (n_min < kept) {
          kept = n_min;
          last.found = false;
        }
      }
      if (kept < 1) {
        kept = 1;
        last.found = false;
      }
      if (!last.found) last = descend<C>(slice, st, Stop::kCountAtLeast, kept, sh, phase);
      if (dist != nullptr) {
        // Kept: the candidates whose keys are at least the last kept one's (every candidate where
        // all are kept: last.key 0), each p over the kept mass.
        const double kept_mass = double(last.mass) * 0x1p-62;
        for_candidates(slice, st, false, [&](int i, float pi) {
          if (i >= 0) dist[i] = candidate_key(pi, i) >= last.key ? float(double(pi) / kept_mass) : 0.0f;
        });
        point_mass = false;
      }
      const uint64_t u24 = uint64_t(sample_uniform(s.seed, s.counter) * 16777216.0f);
      const uint64_t target = __umul64hi(last.mass, u24 << 40);  // floor(kept_mass * u)
      const Descent pick = descend<C>(slice, st, Stop::kMassAbove, target, sh, phase);
      // (target < the kept mass, so the walk always stops; last.key is 0 only when every candidate
      // is kept, where it stops inside the kept set.)
      out = key_id((pick.found && pick.count <= kept) ? pick.key : last.key);
    }
  }
  if (rank == 0 && threadIdx.x == 0) p.out[row] = out;
  if (dist != nullptr && point_mass)
    for (int i = slice.begin + int(threadIdx.x); i < slice.end; i += blockDim.x) dist[i] = i == out ? 1.0f : 0.0f;
  Cluster<C>::sync();  // no CTA leaves while a peer may still read its shared memory
}

// One block per masked row; each thread clears the tokens of whole 32-bit mask words.
__global__ void mask_logits_kernel(MaskLogitsParams p) {
  pdl_enter();
  const int i = blockIdx.x;
  float* row = p.logits + int64_t(p.rows[i]) * p.row_stride;
  const uint32_t* bits = p.masks + int64_t(i) * p.words;
  for (int w = threadIdx.x; w < p.words; w += blockDim.x) {
    const uint32_t word = bits[w];
    if (word == 0xffffffffu) continue;
    const int t0 = w * 32;
    for (int b = 0; b < 32 && t0 + b < p.vocab; ++b)
      if (!((word >> b) & 1u)) row[t0 + b] = -INFINITY;
  }
}

// Logits in the order of the logprobs' top list (value descending, lower id on ties) as one
// unsigned key: the value's bits made monotone, then the complement of the id. v is neither NaN
// nor -inf; -0 counts as +0 (equal values). No key is 0.
__device__ __forceinline__ uint64_t logit_key(float v, int id) {
  uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << 32) | uint64_t(0xffffffffu - uint32_t(id));
}

__device__ unsigned long long block_max_u64(unsigned long long v, unsigned long long* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  unsigned long long t = lane < int(blockDim.x >> 5) ? scratch[lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) t = max(t, __shfl_xor_sync(0xffffffffu, t, o));
  __syncthreads();
  return t;
}

constexpr int kLogprobThreads = 512;

// One block per selected row: the log-normalizer as the CPU backend computes it (f32 differences,
// exp and sum in double, the log rounded to f32 before the f32 add), then the top n by n passes
// over the row (from L2 after the first), each taking the largest key below the previous one.
__global__ void __launch_bounds__(kLogprobThreads) logprobs_kernel(LogprobsParams p) {
  pdl_enter();
  __shared__ float scratch[32];
  __shared__ double scratch_f64[32];
  __shared__ unsigned long long scratch_u64[32];
  const int i = blockIdx.x;
  const int ri = p.rows[i];
  const float* row = p.logits + int64_t(ri) * p.row_stride;
  float local_max = -INFINITY;
  for (int t = threadIdx.x; t < p.vocab; t += blockDim.x) local_max = fmaxf(local_max, row[t]);
  const float mx = block_max(local_max, scratch);
  double local_sum = 0.0;
  for (int t = threadIdx.x; t < p.vocab; t += blockDim.x) local_sum += exp(double(__fsub_rn(row[t], mx)));
  const double sum = block_sum_f64(local_sum, scratch_f64);
  const float lse = __fadd_rn(mx, __double2float_rn(log(sum)));
  if (threadIdx.x == 0) {
    const int token = p.tokens[ri];
    p.stats[2 * i] = token >= 0 && token < p.vocab ? __fsub_rn(row[token], lse) : __int_as_float(0x7fffffff);
    p.stats[2 * i + 1] = lse;
  }
  unsigned long long below = ~0ull;
  for (int j = 0; j < p.n; ++j) {
    unsigned long long best = 0;
    if (below != 0) {
      for (int t = threadIdx.x; t < p.vocab; t += blockDim.x) {
        const float v = row[t];
        if (!(v > -INFINITY)) continue;  // masked (or NaN): never listed
        const unsigned long long k = logit_key(v, t);
        if (k < below && k > best) best = k;
      }
      best = block_max_u64(best, scratch_u64);
    }
    if (threadIdx.x == 0) {
      const int id = best == 0 ? -1 : int(0xffffffffu - uint32_t(best & 0xffffffffu));
      p.top_ids[int64_t(i) * p.n + j] = id;
      p.top_lp[int64_t(i) * p.n + j] = id < 0 ? -INFINITY : __fsub_rn(row[id], lse);
    }
    below = best;  // 0 once the row ran out: the rest stay empty
  }
}

}  // namespace

void launch_logprobs(const LogprobsParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  FG_CHECK(p.vocab > 0, "logprobs: empty vocabulary");
  launch_kernel(logprobs_kernel, unsigned(p.num_rows), kLogprobThreads, 0, stream, p);
}

void launch_mask_logits(const MaskLogitsParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  launch_kernel(mask_logits_kernel, unsigned(p.num_rows), kThreads, 0, stream, p);
}

namespace {

// The SMs where the build has sm_90a code and runs on sm_90, else 0: clusters need both (the sm_80
// code has none).
int cluster_sms() {
  static const int sms = wgmma_sms();
  return sms;
}

// The dynamic shared memory sample_kernel<C> gets at this vocabulary: a slice's p where it fits
// (the kernel is allowed it on first use), else none.
template <int C>
size_t sample_smem(int vocab) {
  static const int optin = [] {
    int dev = 0, bytes = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return bytes;
  }();
  static size_t allowed = 0;  // the dynamic shared memory the kernel was allowed so far
  const int per = ((vocab + C - 1) / C + 3) & ~3;
  size_t bytes = size_t(per) * sizeof(float);
  if (bytes + sizeof(Shared) > size_t(optin)) bytes = 0;
  if (bytes > allowed) {
    CUDA_CHECK(cudaFuncSetAttribute(sample_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    allowed = bytes;
  }
  return bytes;
}

// Whether a cluster of kCluster CTAs with `bytes` of dynamic shared memory each can be resident at
// all (a partition of the GPU may have fewer SMs to a cluster than that); asked once per size.
bool clusters_fit(size_t bytes) {
  static size_t asked = ~size_t(0);
  static bool fit = false;
  if (bytes != asked) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kCluster);
    config.blockDim = dim3(kSampleThreads);
    config.dynamicSmemBytes = bytes;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = 0;
    fit = cudaOccupancyMaxActiveClusters(&clusters, sample_kernel<kCluster>, &config) == cudaSuccess && clusters > 0;
    if (!fit) (void)cudaGetLastError();
    asked = bytes;
  }
  return fit;
}

template <int C>
void launch_sample_kernel(const SampleParams& p, size_t smem, cudaStream_t stream) {
  launch_kernel_clustered(sample_kernel<C>, unsigned(p.rows) * C, kSampleThreads, smem, stream, unsigned(C), p,
                          int(smem > 0));
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  FG_CHECK(p.vocab > 0, "sample: empty vocabulary");
  // A sampled row is a cluster's wherever clusters can run (its sums' order must not depend on the
  // batch); rows of arg-maxes alone, whose answer does not depend on how the row is split, take a
  // CTA each once the clusters would not fit on the GPU in one round.
  const int sms = cluster_sms();
  if (sms > 0 && !(p.all_greedy && int64_t(p.rows) * kCluster > sms)) {
    const size_t smem = sample_smem<kCluster>(p.vocab);
    if (clusters_fit(smem)) {
      launch_sample_kernel<kCluster>(p, smem, stream);
      return;
    }
  }
  launch_sample_kernel<1>(p, sample_smem<1>(p.vocab), stream);
}

}  // namespace fg::cuda
