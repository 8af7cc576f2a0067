// Rotary position embedding, in place on q and k (one launch for both). Blocks of a token: each
// computes the token's cos/sin per rotated pair i < rotary_dim / 2 (kernel_util.cuh's
// rope_cos_sin), then each thread rotates one (head, pair) of the token (rope_rotate); channels
// past rotary_dim are left untouched.
// With p.kv.slots the same launch writes the new K/V rows into the paged cache (kv_write): the kv
// heads' threads then cover all head_dim / 2 channel pairs, rotated or not. With p.q_norm too (kNorm:
// Qwen3's and Gemma 3's per-head q/k RMSNorm) each thread first normalizes its pair's two channels
// in place: a head's pairs are whole warps, whose sums of squares meet in shared memory.
#include <algorithm>

#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kThreads = 128;

// The two channels of pair i: rotated pairs (i < half) as the layout pairs them, then the
// channels past rotary_dim two by two.
__device__ __forceinline__ void pair_channels(const RopeParams& p, int i, int half, int& i0, int& i1) {
  if (i >= half) {
    i0 = p.rotary_dim + 2 * (i - half);
    i1 = i0 + 1;
  } else {
    i0 = p.neox ? i : 2 * i;
    i1 = p.neox ? i + half : 2 * i + 1;
  }
}

// In place: this thread's pair of one head of q or k (e < heads * pairs, pairs = head_dim / 2, a
// multiple of 32 dividing kThreads) times its head's 1 / rms and its weights, rounded to T as
// rms_norm rounds them. Every thread of the block calls it (a barrier inside).
template <class T>
__device__ __forceinline__ void norm_pair(const RopeParams& p, int64_t token, int e, int heads, int pairs, int half,
                                          float* warp_ss) {
  const bool in = e < heads * pairs;
  const int head = in ? e / pairs : 0, i = e - head * pairs;
  const bool is_q = head < p.num_q_heads;
  T* x = is_q ? static_cast<T*>(p.q) + token * p.q_stride_token + int64_t(head) * p.q_stride_head
              : static_cast<T*>(p.k) + token * p.k_stride_token + int64_t(head - p.num_q_heads) * p.k_stride_head;
  int i0, i1;
  pair_channels(p, i, half, i0, i1);
  const float a = in ? to_f32(x[i0]) : 0.0f, b = in ? to_f32(x[i1]) : 0.0f;
  const float ss = warp_sum(a * a + b * b);
  const int warp = int(threadIdx.x) >> 5, per_head = pairs / 32;
  if ((threadIdx.x & 31) == 0) warp_ss[warp] = ss;
  __syncthreads();
  if (!in) return;
  float total = 0.0f;
  for (int w = warp / per_head * per_head; w < (warp / per_head + 1) * per_head; ++w) total += warp_ss[w];
  const float inv_rms = rsqrtf(total / float(p.head_dim) + p.norm_eps);
  const void* weight = is_q ? p.q_norm : p.k_norm;
  auto w_at = [&](int c) {
    return p.norm_weight_f32 ? static_cast<const float*>(weight)[c] : to_f32(static_cast<const T*>(weight)[c]);
  };
  x[i0] = from_f32<T>(a * inv_rms * w_at(i0));
  x[i1] = from_f32<T>(b * inv_rms * w_at(i1));
}

