// Rotary position embedding, in place on q and k (one launch for both). Blocks of a token: each
// computes the token's cos/sin per rotated pair i < rotary_dim / 2 (angles in f32, their cos/sin in
// double: positions reach tens of thousands of radians), then each thread rotates one (head, pair)
// of the token; channels past rotary_dim are left untouched.
// With p.kv.slots the same launch writes the new K/V rows into the paged cache (kv_write): the kv
// heads' threads then cover all head_dim / 2 channel pairs, rotated or not.
#include <algorithm>

#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kThreads = 128;

// Grid: x = blocks per token (each thread one (head, pair): a decode step's token spreads over
// ~20 blocks instead of one block looping over its heads, whose dependent loads and stores made a
// step's RoPE latency-bound), y = tokens (grid-stride). Every block of a token computes the
// token's cos/sin table into shared memory (the angle depends on the token and the pair, not the
// head).
template <class T>
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeParams p) {
  pdl_enter();
  extern __shared__ float cs[];  // [half] cos, then [half] sin
  const int half = p.rotary_dim / 2;
  float* cos_t = cs;
  float* sin_t = cs + half;
  const bool write_cache = p.kv.slots != nullptr;
  const int pairs = write_cache ? p.head_dim / 2 : half;
  const int heads = p.num_q_heads + p.num_kv_heads;
  const int e = int(blockIdx.x) * kThreads + int(threadIdx.x);  // this thread's (head, pair)
  for (int64_t token = blockIdx.y; token < p.n; token += gridDim.y) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      float inv_freq;
      if (p.per_token_base != nullptr) {
        inv_freq = 1.0f / powf(p.per_token_base[token], float(2 * i) / float(p.rotary_dim));
      } else {
        const int table = p.per_token_table != nullptr ? p.per_token_table[token] : 0;
        inv_freq = p.inv_freq[table * half + i];
      }
      const float angle = float(p.positions[token]) * inv_freq;
      // cos/sin of the f32 angle rounded once to f32 (computed in double), as the CPU backend does.
      double sd, cd;
      sincos(double(angle), &sd, &cd);
      cos_t[i] = float(cd) * p.attention_scaling;
      sin_t[i] = float(sd) * p.attention_scaling;
    }
    __syncthreads();
    if (e < heads * pairs) {
      const int head = e / pairs;
      const int i = e - head * pairs;
      const bool is_q = head < p.num_q_heads;
      const int kvh = head - p.num_q_heads;
      T* x = is_q ? static_cast<T*>(p.q) + token * p.q_stride_token + int64_t(head) * p.q_stride_head
                  : static_cast<T*>(p.k) + token * p.k_stride_token + int64_t(kvh) * p.k_stride_head;
      const int32_t slot = write_cache && !is_q ? p.kv.slots[token] : -1;
      int i0 = 0, i1 = 0;
      bool act = true;
      if (i >= half) {  // a channel pair past rotary_dim: only copied to the cache
        act = !is_q;
        i0 = p.rotary_dim + 2 * (i - half);
        i1 = i0 + 1;
      } else {
        const float c = cos_t[i], s = sin_t[i];
        i0 = p.neox ? i : 2 * i;
        i1 = p.neox ? i + half : 2 * i + 1;
        const float x0 = to_f32(x[i0]);
        const float x1 = to_f32(x[i1]);
        x[i0] = from_f32<T>(x0 * c - x1 * s);
        x[i1] = from_f32<T>(x1 * c + x0 * s);
      }
      if (act && slot >= 0) {
        const int64_t page = slot / p.kv.page_size;
        const int64_t offset = slot - page * p.kv.page_size;
        const int64_t ce =
            page * p.kv.cache_stride_page + offset * p.kv.cache_stride_slot + kvh * p.kv.cache_stride_head;
        const T* v = static_cast<const T*>(p.kv.v) + token * p.kv.v_stride_token + int64_t(kvh) * p.kv.v_stride_head;
        if (p.kv.k_scale != nullptr) {  // fp8 cache: the rotated, act-rounded k quantized as kv_write does
          const float ks = p.kv.k_scale[kvh], vs = p.kv.v_scale[kvh];
          uint8_t* kc = static_cast<uint8_t*>(p.kv.k_cache) + ce;
          uint8_t* vc = static_cast<uint8_t*>(p.kv.v_cache) + ce;
          kc[i0] = to_e4m3(to_f32(x[i0]), ks);
          kc[i1] = to_e4m3(to_f32(x[i1]), ks);
          vc[i0] = to_e4m3(to_f32(v[i0]), vs);
          vc[i1] = to_e4m3(to_f32(v[i1]), vs);
        } else {
          T* kc = static_cast<T*>(p.kv.k_cache) + ce;
          T* vc = static_cast<T*>(p.kv.v_cache) + ce;
          kc[i0] = x[i0];
          kc[i1] = x[i1];
          vc[i0] = v[i0];
          vc[i1] = v[i1];
        }
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
  dispatch_act(act, [&]<class T>() { launch_kernel(rope_kernel<T>, grid, kThreads, smem, stream, p); });
}

}  // namespace fg::cuda
