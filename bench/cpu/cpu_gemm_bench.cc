// cpu_gemm_bench: the CPU backend's weight kernels against the machine's memory bandwidth.
//  (a) memory bandwidth: a read-only sum and a copy over 512 MiB, on 1 thread and on every thread
//      of the backend's pool (the floors below use the best read rate);
//  (b) batch-1 GEMV (Backend::gemm with one activation row) for every weight dtype at the default
//      model's shapes (SmolLM2-135M: qkv, o, gate_up, down, LM head; the 256-value formats only
//      where rows are whole blocks), through the backend (best kernels, its threads) and with each
//      kernel set on one thread: time per call, weight bytes / time, values decoded per nanosecond,
//      and the read floor (weight bytes / best read bandwidth) as a share of the time;
//  (c) the GEMV / decoded-tile crossover: time per call for m activation rows through the GEMV
//      kernels (ceil(m / 4) passes) and through decoded f32 tiles + sgemm, for q4_1 gate_up, with
//      the chosen kernel set on one thread.
// Prints tables; --json FILE also writes the figures. Never part of the test suite.
//
//   cpu_gemm_bench                      (everything, about a minute on 2 cores)
//   cpu_gemm_bench --dtypes q4_1,q4_k --reps 50 --json out.json
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_weight_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Shape {
  const char* name;
  int64_t n, k;
};
// SmolLM2-135M: hidden 576, 9 q heads and 3 kv heads of 64, intermediate 1536, vocab 49152.
constexpr Shape kShapes[] = {
    {"qkv", 960, 576}, {"o", 576, 576}, {"gate_up", 3072, 576}, {"down", 576, 1536}, {"lm_head", 49152, 576}};

const fg::DType kAllDtypes[] = {fg::DType::kF32,  fg::DType::kF16,  fg::DType::kBF16,
                                fg::DType::kQ8_0, fg::DType::kQ4_0, fg::DType::kQ4_1,
                                fg::DType::kQ4_K, fg::DType::kQ5_K, fg::DType::kQ6_K};

// Random stored bytes with finite f16 scales (the kernels' speed does not depend on the values,
// but NaNs would make the results meaningless).
std::vector<uint8_t> weight_bytes(fg::DType t, int64_t n, int64_t k) {
  std::vector<uint8_t> b(fg::dtype_bytes(t, n * k));
  std::mt19937 rng(uint32_t(n + k));
  for (uint8_t& x : b) x = uint8_t(rng() & 0x3b);  // clears the f16/bf16/f32 exponent's top bits
  return b;
}

// Every kernel set this CPU runs.
std::vector<const fg::cpu::WeightKernels*> kernel_sets() {
  std::vector<const fg::cpu::WeightKernels*> sets = {&fg::cpu::generic_weight_kernels()};
  if (fg::cpu::avx2_weight_kernels_supported()) sets.push_back(&fg::cpu::avx2_weight_kernels());
  if (fg::cpu::avx512_weight_kernels_supported()) sets.push_back(&fg::cpu::avx512_weight_kernels());
  return sets;
}

