// gemm_algo_search: how far cuBLASLt's first heuristic answer is from the fastest algorithm it can
// run, for the bf16 projections of a decode or verification step (out[m, n] = x[m, k] @ w[n, k]^T,
// the layout GemmLt uses).
//
// For each shape and row count m it times, as a step runs them (calls back to back, rotating over
// enough weight copies that each call reads its weights from memory and not from the L2):
//   - the heuristic's answers (up to --heuristic of them, the first being what GemmLt runs);
//   - each of the first --vary answers again with its split-K count and reduction scheme changed
//     (every count in --splits the algorithm supports, every scheme it allows), kept when
//     cublasLtMatmulAlgoCheck accepts it within the workspace.
// Prints per problem the heuristic's first, the fastest candidate and its configuration, and the
// floor (weight + activation bytes at the copy bandwidth measured in the same run). --json FILE
// writes every candidate's time.
//
//   gemm_algo_search [--shapes o:4096x4096,...] [--rows 1,32,160] [--heuristic 32] [--vary 8]
//                    [--splits 1,2,3,4,6,8] [--json out.json]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "gemm_algo_search: %s\n", m.c_str());
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(std::string(what) + ": cublas status " + std::to_string(int(s)));
}

struct Shape {
  std::string name;
  int64_t n = 0, k = 0;
};

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Shape sh;
    const auto colon = item.find(':');
    const auto x = item.find('x', colon == std::string::npos ? 0 : colon);
    if (colon == std::string::npos || x == std::string::npos) die("shape '" + item + "' is not name:NxK");
    sh.name = item.substr(0, colon);
    sh.n = std::atoll(item.substr(colon + 1, x - colon - 1).c_str());
    sh.k = std::atoll(item.substr(x + 1).c_str());
    if (sh.n <= 0 || sh.k <= 0) die("shape '" + item + "' has a non-positive dimension");
    out.push_back(sh);
  }
  return out;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

template <class T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  (void)cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written);
  return v;
}

template <class T>
T cap(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t written = 0;
  (void)cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof(v), &written);
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "algo %d tile %u stages %u splitK %d scheme %u swizzle %u cluster %u custom %u",
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return buf;
}

struct Candidate {
  cublasLtMatmulAlgo_t algo{};
  std::string origin;  // "heuristic #i" or "heuristic #i, splitK s scheme r"
  size_t workspace = 0;
  double us = 0;
};

