// sample_bench: Backend::sample, the sampling rule on the device, per call: rows of Llama 3's
// vocabulary shaped like a language model's (a few dozen logits 8-14 above a N(0, 2) bulk), or
// broad (N(0, 3)), or flat (every logit equal: the descents narrow only on the ids), at batch 1
// and 32 under the usual settings. Each figure is the median over reps of a batch of 20 calls
// issued back to back (the settings' upload included, as the engine issues them), per call.
//
//   sample_bench [--backend cuda] [--vocab 128256] [--batches 1,32] [--reps 15] [--json out.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "sample_bench: %s\n", msg.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "cuda", json_path;
  std::vector<int> batches = {1, 32};
  int64_t vocab = 128256;
  int reps = 15;
  CLI::App app{"sample_bench: Backend::sample per call"};
  app.add_option("--backend", backend_name, "cuda, cpu or auto");
  app.add_option("--vocab", vocab, "logits per row")->check(CLI::Range(int64_t(64), int64_t(1) << 22));
  app.add_option("--batches", batches, "rows per call, comma separated")->delimiter(',');
  app.add_option("--reps", reps, "timed batches of 20 calls")->check(CLI::Range(1, 1000));
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (batches.empty()) die("--batches: at least one batch size");
  const int max_rows = *std::max_element(batches.begin(), batches.end());
  const int min_rows = *std::min_element(batches.begin(), batches.end());
  if (min_rows < 1 || max_rows > 4096) die("--batches: 1..4096 rows");

  auto made = fg::make_backend(backend_name);
  if (!made.is_ok()) die(made.status().to_string());
  fg::Backend& be = **made;

  struct Shape {
    const char* name;
    std::vector<float> row;
  };
  std::mt19937 rng(1);
  std::vector<Shape> shapes = {{"peaked", {}}, {"broad", {}}, {"flat", {}}};
  {
    std::normal_distribution<float> bulk(0.0f, 2.0f), wide(0.0f, 3.0f);
    std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
    std::uniform_real_distribution<float> high(8.0f, 14.0f);
    for (int64_t i = 0; i < vocab; ++i) {
      shapes[0].row.push_back(bulk(rng));
      shapes[1].row.push_back(wide(rng));
      shapes[2].row.push_back(0.25f);
    }
    for (int i = 0; i < 40; ++i) shapes[0].row[size_t(pick(rng))] = high(rng);
  }
  struct Setting {
    const char* name;
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const Setting settings[] = {{"greedy", 0.0f, 0, 1.0f, 0.0f},
                              {"temperature 1", 1.0f, 0, 1.0f, 0.0f},
                              {"temperature 1, top_p 0.9", 1.0f, 0, 0.9f, 0.0f},
                              {"temperature 0.7, top_k 50", 0.7f, 50, 1.0f, 0.0f},
                              {"temperature 1, min_p 0.05", 1.0f, 0, 1.0f, 0.05f}};

  fg::Buffer logits_b = be.alloc(size_t(max_rows) * size_t(vocab) * sizeof(float));
  fg::Buffer out_b = be.alloc(size_t(max_rows) * sizeof(int32_t));
  std::printf("sample_bench on %s, vocab %lld: us per call (median of %d batches of 20 calls)\n", be.name().c_str(),
              static_cast<long long>(vocab), reps);
  std::printf("%-8s %-28s", "shape", "settings");
  for (int b : batches) std::printf(" %9s", ("batch " + std::to_string(b)).c_str());
  std::printf("\n");
  nlohmann::json results = nlohmann::json::array();
  constexpr int kCalls = 20;
  for (const Shape& shape : shapes) {
    for (int r = 0; r < max_rows; ++r)
      be.copy_from_host(static_cast<char*>(logits_b.data()) + size_t(r) * size_t(vocab) * sizeof(float),
                        shape.row.data(), size_t(vocab) * sizeof(float));
    be.synchronize();
    for (const Setting& st : settings) {
      std::printf("%-8s %-28s", shape.name, st.name);
      for (int b : batches) {
        fg::Tensor logits = fg::Tensor::contiguous(logits_b.data(), fg::DType::kF32, be.device(), {b, vocab});
        fg::Tensor out = fg::Tensor::contiguous(out_b.data(), fg::DType::kI32, be.device(), {b});
        auto rows = std::vector<fg::SamplingRow>(size_t(b));
        for (int i = 0; i < b; ++i) {
          rows[size_t(i)].temperature = st.temperature;
          rows[size_t(i)].top_k = st.top_k;
          rows[size_t(i)].top_p = st.top_p;
          rows[size_t(i)].min_p = st.min_p;
          rows[size_t(i)].seed = 7;
          rows[size_t(i)].counter = uint64_t(i);
        }
        be.sample(logits, rows, out);
        be.synchronize();
        std::vector<double> t;
        for (int rep = 0; rep < reps; ++rep) {
          auto t0 = std::chrono::steady_clock::now();
          for (int c = 0; c < kCalls; ++c) be.sample(logits, rows, out);
          be.synchronize();
          t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                      kCalls);
        }
        std::sort(t.begin(), t.end());
        const double us = t[t.size() / 2];
        std::printf(" %9.1f", us);
        results.push_back({{"shape", shape.name}, {"settings", st.name}, {"batch", b}, {"us_per_call", us}});
      }
      std::printf("\n");
    }
  }
  if (!json_path.empty()) {
    nlohmann::json j = {{"backend", be.name()}, {"vocab", vocab}, {"results", results}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}
