// gemm_fp8_bench: FP8 (e4m3) GEMMs with per-token activation and per-channel weight scales, and
// with the fine-grained format's 128-blocks, against bf16 GEMMs, at Llama-3.1-8B's projection shapes.
//
// For each projection (qkv, o, gate_up, down) and step size T (tokens), timed:
//   bf16   Backend::gemm, x [T, k] bf16 @ w [n, k] bf16;
//   fp8    Backend::gemm_fp8 on e4m3 x and w (the weights quantized per output channel once), and
//          quant: Backend::quantize_rows_fp8 of x, the per-token quantization every FP8 GEMM needs
//          before it (reported apart: the model fuses it into the preceding kernel later);
//   blk    the same codes with 128-block scales (x: per token and 128 columns, w: per 128 x 128
//          block), and q128: the per-(token, 128 columns) quantization before it.
// The ceilings are measured in the same run: a square M = N = K = --ceiling GEMM of each kind
// (compute-bound: the tensor-core rate this GPU reaches through the same path). Small T is
// memory-bound: the figure to read there is GB/s of weights + activations against the GPU's
// bandwidth, where FP8 weights halve the bytes. Those rows are timed as a step runs them: calls
// issued back to back (no host round trip between them) over enough weight copies that each call
// reads its weights from memory, not from the L2. Prints a table; --json FILE also writes it.
//
//   gemm_fp8_bench --backend cuda [--tokens 1,32,256,4096] [--reps 20] [--ceiling 8192] [--json out.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench_timing.h"

namespace {

using fg::bench::tensor;
using fg::bench::time_median;

struct Proj {
  const char* name;
  int64_t n, k;
};

// Llama-3.1-8B (bench/configs/llama-3.1-8b): hidden 4096, 32 q / 8 kv heads of 128, intermediate 14336.
constexpr Proj kProjs[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "gemm_fp8_bench: %s\n", m.c_str());
  std::exit(1);
}

// One GEMM problem's operands in both forms: bf16 x and w, and their e4m3 codes with scales. The
// weights come in `copies` copies that the timed calls rotate through, so that a small matrix is
// read from memory, as a decode step reads it, and not from the 50 MB L2 left warm by the call before.
struct Operands {
  fg::Buffer x_b, w_b, xq_b, xs_b, wq_b, ws_b, out_b, xsb_b, wsb_b;
  fg::Tensor x, xq, xs, out, xsb;          // xsb: [ceil(k / 128), m] group scales
  std::vector<fg::Tensor> w, wq, ws, wsb;  // wsb: [ceil(n / 128), ceil(k / 128)] block scales

