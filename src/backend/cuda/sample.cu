// Token sampling on the device, exactly the rule of backend/sampling_rule.h, one block per logits
// row, without sorting the vocabulary.
//
// Every candidate gets a 64-bit key (its probability's f32 bits, then the bitwise complement of
// its id) whose descending order is the rule's order (p descending, lower id first); keys are
// unique. "Keep a prefix of that order" and "walk the kept prefix until the cumulative p exceeds
// a target" then become radix descents over the key bits, 8 bits per pass: each pass builds a
// 256-bucket histogram (count and probability mass) of the candidates that share the key bits
// fixed so far, and picks the bucket where the condition first holds. Eight passes isolate one
// candidate. Three descents at most (top-p boundary, kept mass, the sampled token) plus a few
// reductions, and no full sort, whatever top_k is. A pass over the vocabulary recomputes each
// candidate's p (a division in double among others): once a descent's prefix leaves at most
// kListCap candidates, one more pass gathers their keys into shared memory and its remaining
// passes read only those (the histograms, integer sums, come out the same).
// Greedy rows take the arg-max alone.
//
// Probability mass is accumulated in 2^-62 fixed point with integer atomics, so sums do not
// depend on the order threads add them in: the same inputs give the same token on every run.
// p is computed as on the CPU backend (f32 terms, double sum); only the order of that sum and
// fixed-point vs double cumulative sums differ, so only near-ties can pick a different token.
#include <climits>

#include "backend/cuda/kernel_util.cuh"
#include "backend/sampling_rule.h"

namespace fg::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kBuckets = 256;
constexpr float kMassScale = 0x1p62f;

