// attention_bench: times flashgen's CUDA attention kernel on Llama-3-8B heads (32 q, 8 kv,
// head_dim 128, bf16) over a fragmented paged KV pool, next to two ceilings measured in the same
// run: device-to-device copy bandwidth and a cuBLASLt bf16 GEMM. Prints a table, optionally JSON.
//   attention_bench [--check] [--check-only] [--random N] [--json FILE] [--quick] [--general-only] [--no-wgmma] [--only
//   SUBSTR] [--heads Q,KV,D] [--softcap CAP]
//   --heads Q,KV,D: other heads, e.g. 16,8,256 (Gemma-2-9B); --softcap CAP: attention soft-capping
//   (Gemma 2: 50) on every row.
//   --general-only: plan every tile for the general kernel (no prefill specialisation), to
//   compare the two builds of the same binary in one device call.
//   --only SUBSTR[,SUBSTR...]: only the rows whose "group name" contains one of them (e.g. "1x16384").
//   --quick: decode rows of B1 kv8k/32k, B8 kv8k and B64 kv8k only (tools/sdpa_peer.py --quick
//   times the same shapes).
//   --no-wgmma: prefill tiles on the mma.sync prefill kernel even on sm_90 (the Hopper wgmma
//   kernel is the default there).
//   --engine-graphs: record each batch row's graph as the engine's decode graphs are recorded
//   (AttentionKernel::begin_capture with the row's bounds: launch widths that run any plan of a
//   batch within them in one round), then plan the row's batch and replay; without it the graph
//   holds the row's own plan's launches (the two differ by the CTAs past the plan's units).
// Rows of groups ending in "-fp8" read an fp8 KV cache (e4m3 codes, scales 1): half the KV bytes
// of the bf16 rows beside them, which is what decode time should follow at large batch.
// Timing: a CUDA graph of n back-to-back calls, median of 11 replays divided by n; when one KV
// set is under 240 MB the calls rotate among copies so that no call reads KV still in L2.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "backend/cuda/attention.h"
#include "support/cuda/attention_check.h"
#include "support/cuda/attention_inputs.cuh"

namespace fg::bench {
namespace {

bool g_prefill_kernel = true;  // --general-only clears it
bool g_wgmma = true;           // --no-wgmma clears it
bool g_engine_graphs = false;  // --engine-graphs
std::string g_only;            // --only SUBSTR: rows whose "group name" contains it
bool want(const std::string& group, const std::string& name) {
  if (g_only.empty()) return true;
  const std::string key = group + " " + name;
  size_t start = 0;
  for (;;) {  // comma-separated alternatives
    const size_t end = g_only.find(',', start);
    const std::string part = g_only.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty() && key.find(part) != std::string::npos) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

int g_hq = 32, g_hkv = 8, g_d = 128;  // --heads
float g_softcap = 0.f;                // --softcap
constexpr DType kDt = DType::kBF16;
constexpr double kRotateBytes = 240e6;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call: graph of n calls (call(stream, i)), median over replays.
// after_capture: runs once the graph is recorded, before it is replayed.
double time_graph(const std::function<void(cudaStream_t, int)>& call, int n, cudaStream_t stream, int reps = 11,
                  const std::function<void()>& after_capture = {}) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) call(stream, i);
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  if (after_capture) after_capture();
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) BENCH_CUDA(cudaGraphLaunch(exec, stream));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(a, stream));
    BENCH_CUDA(cudaGraphLaunch(exec, stream));
    BENCH_CUDA(cudaEventRecord(b, stream));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3 / n);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(t);
}

// Device-to-device copy of 2 GiB: bytes read + written per second.
double measure_copy_bw(cudaStream_t stream) {
  const size_t bytes = size_t(2) << 30;
  void *a, *b;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  fill_uniform(static_cast<float*>(a), int64_t(bytes / 4), -1.f, 1.f, 7);
  BENCH_CUDA(cudaDeviceSynchronize());
  const double t = time_graph(
      [&](cudaStream_t st, int) { BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); }, 4, stream);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / t;
}

__global__ void read_kernel(const int4* p, int64_t n, int* sink) {
  int acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7a5c3e1f) *sink = acc;  // keeps the loads alive
}

