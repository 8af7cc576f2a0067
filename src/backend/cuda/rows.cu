// Row-moving kernels: gather by index (embedding lookup, logits-row gather) and the paged KV write
// by slot mapping. Pure data movement in the widest access (16, 8, 4, 2 or 1 bytes) that the
// pointers and strides allow, so results are bit-exact copies; except into an fp8 KV cache, where
// each value is quantized (kv_write_fp8_kernel).
#include "backend/cuda/kernel_util.cuh"

namespace fg::cuda {

namespace {

constexpr int kThreads = 256;

template <int kBytes>
struct Chunk;
template <>
struct Chunk<16> {
  using type = uint4;
};
template <>
struct Chunk<8> {
  using type = uint2;
};
template <>
struct Chunk<4> {
  using type = uint32_t;
};
template <>
struct Chunk<2> {
  using type = uint16_t;
};
template <>
struct Chunk<1> {
  using type = uint8_t;
};

// The widest chunk size that divides every value (byte addresses, strides, lengths).
int widest_chunk(std::initializer_list<int64_t> values) {
  for (int w : {16, 8, 4, 2}) {
    bool ok = true;
    for (int64_t v : values) ok = ok && (v % w == 0);
    if (ok) return w;
  }
  return 1;
}

template <class F>
void dispatch_chunk(int bytes, F&& f) {
  switch (bytes) {
    case 16: f.template operator()<16>(); return;
    case 8: f.template operator()<8>(); return;
    case 4: f.template operator()<4>(); return;
    case 2: f.template operator()<2>(); return;
    default: f.template operator()<1>(); return;
  }
}

template <int kBytes>
__global__ void gather_rows_kernel(GatherRowsParams p) {
  pdl_enter();
  using C = typename Chunk<kBytes>::type;
  int64_t per_row = p.row_bytes / kBytes;
  int64_t total = p.rows * per_row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / per_row;
    int64_t c = e - r * per_row;
    int64_t src_row = (p.indices ? p.indices[r] : r) - p.index_base;
    C* dst = reinterpret_cast<C*>(static_cast<char*>(p.dst) + r * p.dst_row_stride_bytes);
    if (p.num_src_rows >= 0 && (src_row < 0 || src_row >= p.num_src_rows)) {
      dst[c] = C{};
      continue;
    }
    const C* src = reinterpret_cast<const C*>(static_cast<const char*>(p.src) + src_row * p.src_row_stride_bytes);
    dst[c] = src[c];
  }
}

template <int kBytes>
__global__ void kv_write_kernel(KvWriteParams p) {
  pdl_enter();
  using C = typename Chunk<kBytes>::type;
  int64_t row_bytes = int64_t(p.head_dim) * p.elem_bytes;
  int64_t per_row = row_bytes / kBytes;
  int64_t total = int64_t(p.n) * p.num_kv_heads * per_row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t row = e / per_row;
    int64_t c = e - row * per_row;
    int64_t token = row / p.num_kv_heads;
    int64_t head = row - token * p.num_kv_heads;
    int32_t slot = p.slots[token];
    if (slot < 0) continue;
    int64_t cache_elem = kv_cache_row(p, slot, head);
    int64_t k_elem = token * p.k_stride_token + head * p.k_stride_head;
    int64_t v_elem = token * p.v_stride_token + head * p.v_stride_head;
    const C* ks = reinterpret_cast<const C*>(static_cast<const char*>(p.k) + k_elem * p.elem_bytes);
    const C* vs = reinterpret_cast<const C*>(static_cast<const char*>(p.v) + v_elem * p.elem_bytes);
    C* kd = reinterpret_cast<C*>(static_cast<char*>(p.k_cache) + cache_elem * p.elem_bytes);
    C* vd = reinterpret_cast<C*>(static_cast<char*>(p.v_cache) + cache_elem * p.elem_bytes);
    kd[c] = ks[c];
    vd[c] = vs[c];
  }
}

// fp8 cache: one thread per value, quantized as kernel_util.cuh's to_e4m3.
template <typename T>
__global__ void kv_write_fp8_kernel(KvWriteParams p) {
  pdl_enter();
  const int64_t total = int64_t(p.n) * p.num_kv_heads * p.head_dim;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / p.head_dim;
    const int64_t d = e - row * p.head_dim;
    const int64_t token = row / p.num_kv_heads;
    const int head = int(row - token * p.num_kv_heads);
    const int32_t slot = p.slots[token];
    if (slot < 0) continue;
    const int64_t ce = kv_cache_row(p, slot, head) + d;
    const T k = static_cast<const T*>(p.k)[token * p.k_stride_token + head * p.k_stride_head + d];
    const T v = static_cast<const T*>(p.v)[token * p.v_stride_token + head * p.v_stride_head + d];
    static_cast<uint8_t*>(p.k_cache)[ce] = to_e4m3(to_f32(k), p.k_scale[head]);
    static_cast<uint8_t*>(p.v_cache)[ce] = to_e4m3(to_f32(v), p.v_scale[head]);
  }
}

int64_t addr(const void* p) {
  return int64_t(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.row_bytes == 0) return;
  int w = widest_chunk({addr(p.src), addr(p.dst), p.src_row_stride_bytes, p.dst_row_stride_bytes, p.row_bytes});
  dispatch_chunk(w, [&]<int kBytes>() {
    launch_kernel(gather_rows_kernel<kBytes>, grid_for(p.rows * (p.row_bytes / kBytes), kThreads), kThreads, 0, stream,
                  p);
  });
}

void launch_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.num_kv_heads == 0 || p.head_dim == 0) return;
  if (p.k_scale != nullptr) {
    dispatch_act(p.act, [&]<class T>() {
      launch_kernel(kv_write_fp8_kernel<T>, grid_for(int64_t(p.n) * p.num_kv_heads * p.head_dim, kThreads), kThreads, 0,
                    stream, p);
    });
    return;
  }
  int64_t eb = p.elem_bytes;
  int w = widest_chunk({addr(p.k), addr(p.v), addr(p.k_cache), addr(p.v_cache), p.k_stride_token * eb,
                        p.k_stride_head * eb, p.v_stride_token * eb, p.v_stride_head * eb, p.cache_stride_page * eb,
                        p.cache_stride_slot * eb, p.cache_stride_head * eb, int64_t(p.head_dim) * eb});
  dispatch_chunk(w, [&]<int kBytes>() {
    int64_t total = int64_t(p.n) * p.num_kv_heads * (int64_t(p.head_dim) * eb / kBytes);
    launch_kernel(kv_write_kernel<kBytes>, grid_for(total, kThreads), kThreads, 0, stream, p);
  });
}

}  // namespace fg::cuda
