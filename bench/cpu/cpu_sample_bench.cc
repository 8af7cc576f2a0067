// cpu_sample_bench: one row of the sampling rule on the host (backend/cpu/cpu_sample.cc), as the
// CPU backend samples and gives the distributions speculative decoding verifies sampled requests
// against (cpu_sampling_distribution for each verified row): time per row at Llama 3's vocabulary for
// rows shaped like a language model's (a few dozen logits 7-12 above a broad bulk) and for a
// broad row (normal logits), under the usual settings. Never part of the test suite.
//
//   cpu_sample_bench [--vocab 128256] [--reps 20]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

int main(int argc, char** argv) {
  int64_t vocab = 128256;
  int reps = 20;
  CLI::App app{"cpu_sample_bench: the host sampling rule, time per row"};
  app.add_option("--vocab", vocab, "logits per row")->check(CLI::Range(int64_t(64), int64_t(1) << 24));
  app.add_option("--reps", reps, "rows timed per case")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(1);
  std::vector<float> peaked(static_cast<size_t>(vocab)), broad(static_cast<size_t>(vocab));
  std::normal_distribution<float> bulk(0.0f, 2.0f), wide(0.0f, 3.0f);
  for (auto& x : peaked) x = bulk(rng);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<float> high(8.0f, 14.0f);
  for (int i = 0; i < 40; ++i) peaked[size_t(pick(rng))] = high(rng);
  for (auto& x : broad) x = wide(rng);

  struct Case {
    const char* name;
    float temperature;
    int top_k;
    float top_p;
  };
  const Case cases[] = {{"temperature 1", 1.0f, 0, 1.0f},
                        {"temperature 1, top_p 0.9", 1.0f, 0, 0.9f},
                        {"temperature 1, top_p 0.95", 1.0f, 0, 0.95f},
                        {"temperature 0.7, top_k 50", 0.7f, 50, 1.0f}};
  fg::CpuSampleScratch scratch;
  std::vector<float> dist(static_cast<size_t>(vocab));
  std::printf("vocab %lld, ms per row (median of %d)\n%-28s %-7s %12s %12s\n", static_cast<long long>(vocab), reps,
              "settings", "row", "draw", "distribution");
  for (const Case& c : cases) {
    for (int r = 0; r < 2; ++r) {
      const std::vector<float>& logits = r == 0 ? peaked : broad;
      std::vector<double> draw, whole;
      for (int i = 0; i < reps; ++i) {
        fg::SamplingRow row;
        row.temperature = c.temperature;
        row.top_k = c.top_k;
        row.top_p = c.top_p;
        row.seed = 5;
        row.counter = uint64_t(i);
        auto t = std::chrono::steady_clock::now();
        (void)fg::cpu_sample_row(logits.data(), vocab, row, scratch);
        auto u = std::chrono::steady_clock::now();
        fg::cpu_sampling_distribution(logits.data(), vocab, row, scratch, dist.data());
        auto v = std::chrono::steady_clock::now();
        draw.push_back(std::chrono::duration<double, std::milli>(u - t).count());
        whole.push_back(std::chrono::duration<double, std::milli>(v - u).count());
      }
      std::sort(draw.begin(), draw.end());
      std::sort(whole.begin(), whole.end());
      std::printf("%-28s %-7s %12.3f %12.3f\n", c.name, r == 0 ? "peaked" : "broad", draw[draw.size() / 2],
                  whole[whole.size() / 2]);
    }
  }
  return 0;
}
