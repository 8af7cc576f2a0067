// tp_bench: what tensor parallelism's collectives cost per decode step, against the bandwidth the
// same communicators reach on large buffers, in one run.
//  (a) bus bandwidth: all-reduce of --bus-bytes (default 256 MiB) bf16, timed over reps; algbw =
//      bytes / time, busbw = algbw * 2 (N - 1) / N (the convention of NCCL's own tests);
//  (b) per step: a decode step of a model (--config: hidden size, layers) all-reduces 2 * layers + 1
//      tensors of [batch, hidden] act (embedding, o_proj and down_proj of every layer). For each
//      batch: time per all-reduce, time per step, and the time busbw alone would predict (the
//      latency-bound gap is what a fused all-reduce + residual + norm would have to win).
// Each rank runs on its own thread with its own backend (CUDA: GPUs 0..N-1 with NCCL; CPU: the
// in-process communicator). NCCL_NVLS_ENABLE=0 is set unless given.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "model/config.h"
#include "model/gguf_model.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "tp_bench: %s\n", msg.c_str());
  std::exit(1);
}

struct Ranks {
  std::vector<std::unique_ptr<fg::Backend>> backends;
  std::vector<std::unique_ptr<fg::Communicator>> comms;
};

// Seconds per all-reduce of `numel` act elements, over `reps` calls after 3 warm-up calls; every
// rank times its own calls and the slowest rank counts.
double time_all_reduce(Ranks& r, int64_t numel, int reps) {
  const int n = int(r.backends.size());
  std::vector<double> secs(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      fg::Backend& be = *r.backends[size_t(i)];
      be.bind_thread();
      const fg::DType act = be.act_dtype();
      fg::Buffer buf = be.alloc(fg::dtype_bytes(act, numel));
      fg::Tensor t = fg::Tensor::contiguous(buf.data(), act, be.device(), {numel});
      be.fill_uniform(t, -1.0f, 1.0f, uint64_t(i));
      fg::Communicator& c = *r.comms[size_t(i)];
      for (int k = 0; k < 3; ++k) c.all_reduce_sum(t);
      c.barrier();
      const auto t0 = Clock::now();
      for (int k = 0; k < reps; ++k) c.all_reduce_sum(t);
      be.synchronize();
      secs[size_t(i)] = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
      c.barrier();
    });
  for (auto& t : threads) t.join();
  return *std::max_element(secs.begin(), secs.end());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_bench: all-reduce per decode step vs the communicator's bus bandwidth"};
  std::string config_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.1-70b";
  std::string backend = "cuda", json_path;
  int n = 2;
  int64_t bus_bytes = int64_t(256) << 20;
  std::vector<int> batches = {1, 8, 32, 128, 256};
  app.add_option("--config", config_dir, "model config (hidden size, layers) (llama-3.1-70b)");
  app.add_option("--backend", backend, "cuda (NCCL) or cpu (the in-process communicator)");
  app.add_option("--tensor-parallel-size", n, "ranks (2)");
  app.add_option("--bus-bytes", bus_bytes, "buffer of the bus-bandwidth measurement (256 MiB)");
  app.add_option("--batches", batches, "decode batch sizes")->delimiter(',');
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  auto cfg = fg::load_any_model_config(config_dir);
  if (!cfg.is_ok()) die(cfg.status().message());
  Ranks r;
  for (int i = 0; i < n; ++i) {
    if (backend == "cpu") {
      r.backends.push_back(fg::make_cpu_backend());
      continue;
    }
    auto b = fg::make_cuda_backend(i);
    if (!b.is_ok()) die("--tensor-parallel-size " + std::to_string(n) + ": " + b.status().message());
    r.backends.push_back(std::move(b).value());
  }
  if (backend == "cpu") {
    r.comms = fg::make_local_communicators(n);
  } else {
    std::vector<fg::Backend*> all;
    for (auto& b : r.backends) all.push_back(b.get());
    auto comms = fg::make_nccl_communicators(all);
    if (!comms.is_ok()) die(comms.status().message());
    r.comms = std::move(comms).value();
  }
  const fg::DType act = r.backends[0]->act_dtype();
  const size_t es = fg::dtype_size(act);
  const double factor = 2.0 * (n - 1) / n;

  const int64_t bus_numel = bus_bytes / int64_t(es);
  const double bus_s = time_all_reduce(r, bus_numel, 20);
  const double algbw = double(bus_numel * int64_t(es)) / bus_s, busbw = algbw * factor;
  std::printf("tp_bench: %d ranks on %s (%s), %s: hidden %lld, %d layers\n", n, r.backends[0]->name().c_str(),
              r.comms[0]->name().c_str(), config_dir.c_str(), (long long)cfg->hidden_size, cfg->num_layers);
  std::printf("(a) all-reduce of %.0f MiB: %.3f ms, algbw %.1f GB/s, busbw %.1f GB/s\n", double(bus_bytes) / (1 << 20),
              1e3 * bus_s, algbw / 1e9, busbw / 1e9);
  nlohmann::json out;
  out["ranks"] = n;
  out["backend"] = r.backends[0]->name();
  out["config"] = config_dir;
  out["bus"] = {{"bytes", bus_bytes}, {"ms", 1e3 * bus_s}, {"algbw_gbps", algbw / 1e9}, {"busbw_gbps", busbw / 1e9}};
  const int per_step = 2 * cfg->num_layers + 1;
  std::printf("(b) per decode step: %d all-reduces of [batch, %lld] %s\n", per_step, (long long)cfg->hidden_size,
              std::string(fg::dtype_name(act)).c_str());
  std::printf("  %6s %14s %14s %16s %8s\n", "batch", "per call us", "per step ms", "busbw-bound ms", "ratio");
  for (int b : batches) {
    const int64_t numel = int64_t(b) * cfg->hidden_size;
    const double call = time_all_reduce(r, numel, 200);
    const double step = call * per_step;
    const double bound = per_step * double(numel * int64_t(es)) * factor / busbw;
    std::printf("  %6d %14.2f %14.3f %16.4f %8.1f\n", b, 1e6 * call, 1e3 * step, 1e3 * bound, step / bound);
    out["steps"].push_back(
        {{"batch", b}, {"call_us", 1e6 * call}, {"step_ms", 1e3 * step}, {"busbw_bound_ms", 1e3 * bound}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