// Copy bandwidth (read + write bytes per second) of a 1 GiB device-to-device copy.
double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    check(cudaEventRecord(e0), "record");
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(e1), "record");
    check(cudaEventSynchronize(e1), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  (void)cudaFree(a);
  (void)cudaFree(b);
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  return 2.0 * double(bytes) / (ms[ms.size() / 2] * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gemm_algo_search: cuBLASLt's heuristic pick against the algorithms it can run"};
  std::string shapes_arg = "qkv:6144x4096,o:4096x4096,gate_up:28672x4096,down:4096x14336,lm_head:128256x4096";
  std::string rows_arg = "1,32,160";
  std::string splits_arg = "1,2,3,4,6,8";
  int heuristic = 32, vary = 8, reps = 5;
  std::string json_path;
  app.add_option("--shapes", shapes_arg, "name:NxK,... (out features x in features)");
  app.add_option("--rows", rows_arg, "row counts m");
  app.add_option("--heuristic", heuristic, "heuristic answers to time")->check(CLI::Range(1, 128));
  app.add_option("--vary", vary, "first answers whose split-K and reduction are varied")->check(CLI::Range(0, 128));
  app.add_option("--splits", splits_arg, "split-K counts to try");
  app.add_option("--reps", reps, "timed rounds per candidate (median kept)")->check(CLI::Range(1, 100));
  app.add_option("--json", json_path, "write every candidate's time here");
  CLI11_PARSE(app, argc, argv);
  const std::vector<Shape> shapes = parse_shapes(shapes_arg);
  const std::vector<int> rows = parse_ints(rows_arg);
  const std::vector<int> splits = parse_ints(splits_arg);

  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) die("no CUDA device");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double bw = copy_bandwidth();
  std::printf("%s, %d SMs, L2 %d MiB, copy bandwidth %.0f GB/s\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, bw / 1e9);

  cublasLtHandle_t lt = nullptr;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  const size_t workspace_bytes = size_t(32) << 20;  // GemmLt's default
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "stream");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");

  nlohmann::json report = nlohmann::json::array();
  std::mt19937 rng(1);
  for (const Shape& sh : shapes) {
    const size_t w_bytes = size_t(sh.n * sh.k) * 2;
    // Enough copies that the copies together are four times the L2: each call's weights come from memory.
    const int copies = int(std::max<size_t>(2, (size_t(4) * size_t(prop.l2CacheSize) + w_bytes - 1) / w_bytes));
    std::vector<uint16_t> host(size_t(sh.n * sh.k));
    for (auto& v : host) v = uint16_t(0x3c00 + (rng() & 0x3ff) - 0x200);  // bf16 values around 0.01..0.02
    char* w = nullptr;
    check(cudaMalloc(&w, w_bytes * size_t(copies)), "cudaMalloc weights");
    for (int c = 0; c < copies; ++c)
      check(cudaMemcpy(w + w_bytes * size_t(c), host.data(), w_bytes, cudaMemcpyHostToDevice), "copy weights");
    for (int m : rows) {
      std::vector<uint16_t> hx(size_t(m) * size_t(sh.k));
      for (auto& v : hx) v = uint16_t(0x3f80 + (rng() & 0x7f) - 0x40);
      void *x = nullptr, *out = nullptr;
      check(cudaMalloc(&x, hx.size() * 2), "cudaMalloc x");
      check(cudaMalloc(&out, size_t(m) * size_t(sh.n) * 2), "cudaMalloc out");
      check(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice), "copy x");

      cublasLtMatmulDesc_t op = nullptr;
      check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
      cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
      check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, uint64_t(sh.k), uint64_t(sh.n), sh.k), "layout a");
      check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, uint64_t(sh.k), uint64_t(m), sh.k), "layout b");
      check(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, uint64_t(sh.n), uint64_t(m), sh.n), "layout c");
      cublasLtMatmulPreference_t pref = nullptr;
      check(cublasLtMatmulPreferenceCreate(&pref), "pref");
      uint64_t ws = workspace_bytes;
      check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
            "pref ws");
      std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(heuristic));
      int found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, heuristic, results.data(), &found), "heuristic");

      std::vector<Candidate> cands;
      for (int i = 0; i < found; ++i) {
        if (results[size_t(i)].state != CUBLAS_STATUS_SUCCESS) continue;
        cands.push_back({results[size_t(i)].algo, "heuristic #" + std::to_string(i), results[size_t(i)].workspaceSize});
      }
      const size_t n_heuristic = cands.size();
      for (size_t i = 0; i < std::min<size_t>(n_heuristic, size_t(vary)); ++i) {
        const cublasLtMatmulAlgo_t base = cands[i].algo;
        if (cap<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) continue;
        const uint32_t schemes = cap<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
        for (int s : splits) {
          for (uint32_t r :
               {uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE), uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)}) {
            if ((s == 1) != (r == CUBLASLT_REDUCTION_SCHEME_NONE)) continue;
            if (r != CUBLASLT_REDUCTION_SCHEME_NONE && (schemes & r) == 0) continue;
            cublasLtMatmulAlgo_t v = base;
            int32_t split = s;
            if (cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split)) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &r, sizeof(r)) !=
                    CUBLAS_STATUS_SUCCESS)
              continue;
            if (std::memcmp(&v, &base, sizeof(v)) == 0) continue;
            cublasLtMatmulHeuristicResult_t chk{};
            if (cublasLtMatmulAlgoCheck(lt, op, a, b, c, c, &v, &chk) != CUBLAS_STATUS_SUCCESS ||
                chk.workspaceSize > workspace_bytes)
              continue;
            cands.push_back({v, cands[i].origin + ", splitK " + std::to_string(s) + " scheme " + std::to_string(r),
                             chk.workspaceSize});
          }
        }
      }

      const int calls = std::max(copies, 48);
      const float alpha = 1.0f, beta = 0.0f;
      auto launch = [&](const Candidate& cand, int i) {
        const void* wi = w + w_bytes * size_t(i % copies);
        return cublasLtMatmul(lt, op, &alpha, wi, a, x, b, &beta, out, c, out, c, &cand.algo, workspace,
                              workspace_bytes, stream);
      };
      for (Candidate& cand : cands) {
        bool ok = true;
        for (int i = 0; i < 2 && ok; ++i) ok = launch(cand, i) == CUBLAS_STATUS_SUCCESS;
        if (!ok || cudaStreamSynchronize(stream) != cudaSuccess) {
          cand.us = -1;
          (void)cudaGetLastError();
          continue;
        }
        std::vector<float> per_call;
        for (int r = 0; r < reps; ++r) {
          check(cudaEventRecord(e0, stream), "record");
          for (int i = 0; i < calls; ++i) check(launch(cand, i), "cublasLtMatmul");
          check(cudaEventRecord(e1, stream), "record");
          check(cudaEventSynchronize(e1), "sync");
          float t = 0;
          check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
          per_call.push_back(t * 1e3f / float(calls));
        }
        std::sort(per_call.begin(), per_call.end());
        cand.us = per_call[per_call.size() / 2];
      }

      const double floor_us = double(w_bytes + size_t(m) * size_t(sh.k) * 2 + size_t(m) * size_t(sh.n) * 2) / bw * 1e6;
      const Candidate* best = nullptr;
      for (const Candidate& cand : cands)
        if (cand.us > 0 && (best == nullptr || cand.us < best->us)) best = &cand;
      if (cands.empty() || best == nullptr) {
        std::printf("%-8s m %4d: no candidate ran\n", sh.name.c_str(), m);
      } else {
        const Candidate& first = cands.front();
        std::printf(
            "%-8s m %4d: floor %7.2f us | heuristic #0 %7.2f us (%.2fx) | best %7.2f us (%.2fx, %.3f of #0) "
            "of %zu: %s [%s, workspace %zu]\n",
            sh.name.c_str(), m, floor_us, first.us, first.us / floor_us, best->us, best->us / floor_us,
            best->us / first.us, cands.size(), best->origin.c_str(), describe(best->algo).c_str(), best->workspace);
        std::printf("           heuristic #0: %s\n", describe(first.algo).c_str());
      }
      std::fflush(stdout);
      nlohmann::json entry{{"shape", sh.name}, {"n", sh.n}, {"k", sh.k}, {"m", m}, {"floor_us", floor_us}};
      for (const Candidate& cand : cands)
        entry["candidates"].push_back({{"origin", cand.origin}, {"config", describe(cand.algo)}, {"us", cand.us}});
      report.push_back(entry);

      (void)cublasLtMatmulPreferenceDestroy(pref);
      (void)cublasLtMatrixLayoutDestroy(a);
      (void)cublasLtMatrixLayoutDestroy(b);
      (void)cublasLtMatrixLayoutDestroy(c);
      (void)cublasLtMatmulDescDestroy(op);
      (void)cudaFree(x);
      (void)cudaFree(out);
    }
    (void)cudaFree(w);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"gpu", prop.name}, {"copy_bandwidth_gbs", bw / 1e9}, {"problems", report}}.dump(1) << "\n";
  }
  return 0;
}
