// Rotary position embedding, in place on q and k (one launch for both). One thread per rotated
// pair: (token, head, i) with i < rotary_dim / 2. Angles in f32, their cos/sin in double
// (positions reach tens of thousands of radians); channels past rotary_dim are left untouched.
// With p.kv.slots the same launch writes the new K/V rows into the paged cache (kv_write): the kv
// heads' threads then cover all head_dim / 2 channel pairs, rotated or not.
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void rope_kernel(RopeParams p) {
  int half = p.rotary_dim / 2;
  const bool write_cache = p.kv.slots != nullptr;
  int pairs = write_cache ? p.head_dim / 2 : half;
  int heads = p.num_q_heads + p.num_kv_heads;
  int64_t total = int64_t(p.n) * heads * pairs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int i = int(e % pairs);
    int64_t th = e / pairs;
    int head = int(th % heads);
    int64_t token = th / heads;
    const bool is_q = head < p.num_q_heads;
    const int kvh = head - p.num_q_heads;
    T* x = is_q ? static_cast<T*>(p.q) + token * p.q_stride_token + int64_t(head) * p.q_stride_head
                : static_cast<T*>(p.k) + token * p.k_stride_token + int64_t(kvh) * p.k_stride_head;
    int i0, i1;
    if (i >= half) {  // a channel pair past rotary_dim: only copied to the cache
      if (is_q) continue;
      i0 = p.rotary_dim + 2 * (i - half);
      i1 = i0 + 1;
    } else {
      float inv_freq;
      if (p.per_token_base != nullptr) {
        inv_freq = 1.0f / powf(p.per_token_base[token], float(2 * i) / float(p.rotary_dim));
      } else {
        const int table = p.per_token_table != nullptr ? p.per_token_table[token] : 0;
        inv_freq = p.inv_freq[table * half + i];
      }
      float angle = float(p.positions[token]) * inv_freq;
      // cos/sin of the f32 angle rounded once to f32 (computed in double), as the CPU backend does.
      double sd, cd;
      sincos(double(angle), &sd, &cd);
      float c = float(cd) * p.attention_scaling;
      float s = float(sd) * p.attention_scaling;
      i0 = p.neox ? i : 2 * i;
      i1 = p.neox ? i + half : 2 * i + 1;
      float x0 = to_f32(x[i0]);
      float x1 = to_f32(x[i1]);
      x[i0] = from_f32<T>(x0 * c - x1 * s);
      x[i1] = from_f32<T>(x1 * c + x0 * s);
    }
    if (write_cache && !is_q) {
      const int32_t slot = p.kv.slots[token];
      if (slot < 0) continue;
      const int64_t page = slot / p.kv.page_size;
      const int64_t offset = slot - page * p.kv.page_size;
      const int64_t ce = page * p.kv.cache_stride_page + offset * p.kv.cache_stride_slot + kvh * p.kv.cache_stride_head;
      const T* v = static_cast<const T*>(p.kv.v) + token * p.kv.v_stride_token + int64_t(kvh) * p.kv.v_stride_head;
      T* kc = static_cast<T*>(p.kv.k_cache) + ce;
      T* vc = static_cast<T*>(p.kv.v_cache) + ce;
      kc[i0] = x[i0];
      kc[i1] = x[i1];
      vc[i0] = v[i0];
      vc[i1] = v[i1];
    }
  }
}

}  // namespace

void launch_rope(const RopeParams& p, DType act, cudaStream_t stream) {
  const int pairs = p.kv.slots != nullptr ? p.head_dim / 2 : p.rotary_dim / 2;
  int64_t total = int64_t(p.n) * (p.num_q_heads + p.num_kv_heads) * pairs;
  if (total == 0) return;
  dispatch_act(act, [&]<class T>() {
    rope_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace fg::cuda
