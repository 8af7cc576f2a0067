// kv_fp8_quality: what an fp8 KV cache does to a real model's output, on the CPU reference
// backend (whose fp8 cache rounds exactly as the CUDA one does). For each prompt: the greedy
// continuation with the unquantized cache (f32 on the CPU) and with the fp8 one (identical or
// not), and, teacher-forced along the unquantized continuation, the mean absolute difference of
// the logits that predict each generated token and how often their argmax agrees. It also prints
// what e4m3 at scale 1 does to the model's K/V values (per layer, over the first prompt's
// unquantized cache: the largest magnitude, and the shares below e4m3's normal range, where
// resolution drops, and above 448, which saturate), the data behind the scale rule.
//   kv_fp8_quality [--model FILE] [--tokens N] [--json FILE]
// The figure it prints is recorded in docs/perf.md ("FP8 KV cache").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/generate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

// Twenty prompts of different kinds: instructions, facts, code, lists, dialogue, arithmetic.
const char* const kPrompts[] = {
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):",
    "Explain in simple terms why the sky is blue.",
    "List three uses of a paperclip:",
    "Once upon a time, in a small village,",
    "Q: What is 17 times 23?\nA:",
    "The three primary colors are",
    "Translate to French: The cat is sleeping on the sofa.",
    "A recipe for pancakes:\n1.",
    "import numpy as np\n\ndef normalize(x):",
    "The main causes of the French Revolution were",
    "Dear hiring manager,",
    "In machine learning, overfitting means",
    "User: Can you recommend a good book?\nAssistant:",
    "The water cycle consists of",
    "SELECT name FROM users WHERE",
    "Photosynthesis is the process by which",
    "Here are five tips for better sleep:",
    "The history of the Roman Empire began",
};

int argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return int(best);
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "kv_fp8_quality: %s\n", m.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(fg::Result<T> r) {
  if (!r.is_ok()) die(r.status().message());
  return std::move(r).value();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";  // from the repository root
  int tokens = 64;
  std::string json_path;
  CLI::App app{"kv_fp8_quality: greedy output and logits with an fp8 KV cache against the unquantized one (CPU)"};
  app.add_option("--model", model_path, "model (GGUF file or Hugging Face folder)");
  app.add_option("--tokens", tokens, "greedy tokens per prompt (64)");
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  auto backend = fg::make_cpu_backend();
  auto model = value_or_die(fg::Model::load(model_path, *backend));
  auto tokenizer = value_or_die(fg::Tokenizer::load(model_path));
  const int64_t vocab = model->config().vocab_size;
  {
    const std::vector<int32_t> prompt = tokenizer->encode(kPrompts[1], true);
    const int page = 16, pages = fg::kv_pages_for(int64_t(prompt.size()), page);
    fg::KvCache cache = value_or_die(model->make_kv_cache(pages, page));
    std::vector<int32_t> ids(static_cast<size_t>(pages));
    for (int i = 0; i < pages; ++i) ids[size_t(i)] = i;
    fg::SequenceChunk chunk;
    chunk.new_tokens = prompt;
    chunk.pages = ids;
    value_or_die(model->forward(std::span<const fg::SequenceChunk>(&chunk, 1), cache));
    backend->synchronize();
    std::printf("K/V of the prompt \"%s\" (%zu tokens) against e4m3 at scale 1:\n", kPrompts[1], prompt.size());
    std::printf("  layer  max|K|   max|V|   K<2^-6   V<2^-6   >448\n");
    const int64_t n = int64_t(prompt.size()) * model->config().num_kv_heads * model->config().head_dim;
    for (int l = 0; l < cache.num_layers(); ++l) {
      double mk = 0, mv = 0;
      int64_t sk = 0, sv = 0, big = 0;
      const float* k = cache.layer(l).k.ptr<float>();  // pages 0.. in order: the prompt's rows first
      const float* v = cache.layer(l).v.ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        mk = std::max(mk, double(std::fabs(k[i])));
        mv = std::max(mv, double(std::fabs(v[i])));
        sk += std::fabs(k[i]) < 0.015625f;
        sv += std::fabs(v[i]) < 0.015625f;
        big += std::fabs(k[i]) > 448.0f || std::fabs(v[i]) > 448.0f;
      }
      std::printf("  %5d %8.2f %8.2f %7.1f%% %7.1f%% %6lld\n", l, mk, mv, 100.0 * double(sk) / double(n),
                  100.0 * double(sv) / double(n), (long long)big);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  int identical = 0;
  double sum_abs = 0, sum_mag = 0;
  int64_t positions = 0, argmax_same = 0;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-3s %-46s %9s %12s %12s\n", "#", "prompt", "identical", "first diff", "mean |dlogit|");
  for (size_t p = 0; p < std::size(kPrompts); ++p) {
    const std::vector<int32_t> prompt = tokenizer->encode(kPrompts[p], true);
    fg::GenerateOptions g;
    g.max_new_tokens = tokens;
    const std::vector<int32_t> exact = value_or_die(fg::generate(*model, prompt, g));
    g.kv_dtype = fg::DType::kF8E4M3;
    const std::vector<int32_t> fp8 = value_or_die(fg::generate(*model, prompt, g));
    int first_diff = -1;
    for (size_t i = 0; i < std::min(exact.size(), fp8.size()) && first_diff < 0; ++i)
      if (exact[i] != fp8[i]) first_diff = int(i);
    if (first_diff < 0 && exact.size() != fp8.size()) first_diff = int(std::min(exact.size(), fp8.size()));
    identical += first_diff < 0;
    // Teacher-forced along the exact continuation: rows prompt_len - 1 .. end - 1 predict it.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), exact.begin(), exact.end() - (exact.empty() ? 0 : 1));
    const std::vector<float> le = value_or_die(fg::prompt_logits(*model, seq, 16));
    const std::vector<float> l8 = value_or_die(fg::prompt_logits(*model, seq, 16, 0, fg::DType::kF8E4M3));
    double abs_p = 0;
    int64_t n_p = 0;
    for (size_t r = prompt.size() - 1; r < seq.size(); ++r, ++n_p) {
      const float* a = &le[r * size_t(vocab)];
      const float* b = &l8[r * size_t(vocab)];
      for (int64_t v = 0; v < vocab; ++v) {
        abs_p += std::fabs(double(a[v]) - double(b[v]));
        sum_mag += std::fabs(double(a[v]));
      }
      argmax_same += argmax(a, vocab) == argmax(b, vocab);
    }
    sum_abs += abs_p;
    positions += n_p;
    std::string shown = kPrompts[p];
    for (char& c : shown)
      if (c == '\n') c = ' ';
    if (shown.size() > 44) shown = shown.substr(0, 41) + "...";
    std::printf("%-3zu %-46s %9s %12s %12.4f\n", p, shown.c_str(), first_diff < 0 ? "yes" : "no",
                first_diff < 0 ? "-" : std::to_string(first_diff).c_str(), abs_p / double(n_p * vocab));
    rows.push_back({{"prompt", kPrompts[p]},
                    {"identical", first_diff < 0},
                    {"first_difference", first_diff},
                    {"mean_abs_logit_diff", abs_p / double(n_p * vocab)}});
  }
  const double mean_abs = sum_abs / double(positions * vocab), mean_mag = sum_mag / double(positions * vocab);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "\n%s, %d greedy tokens per prompt, fp8 KV (e4m3, scale 1) vs the unquantized cache on %s:\n"
      "  identical greedy outputs: %d of %zu\n"
      "  teacher-forced: mean |logit difference| %.4f (mean |logit| %.3f, ratio %.4f); argmax agrees at %lld of "
      "%lld positions (%.1f%%)\n"
      "  (%.0f s)\n",
      model_path.c_str(), tokens, backend->name().c_str(), identical, std::size(kPrompts), mean_abs, mean_mag,
      mean_abs / mean_mag, (long long)argmax_same, (long long)positions,
      100.0 * double(argmax_same) / double(positions), secs);
  if (!json_path.empty()) {
    nlohmann::json out = {{"model", model_path},
                          {"tokens", tokens},
                          {"identical", identical},
                          {"prompts", std::size(kPrompts)},
                          {"mean_abs_logit_diff", mean_abs},
                          {"mean_abs_logit", mean_mag},
                          {"argmax_agree", argmax_same},
                          {"positions", positions},
                          {"rows", rows}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return 0;
}