struct RowStats {
  float temperature;
  float z_max;   // max of logits / temperature
  double z_sum;  // sum of exp(logit / temperature - z_max), each term f32, summed in double
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

// Candidates a descent may gather into shared memory (their keys) once its prefix narrows the
// row to at most this many: the rest of its passes then read the list instead of recomputing every
// candidate's p over the whole vocabulary.
constexpr int kListCap = 4096;

struct Shared {
  unsigned long long list[kListCap];
  unsigned int list_len;
  unsigned int count[kBuckets];
  unsigned long long mass[kBuckets];
  unsigned int count0[kBuckets];  // the first pass's histogram, the same for every descent
  unsigned long long mass0[kBuckets];
  float scratch[32];
  double scratch_f64[32];
  int chosen_bucket;
  unsigned long long above_count;
  unsigned long long above_mass;
};

// Histogram of the 8 key bits at `shift` over the candidates whose higher bits equal `prefix`'s.
__device__ void build_histogram(const float* logits, int vocab, const RowStats& st, int shift, uint64_t prefix,
                                bool all, unsigned int* count, unsigned long long* mass) {
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
    count[b] = 0;
    mass[b] = 0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    float p = candidate_p(logits[i], st);
    uint64_t key = candidate_key(p, i);
    if (!all && (key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
    int b = int((key >> shift) & 0xff);
    atomicAdd(&count[b], 1u);
    atomicAdd(&mass[b], (unsigned long long)fixed_mass(p));
  }
  __syncthreads();
}

// build_histogram over the gathered keys (the candidates whose higher bits equal `prefix`'s are
// all in the list): the same counts and fixed-point masses, since p is the key's high word.
__device__ void build_list_histogram(const Shared& sh, int shift, uint64_t prefix, unsigned int* count,
                                     unsigned long long* mass) {
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
    count[b] = 0;
    mass[b] = 0;
  }
  __syncthreads();
  const unsigned int n = sh.list_len;
  for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t key = sh.list[i];
    if ((key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
    const int b = int((key >> shift) & 0xff);
    atomicAdd(&count[b], 1u);
    atomicAdd(&mass[b], (unsigned long long)fixed_mass(__uint_as_float(uint32_t(key >> 32))));
  }
  __syncthreads();
}

// The keys of every candidate whose bits from `shift` up equal `prefix`'s, in any order (the
// histograms built from them do not depend on it). The caller knows there are at most kListCap.
__device__ void gather_list(const float* logits, int vocab, const RowStats& st, int shift, uint64_t prefix,
                            Shared& sh) {
  if (threadIdx.x == 0) sh.list_len = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const uint64_t key = candidate_key(candidate_p(logits[i], st), i);
    if ((key >> shift) != (prefix >> shift)) continue;
    const unsigned int slot = atomicAdd(&sh.list_len, 1u);
    if (slot < unsigned(kListCap)) sh.list[slot] = key;  // always: the histogram counted them
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

// The first candidate in the rule's order at which `stop` holds for the prefix through it.
__device__ Descent descend(const float* logits, int vocab, const RowStats& st, Stop stop, uint64_t target, Shared& sh) {
  uint64_t prefix = 0;
  if (threadIdx.x == 0) {
    sh.above_count = 0;
    sh.above_mass = 0;
  }
  bool listed = false;  // the candidates under the prefix are in sh.list
  for (int pass = 0; pass < 8; ++pass) {
    int shift = 56 - 8 * pass;
    const unsigned int* count = sh.count0;
    const unsigned long long* mass = sh.mass0;
    if (pass > 0) {
      if (listed)
        build_list_histogram(sh, shift, prefix, sh.count, sh.mass);
      else
        build_histogram(logits, vocab, st, shift, prefix, false, sh.count, sh.mass);
      count = sh.count;
      mass = sh.mass;
    }
    if (threadIdx.x == 0) {
      uint64_t c = sh.above_count;
      uint64_t m = sh.above_mass;
      int chosen = -1;
      for (int b = kBuckets - 1; b >= 0; --b) {
        if (count[b] == 0) continue;
        if (stop_holds(stop, target, c + count[b], m + mass[b])) {
          chosen = b;
          break;
        }
        c += count[b];
        m += mass[b];
      }
      sh.chosen_bucket = chosen;
      if (chosen >= 0) {
        sh.above_count = c;
        sh.above_mass = m;
      }
    }
    __syncthreads();
    int chosen = sh.chosen_bucket;
    if (chosen < 0) return Descent{0, 0, 0, false};  // uniform across the block
    prefix |= uint64_t(chosen) << shift;
    const bool gather = !listed && pass < 7 && count[chosen] <= unsigned(kListCap);
    __syncthreads();  // everyone has read the histogram before the next pass rebuilds it
    if (gather) {
      gather_list(logits, vocab, st, shift, prefix, sh);
      listed = true;
    }
  }
  // The last pass isolated one candidate (keys are unique): add it to the prefix before it.
  Descent d{prefix, sh.above_count + 1, sh.above_mass + fixed_mass(__uint_as_float(uint32_t(prefix >> 32))), true};
  __syncthreads();
  return d;
}

// The row's largest logit, the lowest id among equals (NaN never wins; all NaN: id 0). The
// choice does not depend on the order candidates are visited in, so a thread reads 16-byte
// vectors four at a time (16 logits in flight, where one scalar load per step left a row of
// 128k logits waiting on ~125 memory latencies in a row) and the tail one by one.
__device__ int argmax_lowest_id(const float* logits, int vocab, Shared& sh) {
  float best = -INFINITY;
  int best_id = INT_MAX;
  auto consider = [&](float v, int i) {
    if (v > best || (v == best && i < best_id)) {
      best = v;
      best_id = i;
    }
  };
  int tail = 0;
  if ((reinterpret_cast<uintptr_t>(logits) & 15) == 0) {
    const int n4 = vocab / 4;
    const int stride = int(blockDim.x);
    const float4* v4 = reinterpret_cast<const float4*>(logits);
    int i = int(threadIdx.x);
    for (; i + 3 * stride < n4; i += 4 * stride) {
      float4 a[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) a[u] = v4[i + u * stride];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int id = 4 * (i + u * stride);
        consider(a[u].x, id);
        consider(a[u].y, id + 1);
        consider(a[u].z, id + 2);
        consider(a[u].w, id + 3);
      }
    }
    for (; i < n4; i += stride) {
      const float4 a = v4[i];
      consider(a.x, 4 * i);
      consider(a.y, 4 * i + 1);
      consider(a.z, 4 * i + 2);
      consider(a.w, 4 * i + 3);
    }
    tail = 4 * n4;
  }
  for (int i = tail + int(threadIdx.x); i < vocab; i += blockDim.x) consider(logits[i], i);
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ov > best || (ov == best && oi < best_id)) {
      best = ov;
      best_id = oi;
    }
  }
  __shared__ float warp_best[32];
  __shared__ int warp_id[32];
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_id[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w) {
      if (warp_best[w] > best || (warp_best[w] == best && warp_id[w] < best_id)) {
        best = warp_best[w];
        best_id = warp_id[w];
      }
    }
    sh.chosen_bucket = best_id == INT_MAX ? 0 : best_id;  // all NaN: id 0
  }
  __syncthreads();
  return sh.chosen_bucket;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p) {
  pdl_enter();
  __shared__ Shared sh;
  const int row = blockIdx.x;
  const SampleRowParams s = p.settings[row];
  const float* logits = p.logits + int64_t(row) * p.row_stride;
  const int vocab = p.vocab;

  if (!(s.temperature > 0.0f)) {
    int id = argmax_lowest_id(logits, vocab, sh);
    if (threadIdx.x == 0) p.out[row] = id;
    return;
  }

  RowStats st{s.temperature, 0.0f, 1.0};
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    local_max = fmaxf(local_max, __fdiv_rn(logits[i], st.temperature));
  st.z_max = block_max(local_max, sh.scratch);
  if (!isfinite(st.z_max)) {
    // No distribution (all -inf, or a +inf): the greedy rule, as on the CPU backend.
    int id = argmax_lowest_id(logits, vocab, sh);
    if (threadIdx.x == 0) p.out[row] = id;
    return;
  }
  double local_sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    local_sum += double(expf(__fsub_rn(__fdiv_rn(logits[i], st.temperature), st.z_max)));
  st.z_sum = block_sum_f64(local_sum, sh.scratch_f64);

  build_histogram(logits, vocab, st, 56, 0, true, sh.count0, sh.mass0);

  uint64_t kept = uint64_t(vocab);
  if (s.top_k > 0 && uint64_t(s.top_k) < kept) kept = uint64_t(s.top_k);
  if (s.top_p < 1.0f) {
    Descent d = descend(logits, vocab, st, Stop::kMassAtLeast, fixed_mass(s.top_p), sh);
    if (d.found && d.count < kept) kept = d.count;
  }
  if (s.min_p > 0.0f) {
    // p_max is the arg-max candidate's p: exp(0) / z_sum.
    float threshold = s.min_p * __double2float_rn(__ddiv_rn(1.0, st.z_sum));
    float local = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
      local += candidate_p(logits[i], st) >= threshold ? 1.0f : 0.0f;
    uint64_t n_min = uint64_t(block_sum(local, sh.scratch));
    if (n_min < kept) kept = n_min;
  }
  if (kept < 1) kept = 1;

  Descent last = descend(logits, vocab, st, Stop::kCountAtLeast, kept, sh);
  uint64_t u24 = uint64_t(sample_uniform(s.seed, s.counter) * 16777216.0f);
  uint64_t target = __umul64hi(last.mass, u24 << 40);  // floor(kept_mass * u)
  Descent pick = descend(logits, vocab, st, Stop::kMassAbove, target, sh);
  uint64_t key = (pick.found && pick.count <= kept) ? pick.key : last.key;
  if (threadIdx.x == 0) p.out[row] = key_id(key);
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

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  FG_CHECK(p.vocab > 0, "sample: empty vocabulary");
  launch_kernel(sample_kernel, unsigned(p.rows), kThreads, 0, stream, p);
}

}  // namespace fg::cuda