// Read-only streaming over 2 GiB (what decode attention mostly does): bytes read per second.
double measure_read_bw(cudaStream_t stream, int num_sms) {
  const size_t bytes = size_t(2) << 30;
  void* a;
  int* sink;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&sink, sizeof(int)));
  fill_uniform(static_cast<float*>(a), int64_t(bytes / 4), -1.f, 1.f, 8);
  BENCH_CUDA(cudaDeviceSynchronize());
  const double t = time_graph(
      [&](cudaStream_t st, int) {
        read_kernel<<<num_sms * 4, 1024, 0, st>>>(static_cast<const int4*>(a), int64_t(bytes / 16), sink);
      },
      4, stream);
  cudaFree(a);
  cudaFree(sink);
  return bytes / t;
}

// cuBLASLt bf16 GEMM 8192^3 with f32 accumulation, random inputs: FLOP/s.
double measure_gemm(cudaStream_t stream) {
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  BENCH_CUDA(cudaMalloc(&a, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&b, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&c, size_t(n) * n * 2));
  fill_uniform(a, int64_t(n) * n, -1.f, 1.f, 11);
  fill_uniform(b, int64_t(n) * n, -1.f, 1.f, 12);
  BENCH_CUDA(cudaDeviceSynchronize());
  void* ws;
  const size_t ws_bytes = size_t(64) << 20;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
  double flops = 0;
  if (found > 0) {
    const float alpha = 1.f, beta = 0.f;
    const double t = time_graph(
        [&](cudaStream_t st, int) {
          cublasStatus_t s =
              cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &heur.algo, ws, ws_bytes, st);
          if (s != CUBLAS_STATUS_SUCCESS) std::fprintf(stderr, "cublasLtMatmul failed: %d\n", int(s));
        },
        5, stream);
    flops = 2.0 * n * n * double(n) / t;
  } else {
    std::fprintf(stderr, "cuBLASLt found no bf16 GEMM algorithm\n");
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  cudaFree(ws);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return flops;
}

struct Row {
  std::string group, name;
  double seconds = 0, kv_bytes = 0, flops = 0;
  bool skipped = false;
};

// Keys each query attends (bottom-right causal): q_len * (kv - q_len) + q_len^2 / 2.
double causal_pairs(int q_len, int kv) {
  return double(q_len) * (kv - q_len) + 0.5 * double(q_len) * q_len;
}

// Bytes of one KV cache element: bf16, or e4m3 for the fp8 rows.
size_t kv_elem_bytes(bool fp8) {
  return fp8 ? 1 : 2;
}

// A batch with its KV pool copies, q, out, ready to time.
struct Workload {
  PagedLayout layout;
  DeviceBatch dev;
  std::vector<void*> k_pools, v_pools;
  void* q = nullptr;
  void* out = nullptr;
  float* scales = nullptr;  // fp8: [2, g_hkv] ones (K then V)
  size_t pool_bytes = 0;
  bool fp8 = false;

