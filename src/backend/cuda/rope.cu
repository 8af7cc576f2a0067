// Rotary position embedding, in place on q and k (one launch for both). One thread per rotated
// pair: (token, head, i) with i < rotary_dim / 2. Angles in f32, their cos/sin in double
// (positions reach tens of thousands of radians); channels past rotary_dim are left untouched.
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void rope_kernel(RopeParams p) {
  int half = p.rotary_dim / 2;
  int heads = p.num_q_heads + p.num_kv_heads;
  int64_t total = int64_t(p.n) * heads * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int i = int(e % half);
    int64_t th = e / half;
    int head = int(th % heads);
    int64_t token = th / heads;
    T* x = head < p.num_q_heads
               ? static_cast<T*>(p.q) + token * p.q_stride_token + int64_t(head) * p.q_stride_head
               : static_cast<T*>(p.k) + token * p.k_stride_token + int64_t(head - p.num_q_heads) * p.k_stride_head;
    float inv_freq;
    if (p.per_token_base != nullptr) {
      inv_freq = 1.0f / powf(p.per_token_base[token], float(2 * i) / float(p.rotary_dim));
    } else {
      inv_freq = p.inv_freq[i];
    }
    float angle = float(p.positions[token]) * inv_freq;
    // cos/sin of the f32 angle rounded once to f32 (computed in double), as the CPU backend does.
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    float c = float(cd) * p.attention_scaling;
    float s = float(sd) * p.attention_scaling;
    int i0 = p.neox ? i : 2 * i;
    int i1 = p.neox ? i + half : 2 * i + 1;
    float x0 = to_f32(x[i0]);
    float x1 = to_f32(x[i1]);
    x[i0] = from_f32<T>(x0 * c - x1 * s);
    x[i1] = from_f32<T>(x1 * c + x0 * s);
  }
}

}  // namespace

void launch_rope(const RopeParams& p, DType act, cudaStream_t stream) {
  int64_t total = int64_t(p.n) * (p.num_q_heads + p.num_kv_heads) * (p.rotary_dim / 2);
  if (total == 0) return;
  dispatch_act(act, [&]<class T>() {
    rope_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace fg::cuda