  Operands(fg::Backend& be, int64_t m, int64_t n, int64_t k, int64_t copies = 1) {
    const fg::DType act = be.act_dtype();
    const size_t es = fg::dtype_size(act);
    x_b = be.alloc(size_t(m * k) * es);
    w_b = be.alloc(size_t(copies * n * k) * es);
    xq_b = be.alloc(size_t(m * k));
    xs_b = be.alloc(size_t(m) * 4);
    wq_b = be.alloc(size_t(copies * n * k));
    ws_b = be.alloc(size_t(copies * n) * 4);
    out_b = be.alloc(size_t(m * n) * es);
    x = tensor(x_b, act, {m, k});
    xq = tensor(xq_b, fg::DType::kF8E4M3, {m, k});
    xs = tensor(xs_b, fg::DType::kF32, {m});
    out = tensor(out_b, act, {m, n});
    fg::Tensor w_all = tensor(w_b, act, {copies * n, k});
    fg::Tensor wq_all = tensor(wq_b, fg::DType::kF8E4M3, {copies * n, k});
    fg::Tensor ws_all = tensor(ws_b, fg::DType::kF32, {copies * n});
    be.fill_uniform(x, -1.0f, 1.0f, uint64_t(m * 7 + n));
    be.fill_uniform(w_all, -0.02f, 0.02f, uint64_t(n * 13 + k));
    be.quantize_rows_fp8(w_all, wq_all, ws_all);  // per output channel, as --quantization fp8 does
    be.quantize_rows_fp8(x, xq, xs);
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128, stride = fg::fp8_block_scale_stride(k);
    xsb_b = be.alloc(size_t(kb * m) * 4);
    wsb_b = be.alloc(size_t(copies * nb * stride) * 4);
    xsb = tensor(xsb_b, fg::DType::kF32, {kb, m});
    fg::Tensor wsb_all = tensor(wsb_b, fg::DType::kF32, {copies * nb * stride});
    be.fill_uniform(wsb_all, 1e-4f, 1e-3f, uint64_t(n * 17 + k));
    be.synchronize();
    for (int64_t c = 0; c < copies; ++c) {
      auto* wp = static_cast<char*>(w_b.data()) + size_t(c * n * k) * es;
      auto* qp = static_cast<char*>(wq_b.data()) + size_t(c * n * k);
      auto* sp = static_cast<char*>(ws_b.data()) + size_t(c * n) * 4;
      w.push_back(fg::Tensor::contiguous(wp, act, w_b.device(), {n, k}));
      wq.push_back(fg::Tensor::contiguous(qp, fg::DType::kF8E4M3, w_b.device(), {n, k}));
      ws.push_back(fg::Tensor::contiguous(sp, fg::DType::kF32, w_b.device(), {n}));
      fg::Tensor b = fg::Tensor::contiguous(static_cast<char*>(wsb_b.data()) + size_t(c * nb * stride) * 4,
                                            fg::DType::kF32, w_b.device(), {nb, kb});
      b.stride[0] = stride;
      wsb.push_back(b);
    }
  }
};