  Workload(std::vector<int32_t> q_lens, std::vector<int32_t> kv_lens, int page_size, uint64_t seed, int copies,
           bool fp8_kv = false)
      : layout(std::move(q_lens), std::move(kv_lens), page_size, seed), dev(layout), fp8(fp8_kv) {
    pool_bytes = size_t(layout.num_pages) * page_size * g_hkv * g_d * kv_elem_bytes(fp8);
    for (int c = 0; c < copies; ++c) {
      void *k, *v;
      BENCH_CUDA(cudaMalloc(&k, pool_bytes));
      BENCH_CUDA(cudaMalloc(&v, pool_bytes));
      if (fp8) {  // codes 0..111: finite e4m3 values in [0, 60]
        fill_uniform(static_cast<uint8_t*>(k), int64_t(pool_bytes), 0.f, 111.f, seed * 100 + 2 * c);
        fill_uniform(static_cast<uint8_t*>(v), int64_t(pool_bytes), 0.f, 111.f, seed * 100 + 2 * c + 1);
      } else {
        fill_act(k, kDt, int64_t(pool_bytes / 2), seed * 100 + 2 * c);
        fill_act(v, kDt, int64_t(pool_bytes / 2), seed * 100 + 2 * c + 1);
      }
      k_pools.push_back(k);
      v_pools.push_back(v);
    }
    if (fp8) {
      const std::vector<float> ones(2 * g_hkv, 1.0f);
      BENCH_CUDA(cudaMalloc(&scales, ones.size() * sizeof(float)));
      BENCH_CUDA(cudaMemcpy(scales, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    const size_t qb = size_t(layout.total_q) * g_hq * g_d * 2;
    BENCH_CUDA(cudaMalloc(&q, qb));
    BENCH_CUDA(cudaMalloc(&out, qb));
    fill_act(q, kDt, int64_t(qb / 2), seed + 99);
    BENCH_CUDA(cudaDeviceSynchronize());  // fills ran on the legacy stream
  }
  ~Workload() {
    for (void* p : k_pools) cudaFree(p);
    for (void* p : v_pools) cudaFree(p);
    cudaFree(q);
    cudaFree(out);
    cudaFree(scales);
  }
  KvCacheLayer cache(int i) const {
    const int c = i % int(k_pools.size());
    const DType dt = fp8 ? DType::kF8E4M3 : kDt;
    KvCacheLayer l{Tensor::contiguous(k_pools[c], dt, Device::kCuda, {layout.num_pages, layout.page_size, g_hkv, g_d}),
                   Tensor::contiguous(v_pools[c], dt, Device::kCuda, {layout.num_pages, layout.page_size, g_hkv, g_d})};
    if (fp8) {
      l.k_scale = Tensor::contiguous(scales, DType::kF32, Device::kCuda, {g_hkv});
      l.v_scale = Tensor::contiguous(scales + g_hkv, DType::kF32, Device::kCuda, {g_hkv});
    }
    return l;
  }
  Tensor q_t() const { return Tensor::contiguous(q, kDt, Device::kCuda, {layout.total_q, g_hq, g_d}); }
  Tensor out_t() const { return Tensor::contiguous(out, kDt, Device::kCuda, {layout.total_q, g_hq, g_d}); }
};

size_t kv_set_bytes(const std::vector<int32_t>& kv, int page_size, bool fp8 = false) {
  size_t pages = 0;
  for (int x : kv) pages += (x + page_size - 1) / page_size;
  return 2 * pages * page_size * g_hkv * g_d * kv_elem_bytes(fp8);
}

int copies_for(size_t set_bytes) {
  if (set_bytes >= kRotateBytes) return 1;
  return int(std::min<double>(64, std::ceil(kRotateBytes / double(set_bytes))));
}

int calls_for(double est_seconds) {
  return int(std::clamp(2e-3 / std::max(est_seconds, 1e-7), 1.0, 200.0));
}

bool fits(size_t bytes) {
  size_t free_b = 0, total_b = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return bytes + (size_t(2) << 30) < free_b;
}

AttentionParams bench_params() {
  AttentionParams p;
  p.scale = 1.0f / std::sqrt(float(g_d));
  p.causal = true;
  p.softcap = g_softcap;
  return p;
}

// One batch in one call per step (fp8: over an fp8 KV cache).
Row bench_batch(const std::string& group, const std::string& name, std::vector<int32_t> q_lens,
                std::vector<int32_t> kv_lens, int page_size, cudaStream_t stream, uint64_t seed, bool fp8 = false) {
  Row row{group, name};
  double pairs = 0;
  for (size_t i = 0; i < q_lens.size(); ++i) pairs += causal_pairs(q_lens[i], kv_lens[i]);
  row.flops = 4.0 * g_hq * g_d * pairs;
  const size_t set = kv_set_bytes(kv_lens, page_size, fp8);
  row.kv_bytes = 0;
  for (int kv : kv_lens) row.kv_bytes += 2.0 * kv * g_hkv * g_d * double(kv_elem_bytes(fp8));
  const int copies = copies_for(set);
  if (!fits(set * copies)) {
    row.skipped = true;
    return row;
  }
  Workload w(q_lens, kv_lens, page_size, seed, copies, fp8);
  BenchKernel owned(w.layout.total_q, w.layout.num_seqs());
  cuda::AttentionKernel& kernel = owned.kernel;
  kernel.use_prefill_kernel(g_prefill_kernel);
  kernel.use_wgmma(g_wgmma);
  const AttentionParams params = bench_params();
  Tensor q = w.q_t(), out = w.out_t();
  auto call = [&](cudaStream_t st, int i) { kernel.run(q, w.cache(i), w.dev.batch, params, out, nullptr, st); };
  const double est = std::max(row.kv_bytes / 4e12, row.flops / 3e14);
  if (g_engine_graphs) {
    GraphAttentionShape bounds;
    bounds.num_seqs = int(q_lens.size());
    bounds.min_num_seqs = bounds.num_seqs;  // as the engine pads its buckets
    bounds.max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
    bounds.max_kv_len = *std::max_element(kv_lens.begin(), kv_lens.end());
    bounds.page_size = page_size;
    kernel.begin_capture(bounds, g_hq, g_hkv, g_d, stream);
    row.seconds = time_graph(call, calls_for(est), stream, 11, [&] {
      kernel.end_capture();
      kernel.plan(w.dev.batch, g_hq, g_hkv, g_d, stream);
    });
    return row;
  }
  kernel.plan(w.dev.batch, g_hq, g_hkv, g_d, stream);
  row.seconds = time_graph(call, calls_for(est), stream);
  return row;
}

// Mixed step: one prefill chunk + decodes, in one call or as two calls (two plans).
Row bench_mixed(bool one_call, cudaStream_t stream, uint64_t seed) {
  std::vector<int32_t> q_lens(64, 1), kv_lens(64, 4096);
  q_lens[0] = 2048;
  Row row{"mixed", one_call ? "2048-chunk + 63 decodes kv4096, one call" : "same, two calls"};
  double pairs = 0;
  for (int i = 0; i < 64; ++i) pairs += causal_pairs(q_lens[i], kv_lens[i]);
  row.flops = 4.0 * g_hq * g_d * pairs;
  row.kv_bytes = 64 * 2.0 * 4096 * g_hkv * g_d * 2;
  const int page = 16;
  const int copies = copies_for(kv_set_bytes(kv_lens, page));
  Workload w(q_lens, kv_lens, page, seed, copies);
  const AttentionParams params = bench_params();
  if (one_call) {
    BenchKernel owned(w.layout.total_q, 64);
    cuda::AttentionKernel& kernel = owned.kernel;
    kernel.use_prefill_kernel(g_prefill_kernel);
    kernel.use_wgmma(g_wgmma);
    kernel.plan(w.dev.batch, g_hq, g_hkv, g_d, stream);
    Tensor q = w.q_t(), out = w.out_t();
    row.seconds =
        time_graph([&](cudaStream_t st, int i) { kernel.run(q, w.cache(i), w.dev.batch, params, out, nullptr, st); },
                   calls_for(row.kv_bytes / 4e12 + row.flops / 3e14), stream);
    return row;
  }
  // Two calls over the same pool: sequence 0 alone, then sequences 1..63 (their own metadata).
  PagedLayout pre_l({2048}, {4096}, page, seed);
  PagedLayout dec_l(std::vector<int32_t>(63, 1), std::vector<int32_t>(63, 4096), page, seed);
  const int pps = 4096 / page;
  for (int j = 0; j < pps; ++j) pre_l.block_table[j] = w.layout.block_table[j];
  for (int s = 0; s < 63; ++s)
    for (int j = 0; j < pps; ++j)
      dec_l.block_table[size_t(s) * pps + j] = w.layout.block_table[size_t(s + 1) * pps + j];
  DeviceBatch pre(pre_l), dec(dec_l);
  BenchKernel owned_pre(2048, 1), owned_dec(63, 63);
  cuda::AttentionKernel &k_pre = owned_pre.kernel, &k_dec = owned_dec.kernel;
  k_pre.use_prefill_kernel(g_prefill_kernel);
  k_dec.use_prefill_kernel(g_prefill_kernel);
  k_pre.use_wgmma(g_wgmma);
  k_dec.use_wgmma(g_wgmma);
  k_pre.plan(pre.batch, g_hq, g_hkv, g_d, stream);
  k_dec.plan(dec.batch, g_hq, g_hkv, g_d, stream);
  Tensor q = w.q_t(), out = w.out_t();
  Tensor q_pre = q.slice(0, 2048), q_dec = q.slice(2048, 2048 + 63);
  Tensor o_pre = out.slice(0, 2048), o_dec = out.slice(2048, 2048 + 63);
  row.seconds = time_graph(
      [&](cudaStream_t st, int i) {
        k_pre.run(q_pre, w.cache(i), pre.batch, params, o_pre, nullptr, st);
        k_dec.run(q_dec, w.cache(i), dec.batch, params, o_dec, nullptr, st);
      },
      calls_for(row.kv_bytes / 4e12 + row.flops / 3e14), stream);
  return row;
}

}  // namespace
}  // namespace fg::bench

int main(int argc, char** argv) {
  using namespace fg::bench;
  bool check = false, check_only = false, quick = false;
  int random_cases = 60;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check")
      check = true;
    else if (a == "--check-only")
      check = check_only = true;
    else if (a == "--quick")
      quick = true;
    else if (a == "--general-only")
      g_prefill_kernel = false;
    else if (a == "--no-wgmma")
      g_wgmma = false;
    else if (a == "--engine-graphs")
      g_engine_graphs = true;
    else if (a == "--only" && i + 1 < argc)
      g_only = argv[++i];
    else if (a == "--random" && i + 1 < argc)
      random_cases = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--heads" && i + 1 < argc && std::sscanf(argv[i + 1], "%d,%d,%d", &g_hq, &g_hkv, &g_d) == 3 &&
             g_hkv > 0 && g_hq % g_hkv == 0 && (g_d == 64 || g_d == 128 || g_d == 256))
      ++i;
    else if (a == "--softcap" && i + 1 < argc && (g_softcap = float(std::atof(argv[i + 1]))) >= 0.f)
      ++i;
    else {
      std::fprintf(stderr,
                   "usage: %s [--check] [--check-only] [--random N] [--json FILE] [--quick] [--general-only] "
                   "[--no-wgmma] [--engine-graphs] [--only SUBSTR] "
                   "[--heads Q,KV,D (Q a multiple of KV, D 64/128/256)] "
                   "[--softcap CAP]\n",
                   argv[0]);
      return 2;
    }
  }
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::fprintf(stderr, "attention_bench: no CUDA device found\n");
    return 1;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  {
    BenchKernel owned_probe(16, 1);
    fg::cuda::AttentionKernel& probe = owned_probe.kernel;
    probe.use_prefill_kernel(g_prefill_kernel);
    probe.use_wgmma(g_wgmma);
    std::printf("prefill tiles: %s\n", !g_prefill_kernel      ? "general kernel"
                                       : probe.wgmma_active() ? "wgmma prefill kernel (sm_90a)"
                                                              : "mma.sync prefill kernel");
  }
  std::printf("device: %s, %d SMs, L2 %.1f MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  std::printf("heads: %d q / %d kv of %d, softcap %g\n", g_hq, g_hkv, g_d, double(g_softcap));
  int failed = 0;
  if (check) {
    failed = run_attention_checks(random_cases, 20261130, false);
    if (check_only) return failed == 0 ? 0 : 1;
  }
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_bw = measure_copy_bw(stream);
  const double read_bw = measure_read_bw(stream, prop.multiProcessorCount);
  const double gemm = measure_gemm(stream);
  std::printf(
      "ceilings: device-to-device copy %.0f GB/s (read + write); read-only stream %.0f GB/s; cuBLASLt bf16 GEMM "
      "8192^3 %.0f TFLOP/s\n",
      copy_bw / 1e9, read_bw / 1e9, gemm / 1e12);

  std::vector<Row> rows;
  uint64_t seed = 1;
  // Decode (batch, kv) shapes: every batch of 1..256 at 1k/8k/32k keys, or (--quick) the shapes
  // issue #16 names against cuDNN (B1 kv8k/32k, B8 kv8k) and one large batch.
  std::vector<std::pair<int, int>> decode_shapes;
  if (quick) {
    decode_shapes = {{1, 8192}, {1, 32768}, {8, 8192}, {64, 8192}};
  } else {
    for (int b : {1, 8, 64, 256})
      for (int kv : {1024, 8192, 32768}) decode_shapes.emplace_back(b, kv);
  }
  for (int page : {16, 1, 256})
    for (auto [b, kv] : decode_shapes) {
      const std::string name = "B" + std::to_string(b) + " kv" + std::to_string(kv) + " page" + std::to_string(page);
      if (want("decode", name))
        rows.push_back(
            bench_batch("decode", name, std::vector<int32_t>(b, 1), std::vector<int32_t>(b, kv), page, stream, seed++));
    }
  // The same decode batches over an fp8 cache (page 16): half the KV bytes.
  for (auto [b, kv] : decode_shapes) {
    const std::string name = "B" + std::to_string(b) + " kv" + std::to_string(kv) + " page16";
    if (want("decode-fp8", name))
      rows.push_back(bench_batch("decode-fp8", name, std::vector<int32_t>(b, 1), std::vector<int32_t>(b, kv), 16,
                                 stream, seed++, true));
  }
  for (auto [n, s] : std::vector<std::pair<int, int>>{{1, 4096}, {8, 2048}}) {
    const std::string name = std::to_string(n) + "x" + std::to_string(s) + " causal page16";
    if (want("prefill-fp8", name))
      rows.push_back(bench_batch("prefill-fp8", name, std::vector<int32_t>(n, s), std::vector<int32_t>(n, s), 16,
                                 stream, seed++, true));
  }
  for (auto [n, s] :
       std::vector<std::pair<int, int>>{{1, 1024}, {16, 512}, {4, 1024}, {8, 1024}, {1, 4096}, {1, 16384}, {8, 2048}}) {
    const std::string name = std::to_string(n) + "x" + std::to_string(s) + " causal page16";
    if (want("prefill", name))
      rows.push_back(
          bench_batch("prefill", name, std::vector<int32_t>(n, s), std::vector<int32_t>(n, s), 16, stream, seed++));
  }
  if (want("mixed", "")) {
    rows.push_back(bench_mixed(true, stream, seed++));
    rows.push_back(bench_mixed(false, stream, seed++));
  }
  for (int ql : {1, 2, 4, 8}) {
    const std::string name = "B32 kv4096 q_len" + std::to_string(ql) + " page16";
    if (want("spec", name))
      rows.push_back(
          bench_batch("spec", name, std::vector<int32_t>(32, ql), std::vector<int32_t>(32, 4096), 16, stream, seed++));
  }

  std::printf("\n%-8s %-44s %10s %9s %7s %7s %9s %7s\n", "group", "case", "time_us", "KV_GB/s", "%copy", "%read",
              "TFLOP/s", "%gemm");
  for (const Row& r : rows) {
    if (r.skipped) {
      std::printf("%-8s %-44s %10s (skipped: not enough device memory)\n", r.group.c_str(), r.name.c_str(), "-");
      continue;
    }
    const double bw = r.kv_bytes / r.seconds, tf = r.flops / r.seconds;
    std::printf("%-8s %-44s %10.1f %9.0f %6.1f%% %6.1f%% %9.1f %6.1f%%\n", r.group.c_str(), r.name.c_str(),
                r.seconds * 1e6, bw / 1e9, 100 * bw / copy_bw, 100 * bw / read_bw, tf / 1e12,
                gemm > 0 ? 100 * tf / gemm : 0.0);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"device\": \"" << prop.name << "\", \"heads\": [" << g_hq << ", " << g_hkv << ", " << g_d
      << "], \"softcap\": " << g_softcap << ", \"copy_bytes_per_s\": " << copy_bw
      << ", \"read_bytes_per_s\": " << read_bw << ", \"gemm_flops_per_s\": " << gemm << ", \"check_failed\": " << failed
      << ", \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << "  {\"group\": \"" << r.group << "\", \"name\": \"" << r.name
        << "\", \"skipped\": " << (r.skipped ? "true" : "false") << ", \"seconds\": " << r.seconds
        << ", \"kv_bytes\": " << r.kv_bytes << ", \"flops\": " << r.flops << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    f << "]}\n";
  }
  return failed == 0 ? 0 : 1;
}