// Grid: x = blocks per token (each thread one (head, pair): a decode step's token spreads over
// ~20 blocks instead of one block looping over its heads, whose dependent loads and stores made a
// step's RoPE latency-bound), y = tokens (grid-stride). Every block of a token computes the
// token's cos/sin table into shared memory (the angle depends on the token and the pair, not the
// head).
template <class T, bool kNorm>
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeParams p) {
  __shared__ float warp_ss[kThreads / 32];  // kNorm: the warps' sums of squares
  extern __shared__ float cs[];             // [half] cos, then [half] sin
  const int half = p.rotary_dim / 2;
  float* cos_t = cs;
  float* sin_t = cs + half;
  const bool write_cache = p.kv.slots != nullptr;
  const int pairs = write_cache ? p.head_dim / 2 : half;
  const int heads = p.num_q_heads + p.num_kv_heads;
  const int e = int(blockIdx.x) * kThreads + int(threadIdx.x);  // this thread's (head, pair)
  auto cos_sin_table = [&](int64_t token) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(p, token, i, cos_t[i], sin_t[i]);
  };
  // The first token's table needs only the step's positions and the model's frequencies (never
  // written by the step's kernels; launch.cuh): computed before waiting for the kernel that
  // writes q, k and v, behind that kernel's end.
  if (blockIdx.y < p.n) cos_sin_table(blockIdx.y);
  pdl_enter();
  for (int64_t token = blockIdx.y; token < p.n; token += gridDim.y) {
    if (token != blockIdx.y) cos_sin_table(token);
    if constexpr (kNorm) norm_pair<T>(p, token, e, heads, pairs, half, warp_ss);
    __syncthreads();
    if (e < heads * pairs) {
      const int head = e / pairs;
      const int i = e - head * pairs;
      const bool is_q = head < p.num_q_heads;
      const int kvh = head - p.num_q_heads;
      T* x = is_q ? static_cast<T*>(p.q) + token * p.q_stride_token + int64_t(head) * p.q_stride_head
                  : static_cast<T*>(p.k) + token * p.k_stride_token + int64_t(kvh) * p.k_stride_head;
      const int32_t slot = write_cache && !is_q ? p.kv.slots[token] : -1;
      int i0, i1;
      pair_channels(p, i, half, i0, i1);
      const bool act = i < half || !is_q;  // a q pair past rotary_dim: nothing to do (normalized above)
      if (i < half) {                      // (past rotary_dim a k pair is only copied to the cache)
        const float c = cos_t[i], s = sin_t[i];
        float y0, y1;
        rope_rotate(to_f32(x[i0]), to_f32(x[i1]), c, s, y0, y1);
        x[i0] = from_f32<T>(y0);
        x[i1] = from_f32<T>(y1);
      }
      if (act && slot >= 0) {  // the rotated, act-rounded k and the v row
        const int64_t ce = kv_cache_row(p.kv, slot, kvh);
        const T* v = static_cast<const T*>(p.kv.v) + token * p.kv.v_stride_token + int64_t(kvh) * p.kv.v_stride_head;
        kv_cache_store_pair<T>(p.kv.k_cache, ce, p.kv.k_scale, kvh, i0, i1, x[i0], x[i1]);
        kv_cache_store_pair<T>(p.kv.v_cache, ce, p.kv.v_scale, kvh, i0, i1, v[i0], v[i1]);
      }
    }
    __syncthreads();  // the next token's table overwrites this one
  }
}

}  // namespace

void launch_rope(const RopeParams& p, DType act, cudaStream_t stream) {
  const int pairs = p.kv.slots != nullptr ? p.head_dim / 2 : p.rotary_dim / 2;
  const int64_t per_token = int64_t(p.num_q_heads + p.num_kv_heads) * pairs;
  if (int64_t(p.n) * per_token == 0) return;
  const size_t smem = size_t(p.rotary_dim) * sizeof(float);  // cos and sin of rotary_dim / 2 pairs
  const dim3 grid(unsigned((per_token + kThreads - 1) / kThreads), unsigned(std::min<int64_t>(p.n, 65535)));
  const bool norm = p.q_norm != nullptr;
  FG_CHECK(!norm || (p.kv.slots != nullptr && rope_takes_qk_norm(p.head_dim) && p.num_kv_heads > 0),
           "rope: q/k norms need the KV write, k and head_dim 64, 128 or 256");
  dispatch_act(act, [&]<class T>() {
    if (norm)
      launch_kernel(rope_kernel<T, true>, grid, kThreads, smem, stream, p);
    else
      launch_kernel(rope_kernel<T, false>, grid, kThreads, smem, stream, p);
  });
}

}  // namespace fg::cuda
