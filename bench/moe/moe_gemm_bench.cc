// moe_gemm_bench: the grouped expert GEMM against the dense GEMM ceiling.
//
// For each model shape and step size T (tokens), the step's T * top_k assignments are routed from
// uniform random router logits (Backend::moe_route), then timed:
//   grouped  Backend::moe_gemm for the gate/up projection (token rows gathered in place) and for the
//            down projection, one call each, over the assignments sorted by expert;
//   dense    Backend::gemm of the same weight bytes and FLOPs: x [ceil(A / hit), k] @ w[hit * n, k]^T,
//            where hit is the number of distinct experts the routing chose: what one GEMM reaches
//            when it reads the same weights once and does the same work (memory-bound at 1 and 32
//            tokens, compute-bound at 4,096), i.e. the ceiling of a grouped GEMM.
// Reported per projection: time, weight+activation bytes moved per second, TFLOP/s, and the grouped
// time as a share of the dense one. Prints a table; --json FILE also writes it.
//
//   moe_gemm_bench --backend cuda [--tokens 1,32,4096] [--reps 20] [--json out.json]
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

struct Shape {
  const char* name;
  int experts, top_k;
  int64_t hidden, inter;
};

// From the public model cards (bench/configs/mixtral-8x7b, qwen3-30b-a3b).
constexpr Shape kShapes[] = {
    {"mixtral-8x7b", 8, 2, 4096, 14336},
    {"qwen3-30b-a3b", 128, 8, 2048, 768},
};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "moe_gemm_bench: %s\n", m.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "auto", json_path, tokens_arg = "1,32,4096";
  int reps = 20;
  CLI::App app{"moe_gemm_bench: the grouped expert GEMM against the dense GEMM ceiling"};
  app.add_option("--backend", backend_name, "cpu, cuda or auto");
  app.add_option("--tokens", tokens_arg, "comma-separated step sizes in tokens");
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> token_counts;
  for (size_t p = 0; p < tokens_arg.size();) {
    size_t q = tokens_arg.find(',', p);
    if (q == std::string::npos) q = tokens_arg.size();
    token_counts.push_back(std::stoi(tokens_arg.substr(p, q - p)));
    p = q + 1;
  }

  auto made = fg::make_backend(backend_name);
  if (!made.is_ok()) die(made.status().to_string());
  fg::Backend& be = **made;
  const fg::DType act = be.act_dtype();
  const size_t es = fg::dtype_size(act);
  std::printf("moe_gemm_bench on %s, median of %d\n", be.name().c_str(), reps);
  std::printf("%-14s %6s %6s %4s %-8s | %9s %8s %8s | %9s %8s %8s | %7s\n", "shape", "tokens", "assign", "hit", "proj",
              "grouped", "GB/s", "TFLOP/s", "dense", "GB/s", "TFLOP/s", "ratio");
  nlohmann::json out = nlohmann::json::array();
  for (const Shape& s : kShapes) {
    const int E = s.experts, K = s.top_k;
    // One layer's experts: gate|up [E, 2I, H] and down [E, H, I].
    fg::Buffer gate_up_w = be.alloc(size_t(E) * size_t(2 * s.inter) * size_t(s.hidden) * es);
    fg::Buffer down_w = be.alloc(size_t(E) * size_t(s.hidden) * size_t(s.inter) * es);
    fg::Tensor gu_w = tensor(gate_up_w, act, {E, 2 * s.inter, s.hidden});
    fg::Tensor dn_w = tensor(down_w, act, {E, s.hidden, s.inter});
    be.fill_uniform(gu_w, -0.02f, 0.02f, 1);
    be.fill_uniform(dn_w, -0.02f, 0.02f, 2);
    for (int T : token_counts) {
      const int64_t A = int64_t(T) * K;
      fg::Buffer x_b = be.alloc(size_t(T) * size_t(s.hidden) * es);
      fg::Buffer logits_b = be.alloc(size_t(T) * size_t(E) * 4);
      fg::Buffer meta_b = be.alloc(size_t(4) * size_t(2 * A + E + 1 + 2 * A));
      fg::Buffer gu_b = be.alloc(size_t(A) * size_t(2 * s.inter) * es);
      fg::Buffer act_b = be.alloc(size_t(A) * size_t(s.inter) * es);
      fg::Buffer y_b = be.alloc(size_t(A) * size_t(s.hidden) * es);
      fg::Tensor x = tensor(x_b, act, {T, s.hidden});
      fg::Tensor logits = tensor(logits_b, fg::DType::kF32, {T, E});
      be.fill_uniform(x, -1.0f, 1.0f, 3);
      be.fill_uniform(logits, -1.0f, 1.0f, uint64_t(4 + T));
      fg::MoeRouting r;
      r.num_tokens = T;
      r.num_experts = E;
      r.top_k = K;
      auto* base = static_cast<char*>(meta_b.data());
      auto view = [&](size_t& off, fg::DType dt, std::initializer_list<int64_t> shape) {
        fg::Tensor t = fg::Tensor::contiguous(base + off, dt, be.device(), shape);
        off += t.nbytes();
        return t;
      };
      size_t off = 0;
      r.topk_ids = view(off, fg::DType::kI32, {T, K});
      r.topk_weights = view(off, fg::DType::kF32, {T, K});
      r.expert_offsets = view(off, fg::DType::kI32, {E + 1});
      r.sorted_assign = view(off, fg::DType::kI32, {A});
      r.assign_row = view(off, fg::DType::kI32, {A});
      be.moe_route(logits, true, r);
      std::vector<int32_t> offsets(size_t(E) + 1);
      be.copy_to_host(offsets.data(), r.expert_offsets.data, offsets.size() * 4);
      be.synchronize();
      int hit = 0;
      for (int e = 0; e < E; ++e) hit += offsets[size_t(e) + 1] > offsets[size_t(e)] ? 1 : 0;
      fg::Tensor gu = tensor(gu_b, act, {A, 2 * s.inter});
      fg::Tensor xa = tensor(act_b, act, {A, s.inter});
      fg::Tensor y = tensor(y_b, act, {A, s.hidden});
      be.silu_mul(gu, xa);

      struct Proj {
        const char* name;
        int64_t n, k;
      };
      for (const Proj& p : {Proj{"gate_up", 2 * s.inter, s.hidden}, Proj{"down", s.hidden, s.inter}}) {
        const bool first = std::string(p.name) == "gate_up";
        const double grouped = time_median(be, reps, [&] {
          if (first)
            be.moe_gemm(x, gu_w, r, true, gu);
          else
            be.moe_gemm(xa, dn_w, r, false, y);
        });
        // The dense GEMM of the same weight bytes and FLOPs.
        const int64_t m = (A + hit - 1) / hit, n = int64_t(hit) * p.n;
        fg::Buffer dx_b = be.alloc(size_t(m) * size_t(p.k) * es);
        fg::Buffer dw_b = be.alloc(size_t(n) * size_t(p.k) * es);
        fg::Buffer dout_b = be.alloc(size_t(m) * size_t(n) * es);
        fg::Tensor dx = tensor(dx_b, act, {m, p.k}), dw = tensor(dw_b, act, {n, p.k}),
                   dout = tensor(dout_b, act, {m, n});
        be.fill_uniform(dx, -1.0f, 1.0f, 5);
        be.fill_uniform(dw, -0.02f, 0.02f, 6);
        const double dense = time_median(be, reps, [&] { be.gemm(dx, dw, nullptr, dout); });
        const double weight_bytes = double(hit) * double(p.n) * double(p.k) * double(es);
        const double act_bytes = double(A) * double(p.k + p.n) * double(es);
        const double flops = 2.0 * double(A) * double(p.n) * double(p.k);
        const double dense_bytes = double(n) * double(p.k) * double(es) + double(m) * double(p.k + n) * double(es);
        std::printf("%-14s %6d %6lld %4d %-8s | %7.3fms %8.0f %8.1f | %7.3fms %8.0f %8.1f | %6.1f%%\n", s.name, T,
                    static_cast<long long>(A), hit, p.name, 1e3 * grouped, (weight_bytes + act_bytes) / grouped / 1e9,
                    flops / grouped / 1e12, 1e3 * dense, dense_bytes / dense / 1e9, flops / dense / 1e12,
                    100.0 * dense / grouped);
        out.push_back({{"shape", s.name},
                       {"tokens", T},
                       {"assignments", A},
                       {"experts_hit", hit},
                       {"projection", p.name},
                       {"grouped_ms", 1e3 * grouped},
                       {"grouped_gbps", (weight_bytes + act_bytes) / grouped / 1e9},
                       {"grouped_tflops", flops / grouped / 1e12},
                       {"dense_ms", 1e3 * dense},
                       {"dense_gbps", dense_bytes / dense / 1e9},
                       {"dense_tflops", flops / dense / 1e12}});
      }
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