// Median seconds of `reps` calls of fn after one warm-up call.
template <class F>
double median_time(int reps, F&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto s = Clock::now();
    fn();
    t.push_back(since(s));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Bytes per second of a read-only sum and of a copy (read + write counted) over `bytes`, split
// over `threads` threads (each its own contiguous part), best of 5.
void bandwidth(size_t bytes, int threads, double& read_bps, double& copy_bps) {
  std::vector<uint64_t> src(bytes / 8, 1), dst(bytes / 8, 0);
  std::atomic<uint64_t> sink{0};
  auto run = [&](bool copy) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto s = Clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          const size_t n = src.size(), b = n * size_t(t) / size_t(threads), e = n * size_t(t + 1) / size_t(threads);
          if (copy) {
            std::memcpy(&dst[b], &src[b], (e - b) * 8);
          } else {
            uint64_t acc[4] = {0, 0, 0, 0};
            for (size_t i = b; i + 4 <= e; i += 4)
              for (int l = 0; l < 4; ++l) acc[l] += src[i + size_t(l)];
            sink.fetch_add(acc[0] + acc[1] + acc[2] + acc[3]);
          }
        });
      for (std::thread& th : ts) th.join();
      best = std::min(best, since(s));
    }
    return best;
  };
  read_bps = double(bytes) / run(false);
  copy_bps = 2.0 * double(bytes) / run(true);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtypes_arg, json_path;
  int reps = 20;
  bool skip_bandwidth = false;
  CLI::App app{"cpu_gemm_bench: the CPU weight kernels against the memory bandwidth"};
  app.add_option("--dtypes", dtypes_arg, "comma-separated weight dtypes (default: all)");
  app.add_option("--reps", reps, "timed calls per figure (median)");
  app.add_flag("--skip-bandwidth", skip_bandwidth, "skip (a)");
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  std::vector<fg::DType> dtypes;
  for (fg::DType t : kAllDtypes)
    if (dtypes_arg.empty() ||
        ("," + dtypes_arg + ",").find("," + std::string(fg::dtype_name(t)) + ",") != std::string::npos)
      dtypes.push_back(t);
  const int threads = fg::cpu::default_cpu_threads();
  nlohmann::json out;
  out["threads"] = threads;
  std::printf("cpu_gemm_bench: %d threads (FG_CPU_THREADS), kernels %s\n", threads, fg::cpu::weight_kernels().name);

  double best_read = 0.0;
  if (!skip_bandwidth) {
    std::printf("\n(a) memory bandwidth, 512 MiB, best of 5\n  threads   read GB/s   copy GB/s (read + write)\n");
    for (int t : {1, threads}) {
      double r, c;
      bandwidth(size_t(512) << 20, t, r, c);
      best_read = std::max(best_read, r);
      std::printf("  %7d %11.1f %11.1f\n", t, r / 1e9, c / 1e9);
      out["bandwidth"].push_back({{"threads", t}, {"read_gbps", r / 1e9}, {"copy_gbps", c / 1e9}});
      if (t == threads) break;
    }
  }

  std::unique_ptr<fg::Backend> be = fg::make_cpu_backend();
  std::printf("\n(b) batch-1 gemm (m = 1), median of %d\n", reps);
  std::printf("  %-6s %-8s %9s %9s %10s %10s %9s\n", "dtype", "shape", "kernels", "us/call", "GB/s", "values/ns",
              "% floor");
  for (fg::DType t : dtypes) {
    for (const Shape& s : kShapes) {
      if (s.k % fg::dtype_block_size(t) != 0) continue;  // rows of 576 are no whole 256-value blocks
      std::vector<uint8_t> w = weight_bytes(t, s.n, s.k);
      std::vector<float> x(size_t(s.k), 0.5f), y(size_t(s.n));
      fg::Tensor wt = fg::Tensor::contiguous(w.data(), t, fg::Device::kCpu, {s.n, s.k});
      fg::Tensor xt = fg::Tensor::contiguous(x.data(), fg::DType::kF32, fg::Device::kCpu, {1, s.k});
      fg::Tensor yt = fg::Tensor::contiguous(y.data(), fg::DType::kF32, fg::Device::kCpu, {1, s.n});
      const double sec = median_time(reps, [&] { be->gemm(xt, wt, nullptr, yt); });
      // The chosen kernels through the backend (its pool), then every set on one thread.
      const fg::cpu::WeightRows rows{w.data(), int64_t(fg::dtype_bytes(t, s.k)), s.k, t};
      fg::cpu::GemvArgs ga;
      ga.x = x.data();
      ga.ldx = s.k;
      ga.out = y.data();
      ga.ldo = s.n;
      ga.m = 1;
      std::vector<std::pair<std::string, double>> figures = {{"backend", sec}};
      for (const fg::cpu::WeightKernels* set : kernel_sets()) {
        const int r = set == &fg::cpu::generic_weight_kernels() ? std::max(3, reps / 4) : reps;
        figures.emplace_back(std::string(set->name) + "/1", median_time(r, [&] { set->gemv(rows, 0, s.n, ga); }));
      }
      const double floor = best_read > 0 ? double(w.size()) / best_read : 0.0;
      for (const auto& [name, secs] : figures) {
        std::printf("  %-6s %-8s %9s %9.1f %10.2f %10.2f %8.0f%%\n", std::string(fg::dtype_name(t)).c_str(), s.name,
                    name.c_str(), secs * 1e6, double(w.size()) / secs / 1e9, double(s.n * s.k) / secs / 1e9,
                    floor > 0 ? 100.0 * floor / secs : 0.0);
        out["gemv"].push_back({{"dtype", fg::dtype_name(t)},
                               {"shape", s.name},
                               {"kernels", name},
                               {"us", secs * 1e6},
                               {"weight_gbps", double(w.size()) / secs / 1e9}});
      }
    }
  }

  // (c) one decoded-tile pass vs GEMV passes, single thread, q4_1 gate_up.
  {
    const Shape s = kShapes[2];
    const fg::DType t = fg::DType::kQ4_1;
    std::vector<uint8_t> w = weight_bytes(t, s.n, s.k);
    const fg::cpu::WeightRows rows{w.data(), int64_t(fg::dtype_bytes(t, s.k)), s.k, t};
    const fg::cpu::WeightKernels& kern = fg::cpu::weight_kernels();
    std::printf("\n(c) q4_1 gate_up [%lld, %lld], one thread: GEMV passes vs decoded tiles + sgemm\n",
                static_cast<long long>(s.n), static_cast<long long>(s.k));
    std::printf("  %4s %12s %12s\n", "m", "GEMV us", "tiles us");
    openblas_set_num_threads(1);
    const int64_t tile = std::max<int64_t>(8, (int64_t(1) << 16) / s.k) / 8 * 8;
    std::vector<float> scratch(size_t(tile * s.k));
    for (int64_t m : {1, 2, 4, 8, 12, 16, 32, 64}) {
      std::vector<float> x(size_t(m * s.k), 0.5f), y(size_t(m * s.n));
      const double gemv = median_time(reps, [&] {
        for (int64_t r0 = 0; r0 < m; r0 += fg::cpu::kGemvMaxRows) {
          fg::cpu::GemvArgs ga;
          ga.x = x.data() + r0 * s.k;
          ga.ldx = s.k;
          ga.out = y.data() + r0 * s.n;
          ga.ldo = s.n;
          ga.m = int(std::min<int64_t>(fg::cpu::kGemvMaxRows, m - r0));
          kern.gemv(rows, 0, s.n, ga);
        }
      });
      const double tiles = median_time(reps, [&] {
        for (int64_t j0 = 0; j0 < s.n; j0 += tile) {
          const int64_t cols = std::min(tile, s.n - j0);
          for (int64_t j = 0; j < cols; ++j) kern.decode_row(rows, j0 + j, scratch.data() + j * s.k);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(cols), int(s.k), 1.0f, x.data(), int(s.k),
                      scratch.data(), int(s.k), 0.0f, y.data() + j0, int(s.n));
        }
      });
      std::printf("  %4lld %12.1f %12.1f\n", static_cast<long long>(m), gemv * 1e6, tiles * 1e6);
      out["crossover"].push_back({{"m", m}, {"gemv_us", gemv * 1e6}, {"tiles_us", tiles * 1e6}});
    }
  }

  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