// Seconds per call of fn(i) issued back to back (i cycling over the weight copies), as a step's
// launches run: the median over 5 trials of `reps` calls between two synchronizations.
template <class F>
double time_stream(fg::Backend& be, int reps, int64_t copies, F&& fn) {
  using Clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < copies + 2; ++i) fn(i % copies);
  be.synchronize();
  std::vector<double> t;
  for (int trial = 0; trial < 5; ++trial) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) fn(i % copies);
    be.synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "auto", json_path, tokens_arg = "1,32,256,4096";
  int reps = 20;
  int64_t ceiling = 8192;
  CLI::App app{"gemm_fp8_bench: FP8 GEMMs against bf16 GEMMs and their measured ceilings"};
  app.add_option("--backend", backend_name, "cpu, cuda or auto");
  app.add_option("--tokens", tokens_arg, "comma-separated step sizes in tokens");
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  app.add_option("--ceiling", ceiling, "M = N = K of the square GEMMs that measure the ceilings (0: skip)");
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> token_counts;
  for (size_t p = 0; p < tokens_arg.size();) {
    size_t q = tokens_arg.find(',', p);
    if (q == std::string::npos) q = tokens_arg.size();
    token_counts.push_back(std::stoll(tokens_arg.substr(p, q - p)));
    p = q + 1;
  }

  auto made = fg::make_backend(backend_name);
  if (!made.is_ok()) die(made.status().to_string());
  fg::Backend& be = **made;
  if (!be.supports_fp8_gemm()) die(be.name() + " has no FP8 GEMM");
  const double es = double(fg::dtype_size(be.act_dtype()));
  std::printf(
      "gemm_fp8_bench on %s; ceilings: median of %d synchronized calls; rows: per call of %d issued back to back "
      "over weight copies (cold L2), median of 5\n",
      be.name().c_str(), reps, reps);
  nlohmann::json out;

  double bf16_ceiling = 0.0, fp8_ceiling = 0.0;
  if (ceiling > 0) {
    Operands o(be, ceiling, ceiling, ceiling);
    const double flops = 2.0 * double(ceiling) * double(ceiling) * double(ceiling);
    bf16_ceiling = flops / time_median(be, reps, [&] { be.gemm(o.x, o.w[0], nullptr, o.out); }) / 1e12;
    fp8_ceiling = flops / time_median(be, reps, [&] { be.gemm_fp8(o.xq, o.xs, o.wq[0], o.ws[0], o.out); }) / 1e12;
    const double block_ceiling =
        flops / time_median(be, reps, [&] { be.gemm_fp8(o.xq, o.xsb, o.wq[0], o.wsb[0], o.out); }) / 1e12;
    std::printf("ceilings (%lld^3): bf16 %.1f TFLOP/s, fp8 %.1f TFLOP/s, fp8 128-blocks %.1f TFLOP/s\n",
                static_cast<long long>(ceiling), bf16_ceiling, fp8_ceiling, block_ceiling);
    out["ceiling"] = {{"size", ceiling},
                      {"bf16_tflops", bf16_ceiling},
                      {"fp8_tflops", fp8_ceiling},
                      {"fp8_block_tflops", block_ceiling}};
  }
  std::printf("%-8s %6s | %9s %7s %7s | %9s %7s %7s %6s | %8s | %6s | %9s %7s %8s\n", "proj", "tokens", "bf16", "GB/s",
              "TFLOP/s", "fp8", "GB/s", "TFLOP/s", "%ceil", "quant", "speedup", "blk", "GB/s", "q128");
  nlohmann::json rows = nlohmann::json::array();
  for (const Proj& p : kProjs) {
    for (int64_t T : token_counts) {
      // Enough copies that the rotation reads 3x the L2's 50 MB of bf16 weights per cycle.
      const int64_t copies = std::max<int64_t>(1, (150 * int64_t(1) << 20) / (p.n * p.k * int64_t(es)) + 1);
      Operands o(be, T, p.n, p.k, copies);
      const double bf16 = time_stream(be, reps, copies, [&](int64_t c) { be.gemm(o.x, o.w[c], nullptr, o.out); });
      const double fp8 =
          time_stream(be, reps, copies, [&](int64_t c) { be.gemm_fp8(o.xq, o.xs, o.wq[c], o.ws[c], o.out); });
      const double quant = time_stream(be, reps, 1, [&](int64_t) { be.quantize_rows_fp8(o.x, o.xq, o.xs); });
      const double blk =
          time_stream(be, reps, copies, [&](int64_t c) { be.gemm_fp8(o.xq, o.xsb, o.wq[c], o.wsb[c], o.out); });
      const double quant128 = time_stream(be, reps, 1, [&](int64_t) { be.quantize_rows_fp8(o.x, o.xq, o.xsb); });
      const double flops = 2.0 * double(T) * double(p.n) * double(p.k);
      const double bf16_bytes = (double(p.n) * double(p.k) + double(T) * double(p.k + p.n)) * es;
      const double fp8_bytes =
          double(p.n) * double(p.k) + double(T) * double(p.k) + double(T) * double(p.n) * es + 4.0 * double(T + p.n);
      const double fp8_tflops = flops / fp8 / 1e12;
      std::printf(
          "%-8s %6lld | %7.3fms %7.0f %7.1f | %7.3fms %7.0f %7.1f %5.1f%% | %6.3fms | %5.2fx | %7.3fms %7.0f %6.3fms\n",
          p.name, static_cast<long long>(T), 1e3 * bf16, bf16_bytes / bf16 / 1e9, flops / bf16 / 1e12, 1e3 * fp8,
          fp8_bytes / fp8 / 1e9, fp8_tflops, fp8_ceiling > 0 ? 100.0 * fp8_tflops / fp8_ceiling : 0.0, 1e3 * quant,
          bf16 / fp8, 1e3 * blk, fp8_bytes / blk / 1e9, 1e3 * quant128);
      rows.push_back({{"projection", p.name},
                      {"n", p.n},
                      {"k", p.k},
                      {"tokens", T},
                      {"bf16_ms", 1e3 * bf16},
                      {"bf16_gbps", bf16_bytes / bf16 / 1e9},
                      {"bf16_tflops", flops / bf16 / 1e12},
                      {"fp8_ms", 1e3 * fp8},
                      {"fp8_gbps", fp8_bytes / fp8 / 1e9},
                      {"fp8_tflops", fp8_tflops},
                      {"quant_ms", 1e3 * quant},
                      {"block_ms", 1e3 * blk},
                      {"block_gbps", fp8_bytes / blk / 1e9},
                      {"quant128_ms", 1e3 * quant128}});
    }
  }
  out["rows"] = rows;
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
