// The attention correctness sweep (attention_kernel_test, attention_bench --check; declared in
// attention_check.h): the CUDA attention kernel against a plain f32 reference kernel (one
// block per query row and head, exact expf/tanhf) on fresh random inputs: page sizes 1..256 and
// odd ones, GQA 1/4/8, q_len 1..hundreds, kv_len up to 40k (split-KV), window, softcap, lse,
// strided q, bf16 and f16, head_dim 64, 128 and 256. Outputs are poisoned with NaN and guarded by
// sentinel rows; unused KV slots hold NaN so reads past a sequence's keys show up. One case also
// captures a CUDA graph under one plan and replays it after a plan that splits. fp8 rows: the KV
// cache holds e4m3 codes with a power-of-two scale per kv head, and the reference reads
// code * scale exactly as the CPU backend does (every kernel: decode, split-KV, both prefill paths,
// graph replay).
#include <cuda_fp8.h>

#include <cmath>
#include <string>

#include "backend/cuda/attention.h"
#include "support/cuda/attention_check.h"
#include "support/cuda/attention_inputs.cuh"

namespace fg::bench {
namespace {

constexpr int kGuardRows = 3;
constexpr uint16_t kSentinel = 0x7b7b;

// Writes random values into the KV rows a sequence owns (positions < kv_len), through the table.
// E = uint8_t: an fp8 cache, the same values stored as e4m3(x / scale) with scales [2, hkv] (K, V).
template <typename E>
__global__ void fill_kv_rows_kernel(E* k, E* v, const int32_t* bt, int max_pages, const int32_t* kv_lens, int page_size,
                                    int hkv, int d, uint64_t seed, const float* scales) {
  const int s = blockIdx.y;
  const int64_t row_elems = int64_t(hkv) * d;
  const int64_t n = int64_t(kv_lens[s]) * row_elems;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int pos = int(i / row_elems);
    const int64_t e = i % row_elems;
    const int page = bt[int64_t(s) * max_pages + pos / page_size];
    const int64_t dst = (int64_t(page) * page_size + pos % page_size) * row_elems + e;
    const uint64_t key = (uint64_t(s) << 40) ^ uint64_t(i);
    const float kx = (hash_u32(seed * 31 + key) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    const float vx = (hash_u32(seed * 37 + key + 0x5555) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    if constexpr (std::is_same_v<E, uint8_t>) {
      const int kvh = int(e / d);
      k[dst] = uint8_t(__nv_cvt_float_to_fp8(kx / scales[kvh], __NV_SATFINITE, __NV_E4M3));
      v[dst] = uint8_t(__nv_cvt_float_to_fp8(vx / scales[hkv + kvh], __NV_SATFINITE, __NV_E4M3));
    } else {
      k[dst] = E(kx);
      v[dst] = E(vx);
    }
  }
}

// A K or V element as f32: T as is, or (scales set: an fp8 cache) e4m3 code * scale.
template <typename T>
__device__ __forceinline__ float kv_value(const void* base, int64_t i, const float* scale) {
  if (scale == nullptr) return float(static_cast<const T*>(base)[i]);
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const uint8_t*>(base)[i], __NV_E4M3);
  return __half2float(__half(h)) * *scale;
}

// f32 reference: grid (total_q, hq), 128 threads, each owning channels tid and tid + 128 (d <= 256).
// out: [total_q, hq, d] f32; lse: [total_q, hq] f32. k_scale / v_scale: [hkv] for an fp8 cache
// (k, v hold codes), null otherwise.
template <typename T>
__global__ void reference_kernel(const T* q, int64_t q_stride_tok, const void* k, const void* v, const int32_t* bt,
                                 int max_pages, const int32_t* cu, const int32_t* kv_lens, const int32_t* seq_of,
                                 int page_size, int hq, int hkv, int d, float scale, int causal, int window,
                                 float softcap, float* out, float* lse, const float* k_scale, const float* v_scale) {
  __shared__ float w[128];
  __shared__ float red[128];
  const int tok = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int s = seq_of[tok];
  const int q_len = cu[s + 1] - cu[s];
  const int kv = kv_lens[s];
  const int pos = kv - q_len + (tok - cu[s]);
  const int kvh = h / (hq / hkv);
  const T* qr = q + int64_t(tok) * q_stride_tok + int64_t(h) * d;
  auto row_index = [&](int j) {
    const int page = bt[int64_t(s) * max_pages + j / page_size];
    return ((int64_t(page) * page_size + j % page_size) * hkv + kvh) * d;
  };
  const float* ks = k_scale ? k_scale + kvh : nullptr;
  const float* vs = v_scale ? v_scale + kvh : nullptr;
  auto visible = [&](int j) { return j < kv && (!causal || j <= pos) && (window <= 0 || pos - j < window); };
  auto score = [&](int j) {
    const int64_t kr = row_index(j);
    float acc = 0.f;
    for (int e = 0; e < d; ++e) acc += float(qr[e]) * kv_value<T>(k, kr + e, ks);
    acc *= scale;
    if (softcap > 0.f) acc = softcap * tanhf(acc / softcap);
    return acc;
  };
  float mx = -INFINITY;
  for (int j = tid; j < kv; j += 128)
    if (visible(j)) mx = fmaxf(mx, score(j));
  red[tid] = mx;
  __syncthreads();
  for (int o = 64; o > 0; o >>= 1) {
    if (tid < o) red[tid] = fmaxf(red[tid], red[tid + o]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float acc[2] = {0.f, 0.f}, sum = 0.f;
  for (int c = 0; c < kv; c += 128) {
    const int j = c + tid;
    w[tid] = (j < kv && visible(j)) ? expf(score(j) - mx) : 0.f;
    __syncthreads();
    for (int jj = 0; jj < 128 && c + jj < kv; ++jj) {
      sum += w[jj];
      if (w[jj] == 0.f) continue;
      const int64_t vr = row_index(c + jj);
      for (int i = 0; i < 2; ++i)
        if (tid + 128 * i < d) acc[i] += w[jj] * kv_value<T>(v, vr + tid + 128 * i, vs);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    if (tid + 128 * i < d) out[(int64_t(tok) * hq + h) * d + tid + 128 * i] = acc[i] / sum;
  if (tid == 0) lse[int64_t(tok) * hq + h] = mx + logf(sum);
}

struct CheckCase {
  std::string name;
  DType dtype = DType::kBF16;
  int d = 128, hq = 32, hkv = 8, page_size = 16;
  std::vector<int32_t> q_lens, kv_lens;
  AttentionParams params;
  bool want_lse = true;
  bool strided_q = false;
  // Graph check: capture under this case's plan with kv_lens_capture, replay under kv_lens.
  std::vector<int32_t> kv_lens_capture;
  // Prefill tiles on the mma.sync prefill kernel even where the wgmma one is available.
  bool mma_prefill = false;
  bool fp8 = false;  // an fp8 KV cache (bf16 only)
};

float to_f32(uint16_t x, DType dt) {
  return dt == DType::kBF16 ? bf16_to_f32(x) : f16_to_f32(x);
}

template <typename T>
bool run_case(const CheckCase& c, uint64_t seed, bool verbose) {
  const DType dt = c.dtype;
  const int n = int(c.q_lens.size());
  PagedLayout layout(c.q_lens, c.kv_lens, c.page_size, seed, /*extra_pages=*/3);
  DeviceBatch dev(layout);
  const int total_q = layout.total_q;
  const int64_t row_elems = int64_t(c.hkv) * c.d;
  const size_t pool_elems = size_t(layout.num_pages) * c.page_size * row_elems;
  void *k = nullptr, *v = nullptr;
  T *qbuf = nullptr, *outbuf = nullptr;
  float *lsebuf = nullptr, *ref_out = nullptr, *ref_lse = nullptr, *scales = nullptr;
  int32_t* seq_of = nullptr;
  const size_t kv_elem = c.fp8 ? 1 : sizeof(T);
  BENCH_CUDA(cudaMalloc(&k, pool_elems * kv_elem));
  BENCH_CUDA(cudaMalloc(&v, pool_elems * kv_elem));
  // NaN everywhere a sequence does not own (0xffff in bf16 / f16, 0xff in e4m3).
  BENCH_CUDA(cudaMemset(k, 0xff, pool_elems * kv_elem));
  BENCH_CUDA(cudaMemset(v, 0xff, pool_elems * kv_elem));
  if (c.fp8) {
    // Powers of two per kv head, K then V: 2^-7 and 2^-8 keep values below 1 in e4m3's range.
    std::vector<float> h(2 * size_t(c.hkv));
    for (int i = 0; i < c.hkv; ++i) {
      h[size_t(i)] = std::ldexp(1.0f, -7 - i % 2);
      h[size_t(c.hkv + i)] = std::ldexp(1.0f, -8 + i % 2);
    }
    BENCH_CUDA(cudaMalloc(&scales, h.size() * sizeof(float)));
    BENCH_CUDA(cudaMemcpy(scales, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  {
    dim3 grid(64, n);
    if (c.fp8)
      fill_kv_rows_kernel<uint8_t><<<grid, 256>>>(static_cast<uint8_t*>(k), static_cast<uint8_t*>(v), dev.d_bt,
                                                  layout.max_pages, dev.d_kv, c.page_size, c.hkv, c.d, seed, scales);
    else
      fill_kv_rows_kernel<T><<<grid, 256>>>(static_cast<T*>(k), static_cast<T*>(v), dev.d_bt, layout.max_pages,
                                            dev.d_kv, c.page_size, c.hkv, c.d, seed, nullptr);
    BENCH_CUDA(cudaGetLastError());
  }
  const int q_row = c.strided_q ? (c.hq + 2 * c.hkv) * c.d : c.hq * c.d;
  BENCH_CUDA(cudaMalloc(&qbuf, size_t(std::max(total_q, 1)) * q_row * sizeof(T)));
  fill_act(qbuf, dt, int64_t(total_q) * q_row, seed + 1);
  const size_t out_row = size_t(c.hq) * c.d;
  BENCH_CUDA(cudaMalloc(&outbuf, (total_q + 2 * kGuardRows) * out_row * sizeof(T)));
  BENCH_CUDA(cudaMalloc(&lsebuf, (total_q + 2 * kGuardRows) * c.hq * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&ref_out, std::max<size_t>(total_q * out_row, 1) * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&ref_lse, std::max(total_q * c.hq, 1) * sizeof(float)));
  std::vector<int32_t> h_seq_of(std::max(total_q, 1));
  for (int s = 0; s < n; ++s)
    for (int i = layout.cu_seqlens_q[s]; i < layout.cu_seqlens_q[s + 1]; ++i) h_seq_of[i] = s;
  BENCH_CUDA(cudaMalloc(&seq_of, h_seq_of.size() * sizeof(int32_t)));
  BENCH_CUDA(cudaMemcpy(seq_of, h_seq_of.data(), h_seq_of.size() * sizeof(int32_t), cudaMemcpyHostToDevice));

  // Poison: sentinels in the guard rows, NaN in the rows the kernel must write.
  {
    std::vector<uint16_t> h((total_q + 2 * kGuardRows) * out_row, kSentinel);
    for (size_t i = kGuardRows * out_row; i < (kGuardRows + total_q) * out_row; ++i) h[i] = 0xffff;
    BENCH_CUDA(cudaMemcpy(outbuf, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    std::vector<float> hl((total_q + 2 * kGuardRows) * c.hq, 12345.f);
    for (size_t i = kGuardRows * c.hq; i < size_t(kGuardRows + total_q) * c.hq; ++i) hl[i] = NAN;
    BENCH_CUDA(cudaMemcpy(lsebuf, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice));
  }

  Tensor q = Tensor::contiguous(qbuf, dt, Device::kCuda, {total_q, c.hq, c.d});
  q.stride[0] = q_row;
  Tensor out = Tensor::contiguous(outbuf + kGuardRows * out_row, dt, Device::kCuda, {total_q, c.hq, c.d});
  Tensor lse = Tensor::contiguous(lsebuf + kGuardRows * c.hq, DType::kF32, Device::kCuda, {total_q, c.hq});
  const DType kv_dt = c.fp8 ? DType::kF8E4M3 : dt;
  KvCacheLayer cache{Tensor::contiguous(k, kv_dt, Device::kCuda, {layout.num_pages, c.page_size, c.hkv, c.d}),
                     Tensor::contiguous(v, kv_dt, Device::kCuda, {layout.num_pages, c.page_size, c.hkv, c.d})};
  if (c.fp8) {
    cache.k_scale = Tensor::contiguous(scales, DType::kF32, Device::kCuda, {c.hkv});
    cache.v_scale = Tensor::contiguous(scales + c.hkv, DType::kF32, Device::kCuda, {c.hkv});
  }

  // The fills ran on the legacy stream; the kernels below run on a non-blocking one.
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BenchKernel owned(std::max(total_q, 1) + 16, n + 4);
  cuda::AttentionKernel& kernel = owned.kernel;
  kernel.use_wgmma(!c.mma_prefill);
  if (!c.kv_lens_capture.empty()) {
    // Capture under a plan of other kv lengths (no splits), then replay under this case's plan.
    std::vector<int32_t> cap_kv = c.kv_lens_capture;
    PagedLayout cap_layout(c.q_lens, cap_kv, c.page_size, seed);
    AttentionBatch cap_batch = dev.batch;
    cap_batch.host_seqlens_kv = cap_layout.kv_lens;
    kernel.plan(cap_batch, c.hq, c.hkv, c.d, stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    kernel.run(q, cache, dev.batch, c.params, out, c.want_lse ? &lse : nullptr, stream);
    BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    kernel.plan(dev.batch, c.hq, c.hkv, c.d, stream);
    BENCH_CUDA(cudaGraphLaunch(exec, stream));
    BENCH_CUDA(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    kernel.plan(dev.batch, c.hq, c.hkv, c.d, stream);
    kernel.run(q, cache, dev.batch, c.params, out, c.want_lse ? &lse : nullptr, stream);
  }
  reference_kernel<T><<<dim3(std::max(total_q, 1), c.hq), 128, 0, stream>>>(
      qbuf, q_row, k, v, dev.d_bt, layout.max_pages, dev.d_cu, dev.d_kv, seq_of, c.page_size, c.hq, c.hkv, c.d,
      c.params.scale, c.params.causal, c.params.sliding_window, c.params.softcap, ref_out, ref_lse, scales,
      scales == nullptr ? nullptr : scales + c.hkv);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(stream));

  std::vector<uint16_t> h_out((total_q + 2 * kGuardRows) * out_row);
  std::vector<float> h_lse((total_q + 2 * kGuardRows) * c.hq), r_out(total_q * out_row), r_lse(total_q * c.hq);
  BENCH_CUDA(cudaMemcpy(h_out.data(), outbuf, h_out.size() * 2, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(h_lse.data(), lsebuf, h_lse.size() * 4, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(r_out.data(), ref_out, r_out.size() * 4, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(r_lse.data(), ref_lse, r_lse.size() * 4, cudaMemcpyDeviceToHost));

  bool ok = true;
  std::string why;
  for (size_t i = 0; i < kGuardRows * out_row; ++i)
    if (h_out[i] != kSentinel || h_out[h_out.size() - 1 - i] != kSentinel) ok = false, why = "out guard overwritten";
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  size_t bad = 0;
  for (size_t i = 0; i < size_t(total_q) * out_row; ++i) {
    const float a = to_f32(h_out[kGuardRows * out_row + i], dt), r = r_out[i];
    if (!std::isfinite(a)) ++bad;
    const double e = std::fabs(double(a) - r);
    err2 += e * e;
    ref2 += double(r) * r;
    max_err = std::max(max_err, e);
    max_ref = std::max(max_ref, double(std::fabs(r)));
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  const double tol = dt == DType::kBF16 ? 1.5e-2 : 4e-3;
  if (rel > tol) ok = false, why = "relative error " + std::to_string(rel);
  if (max_err > 8 * tol * std::max(max_ref, 1e-3)) ok = false, why = "max abs error " + std::to_string(max_err);
  if (bad) ok = false, why = std::to_string(bad) + " non-finite outputs (unwritten?)";
  double lse_err = 0;
  if (c.want_lse) {
    for (int i = 0; i < kGuardRows * c.hq; ++i)
      if (h_lse[i] != 12345.f || h_lse[h_lse.size() - 1 - i] != 12345.f) ok = false, why = "lse guard overwritten";
    for (size_t i = 0; i < r_lse.size(); ++i) {
      const float a = h_lse[kGuardRows * c.hq + i];
      const double e = std::isfinite(a) ? std::fabs(double(a) - r_lse[i]) : 1e30;
      lse_err = std::max(lse_err, e);
    }
    if (lse_err > 2e-3) ok = false, why = "lse error " + std::to_string(lse_err);
  }
  if (verbose || !ok)
    std::printf("  %-5s %-58s rel %.2e max %.2e lse %.2e %s\n", ok ? "ok" : "FAIL", c.name.c_str(), rel, max_err,
                lse_err, ok ? "" : why.c_str());
  cudaStreamDestroy(stream);
  cudaFree(k);
  cudaFree(v);
  cudaFree(qbuf);
  cudaFree(outbuf);
  cudaFree(lsebuf);
  cudaFree(ref_out);
  cudaFree(ref_lse);
  cudaFree(seq_of);
  cudaFree(scales);
  return ok;
}

bool run_any(const CheckCase& c, uint64_t seed, bool verbose) {
  return c.dtype == DType::kBF16 ? run_case<__nv_bfloat16>(c, seed, verbose) : run_case<__half>(c, seed, verbose);
}

std::string describe(const CheckCase& c) {
  char buf[220];
  std::snprintf(buf, sizeof buf, "%s d%d h%d/%d ps%d n%d maxq%d maxkv%d%s%s%s%s%s%s%s", dtype_name(c.dtype).data(), c.d,
                c.hq, c.hkv, c.page_size, int(c.q_lens.size()), *std::max_element(c.q_lens.begin(), c.q_lens.end()),
                *std::max_element(c.kv_lens.begin(), c.kv_lens.end()), c.params.causal ? "" : " noncausal",
                c.params.sliding_window ? " win" : "", c.params.softcap > 0 ? " cap" : "",
                c.strided_q ? " strided" : "", c.kv_lens_capture.empty() ? "" : " graph",
                c.mma_prefill ? " mma.sync" : "", c.fp8 ? " fp8-kv" : "");
  return buf;
}

}  // namespace

int run_attention_checks(int num_random, uint64_t seed, bool verbose) {
  std::vector<CheckCase> cases;
  auto add = [&](CheckCase c) {
    c.params.scale = 1.0f / std::sqrt(float(c.d));
    if (c.name.empty()) c.name = describe(c);
    cases.push_back(std::move(c));
  };
  // Prefill-tile cases run on both prefill kernels where the device has the wgmma one.
  auto add_both = [&](CheckCase c) {
    add(c);
    c.mma_prefill = true;
    add(c);
  };
  // Targeted cases: the bench shapes in small, split-KV, odd pages, every option.
  {
    CheckCase c;
    c.q_lens = {1, 1, 1};
    c.kv_lens = {40000, 17, 3000};
    c.page_size = 1;
    add(c);  // decode, page 1, long sequence split
  }
  {
    CheckCase c;
    c.q_lens = {1};
    c.kv_lens = {32768};
    c.page_size = 256;
    add(c);  // batch 1 split many ways
  }
  {
    CheckCase c;
    c.q_lens = {700};
    c.kv_lens = {700};
    c.page_size = 48;
    c.d = 64;
    c.dtype = DType::kF16;
    c.params.sliding_window = 100;
    c.params.softcap = 30.f;
    add(c);  // prefill with window and softcap
  }
  {
    CheckCase c;
    c.q_lens = {1024, 1500, 777};
    c.kv_lens = {1024, 3000, 777};
    add_both(c);  // enough prefill rows for 128-row tiles (ragged ends, a chunk after cached keys)
  }
  {
    CheckCase c;
    c.q_lens = {1500, 300};
    c.kv_lens = {3100, 300};
    c.page_size = 7;
    c.dtype = DType::kF16;
    add(c);  // f16 at head_dim 128 on the wgmma kernel: 128-key blocks over pages of 7 keys
  }
  {
    CheckCase c;
    c.q_lens = {2000};
    c.kv_lens = {2100};
    c.page_size = 48;
    c.d = 64;
    c.dtype = DType::kF16;
    c.params.sliding_window = 300;
    c.params.softcap = 20.f;
    add(c);  // 128-row tiles with window, softcap, head_dim 64, f16
  }
  {
    CheckCase c;
    c.q_lens = {300, 1, 1, 7, 16, 1};
    c.kv_lens = {1000, 4096, 5, 7, 2000, 1};
    c.page_size = 3;
    c.strided_q = true;
    add(c);  // mixed prefill chunk + decodes + spec windows, odd page size, fused-qkv strides
  }
  {
    CheckCase c;
    c.q_lens = {8, 8, 2, 4};
    c.kv_lens = {4096, 100, 64, 65};
    c.page_size = 64;
    c.params.causal = false;
    add(c);  // non-causal
  }
  {
    CheckCase c;
    c.q_lens = {1, 1, 1, 1};
    c.kv_lens = {20000, 9000, 129, 64};
    c.kv_lens_capture = {100, 90, 80, 64};
    c.page_size = 16;
    add(c);  // graph captured without splits, replayed with splits
  }
  {
    CheckCase c;
    c.q_lens = {5, 1};
    c.kv_lens = {12000, 12000};
    c.page_size = 16;
    c.params.sliding_window = 1000;
    c.hq = 8;
    c.hkv = 8;
    add(c);  // window on a split sequence, MHA
  }
  // Cases that reach the prefill kernel (unsplit 128-row tiles, page size a power of two >= 8):
  // at least ~1.5 waves of 128-row tiles, every option, page sizes 8 / 32 / 256, GQA 1 / 8.
  {
    CheckCase c;
    c.q_lens = {1700, 3};
    c.kv_lens = {2500, 3};
    c.page_size = 256;
    c.params.sliding_window = 700;
    c.params.softcap = 30.f;
    c.strided_q = true;
    add_both(c);  // window + softcap + strided q, a chunk after cached keys, plus a 16-row tile
  }
  {
    CheckCase c;
    c.q_lens = {3200};
    c.kv_lens = {3300};
    c.page_size = 8;
    c.d = 64;
    c.hq = 16;
    c.hkv = 2;
    c.dtype = DType::kF16;
    add_both(c);  // GQA 8, head_dim 64, f16, page 8
  }
  {
    CheckCase c;
    c.q_lens = {3200};
    c.kv_lens = {3200};
    c.page_size = 32;
    c.hq = 16;
    c.hkv = 16;
    c.params.causal = false;
    add_both(c);  // MHA, non-causal, page 32
  }
  {
    CheckCase c;
    c.q_lens = {2000, 1, 1};
    c.kv_lens = {2600, 20000, 9000};
    c.kv_lens_capture = {2000, 100, 90};
    c.page_size = 64;
    add_both(c);  // graph captured and replayed with prefill tiles and decodes in one call
  }
  {
    CheckCase c;
    c.q_lens = {600, 600, 600, 600};
    c.kv_lens = {600, 600, 600, 600};
    add_both(c);  // short 128-row tiles (mean causal extent ~300 keys) on both prefill kernels
  }
  {
    CheckCase c;
    c.q_lens = {600, 600, 600, 600};
    c.kv_lens = {3000, 3000, 2800, 3000};
    c.kv_lens_capture = {600, 600, 600, 600};
    c.page_size = 3;
    add(c);  // graph recorded under a short-prefill plan, replayed with longer wgmma tiles on page 3
  }
  // Pages the wgmma prefill kernel takes and the mma.sync one does not (1, 3, 48).
  {
    CheckCase c;
    c.q_lens = {2500};
    c.kv_lens = {2600};
    c.page_size = 1;
    add(c);  // page 1 prefill after cached keys
  }
  {
    CheckCase c;
    c.q_lens = {1800, 1};
    c.kv_lens = {1800, 700};
    c.page_size = 3;
    c.d = 64;
    c.params.sliding_window = 500;
    c.params.softcap = 25.f;
    add(c);  // page 3, head_dim 64, window + softcap, with a decode
  }
  // head_dim 256 (Gemma 2 / 3): 64-row tiles at most, no prefill kernel; every path of the
  // general kernel and the merge.
  {
    CheckCase c;
    c.d = 256;
    c.hq = 16;
    c.hkv = 8;
    c.q_lens = {1, 1, 1};
    c.kv_lens = {30000, 17, 3000};
    c.page_size = 1;
    c.params.softcap = 50.f;
    add(c);  // decode, page 1, split, softcap (Gemma-2-9B's heads)
  }
  {
    CheckCase c;
    c.d = 256;
    c.hq = 8;
    c.hkv = 1;
    c.q_lens = {1500, 7, 1};
    c.kv_lens = {2000, 300, 9000};
    c.page_size = 16;
    c.params.sliding_window = 700;
    c.params.softcap = 30.f;
    c.strided_q = true;
    add(c);  // prefill chunk after cached keys + spec window + decode, window, GQA 8, strided q
  }
  {
    CheckCase c;
    c.d = 256;
    c.hq = 4;
    c.hkv = 4;
    c.dtype = DType::kF16;
    c.q_lens = {600, 5};
    c.kv_lens = {600, 4000};
    c.page_size = 3;
    c.params.causal = false;
    add(c);  // f16, MHA, non-causal, odd page size
  }
  {
    CheckCase c;
    c.d = 256;
    c.hq = 16;
    c.hkv = 8;
    c.q_lens = {1, 1, 1, 1};
    c.kv_lens = {20000, 9000, 129, 64};
    c.kv_lens_capture = {100, 90, 80, 64};
    add(c);  // graph captured without splits, replayed with splits
  }
  // head_dim 256 prefills long enough for 128-row tiles: the wgmma kernel where the device has
  // it, else (and in the mma.sync variant of add_both) the general kernel's 64-row tiles.
  {
    CheckCase c;
    c.d = 256;
    c.hq = 16;
    c.hkv = 8;
    c.q_lens = {2000};
    c.kv_lens = {2600};
    c.params.sliding_window = 1024;
    c.params.softcap = 50.f;
    c.strided_q = true;
    add_both(c);  // Gemma-2-9B's heads: a chunk after cached keys, window, softcap, strided q
  }
  {
    CheckCase c;
    c.d = 256;
    c.hq = 8;
    c.hkv = 8;
    c.dtype = DType::kF16;
    c.q_lens = {3200, 1};
    c.kv_lens = {3300, 5000};
    c.page_size = 3;
    add_both(c);  // MHA, f16, odd page size, with a decode
  }
  {
    CheckCase c;
    c.d = 256;
    c.hq = 16;
    c.hkv = 8;
    c.q_lens = {2000, 1, 1};
    c.kv_lens = {2600, 20000, 9000};
    c.kv_lens_capture = {2100, 100, 90};
    c.page_size = 64;
    add_both(c);  // graph captured and replayed with prefill tiles and decodes in one call
  }
  // fp8 KV rows: every bf16 targeted case again over an fp8 cache (decode split many ways, both
  // prefill paths: wgmma, and the general kernel's 128-row tiles where the mma.sync prefill kernel
  // would have run; graphs replayed under plans with splits and prefill tiles; odd pages, window,
  // softcap, strided q), head_dim 256 included (the wgmma kernel's producer converting in two
  // batches per block, the general kernel's 64-row tiles and splits).
  for (size_t i = 0, targeted = cases.size(); i < targeted; ++i) {
    if (cases[i].dtype != DType::kBF16) continue;
    CheckCase c = cases[i];
    c.fp8 = true;
    c.name.clear();
    add(c);
  }
  // Decode and verification batches of at most 16 packed rows per sequence (16-row tiles only), at
  // head_dim 64 and 128 with bf16 and fp8 pages: split many ways and not, pages of 1 and 3 tokens,
  // window, softcap, lse, strided q, GQA 4/8/16.
  for (int d : {64, 128}) {
    for (bool fp8 : {false, true}) {
      CheckCase c;
      c.d = d;
      c.fp8 = fp8;
      c.q_lens = {1, 1, 1, 1};
      c.kv_lens = {40000, 17, 3000, 700};
      c.page_size = 1;
      add(c);  // decode, page 1, a long sequence split many ways
      c.q_lens = {4, 2, 1, 3};
      c.kv_lens = {300, 2000, 64, 3};
      c.page_size = 3;
      c.params.sliding_window = 256;
      c.params.softcap = 30.f;
      c.strided_q = true;
      add(c);  // verification windows of 16 packed rows, odd pages, window, softcap, strided q
      c.q_lens = {1, 1};
      c.kv_lens = {9000, 33};
      c.page_size = 16;
      c.hq = 16;
      c.hkv = 1;
      c.params = AttentionParams{};
      c.strided_q = false;
      add(c);  // GQA 16: one token fills the tile
    }
  }
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + rng() % v.size()); };
  for (int i = 0; i < num_random; ++i) {
    CheckCase c;
    c.dtype = rng() % 2 ? DType::kBF16 : DType::kF16;
    c.d = pick({64, 128, 256});
    c.hkv = pick({1, 2, 4});
    c.hq = c.hkv * pick({1, 4, 8});
    c.page_size = pick({1, 3, 16, 48, 64, 256});
    const int n = 1 + int(rng() % (rng() % 4 == 0 ? 64 : 8));
    for (int s = 0; s < n; ++s) {
      const int kind = int(rng() % 4);
      const int q = kind == 0 ? 1 + int(rng() % 300) : kind == 1 ? 1 + int(rng() % 16) : 1;
      const int kv_max = rng() % 8 == 0 ? 33000 : 3000;
      c.q_lens.push_back(q);
      c.kv_lens.push_back(q + int(rng() % kv_max));
    }
    // Keep the f32 reference (one block per row and head, no tensor cores) cheap.
    for (;;) {
      int64_t work = 0;
      for (int s = 0; s < n; ++s) work += int64_t(c.q_lens[s]) * c.kv_lens[s] * c.hq;
      if (work <= 150'000'000) break;
      int s = 0;
      for (int j = 1; j < n; ++j)
        if (int64_t(c.q_lens[j]) * c.kv_lens[j] > int64_t(c.q_lens[s]) * c.kv_lens[s]) s = j;
      const int old_q = c.q_lens[s];
      c.q_lens[s] = std::max(1, old_q / 4);
      c.kv_lens[s] = old_q > 1 ? c.kv_lens[s] - (old_q - c.q_lens[s]) : std::max(1, c.kv_lens[s] / 4);
    }
    c.params.causal = rng() % 6 != 0;
    if (rng() % 3 == 0) c.params.sliding_window = 1 + int(rng() % 2000);
    if (rng() % 3 == 0) c.params.softcap = pick({5, 30});
    c.want_lse = rng() % 4 != 0;
    c.strided_q = rng() % 3 == 0;
    c.fp8 = c.dtype == DType::kBF16 && rng() % 3 == 0;
    add(c);
  }
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) failed += run_any(cases[i], seed + 1000 * i, verbose) ? 0 : 1;
  std::printf("attention check: %d of %zu cases passed\n", int(cases.size()) - failed, cases.size());
  return failed;
}

}  // namespace fg::bench
