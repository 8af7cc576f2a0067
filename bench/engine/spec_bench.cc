// spec_bench: the figures of speculative decoding (engine/spec_decoder.h), at real shapes with
// dummy weights. Never part of the test suite.
//  (a) step: a verification step (every sequence 1 + k query tokens, all logits) against a plain
//      decode step of the same batch, through the same graph path the engine uses;
//  (b) draft: a decode step of the draft model's shape (--draft-config) against the target's, and
//      the acceptance rate at which drafting k tokens breaks even;
//  (c) batch 1 end to end: generation with n-gram speculation on and off (dummy-weight models
//      loop under greedy decoding, which lookup catches), tokens/s and acceptance; --temperature T
//      samples instead (seeded), which times sampled verification;
//  (d) under load: offline throughput with speculation on and off (the back-off must keep it).
//
//   spec_bench --config bench/configs/llama-3.1-8b --draft-config bench/configs/llama-3.2-1b
//              --backend cuda --kv-cache-memory 60GiB --json spec.json
//   spec_bench ... --skip b,c,d --step-batches 32   (a) alone, at batch 32
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kvcache/kv_sizing.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "spec_bench: %s\n", m.c_str());
  std::exit(1);
}

struct Args {
  std::string config_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.1-8b";
  std::string draft_config_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.2-1b";
  std::string backend = "auto";
  std::string kv_cache_memory = "40GiB";
  int k = 4;
  int context = 1024;  // kv length of the sequences in (a) and (b)
  int e2e_prompt = 128;
  int e2e_tokens = 512;
  int load_requests = 512;
  int load_prompt = 512;
  int load_output = 256;
  float temperature = 0.0f;  // (c), (d): the requests' sampling temperature (0: greedy)
  std::string skip;          // comma list of a, b, c, d
  std::vector<int> step_batches = {1, 32};
  int step_only_q = 0;  // > 0: (a) times only steps of this many query tokens per sequence (profiling)
  std::string json_path;
};

std::unique_ptr<fg::ModelRunner> make_runner(const std::string& dir, const Args& a, int max_model_len) {
  fg::ModelRunnerOptions o;
  o.model_dir = dir;
  o.dummy_weights = true;
  o.backend = a.backend;
  o.page_size = 16;
  o.max_model_len = max_model_len;
  o.graph_max_query_len = 1 + a.k;
  auto bytes = fg::parse_byte_size(a.kv_cache_memory);
  if (!bytes.is_ok()) die(bytes.status().message());
  o.kv_cache_bytes = *bytes;
  auto r = fg::ModelRunner::create(o);
  if (!r.is_ok()) die(r.status().to_string());
  return std::move(r).value();
}

// Median seconds of a step of `batch` sequences at kv length `context`, each feeding `q` tokens
// (q > 1: all rows' logits, as verification asks), through the runner's graph path.
double step_time(fg::ModelRunner& runner, int batch, int q, int context) {
  const int P = runner.kv_page_size();
  const int pages_per_seq = (context + q + P - 1) / P;
  if (int64_t(batch) * pages_per_seq > runner.kv_num_pages()) die("the KV cache is too small for the step bench");
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(batch)), tokens(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) {
    for (int p = 0; p < pages_per_seq; ++p) pages[size_t(s)].push_back(s * pages_per_seq + p);
    tokens[size_t(s)].assign(size_t(q), 7 + s);
  }
  std::vector<double> times;
  for (int rep = 0; rep < 40; ++rep) {
    fg::StepShape shape;
    shape.num_seqs = batch;
    shape.total_q = batch * q;
    shape.num_logits = q > 1 ? batch * q : batch;
    shape.max_q_len = q;
    shape.max_kv_len = context + q;
    auto t = Clock::now();
    fg::StepWriter w = runner.begin_step(shape);
    for (int s = 0; s < batch; ++s) {
      fg::SequenceChunk c;
      c.new_tokens = tokens[size_t(s)];
      c.num_cached = context;
      c.pages = pages[size_t(s)];
      c.logits = q > 1 ? fg::LogitsWanted::kAll : fg::LogitsWanted::kLast;
      if (!w.add(c).is_ok()) die("step bench: bad chunk");
    }
    auto logits = runner.forward(w.finish());
    if (!logits.is_ok()) die(logits.status().to_string());
    runner.backend().synchronize();
    if (rep >= 5) times.push_back(since(t));  // the first ones record graphs
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct E2e {
  double seconds = 0, tokens = 0, acceptance = 0, steps = 0;
};

E2e run_engine(fg::ModelRunner& runner, fg::SpecMethod method, int k, const std::vector<fg::Request>& requests,
               int max_running) {
  fg::EngineConfig c;
  c.scheduler.max_batch_tokens = 8192;
  c.scheduler.max_running = max_running;
  c.spec.method = method;
  c.spec.num_tokens = k;
  c.spec.ngram = {2, 4};
  fg::EngineCore core(c, runner);
  auto t = Clock::now();
  for (const fg::Request& r : requests)
    if (auto h = core.submit(r); !h.is_ok()) die("submit failed: " + h.status().to_string());
  while (core.has_work())
    if (fg::Status st = core.step(); !st.is_ok()) die(st.to_string());
  E2e e;
  e.seconds = since(t);
  const fg::EngineStats s = core.stats();
  e.tokens = double(s.generated_tokens);
  e.acceptance = s.spec.acceptance_rate();
  e.steps = double(s.steps);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"spec_bench: speculative decoding's step cost, draft cost, batch-1 speedup and load behaviour"};
  app.add_option("--config", a.config_dir, "target config.json folder (dummy weights)");
  app.add_option("--draft-config", a.draft_config_dir, "draft model config.json folder (dummy weights)");
  app.add_option("--backend", a.backend, "cpu, cuda or auto");
  app.add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache of the target (and of the draft in (b))");
  app.add_option("--k", a.k, "drafted tokens per step (4)");
  app.add_option("--context", a.context, "(a), (b): kv length of each sequence (1024)");
  app.add_option("--e2e-tokens", a.e2e_tokens, "(c): tokens generated at batch 1 (512)");
  app.add_option("--load-requests", a.load_requests, "(d): requests (512)");
  app.add_option("--load-prompt", a.load_prompt, "(d): prompt tokens per request (512)");
  app.add_option("--load-output", a.load_output, "(d): output tokens per request (256)");
  app.add_option("--temperature", a.temperature, "(c), (d): sampling temperature of the requests (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--skip", a.skip, "comma list of parts to skip: a,b,c,d");
  app.add_option("--step-batches", a.step_batches, "(a): batch sizes (1 32)");
  app.add_option("--step-only-q", a.step_only_q, "(a): time only steps of this query length (for a profiler)");
  app.add_option("--json", a.json_path, "also write the figures as JSON");
  CLI11_PARSE(app, argc, argv);
  auto skip = [&](char p) { return a.skip.find(p) != std::string::npos; };
  nlohmann::json out;
  const int max_len =
      std::max({a.context + a.k + 2, a.e2e_prompt + a.e2e_tokens + a.k + 2, a.load_prompt + a.load_output + a.k + 2});
  const auto t_start = Clock::now();
  auto target = make_runner(a.config_dir, a, max_len);
  std::printf("spec_bench: target %s on %s, k = %d (ready in %.1f s)\n", a.config_dir.c_str(),
              target->backend().name().c_str(), a.k, since(t_start));
  double t_decode1 = 0.0;

  if (!skip('a')) {
    std::printf("\n(a) verification step (1 + %d tokens per sequence, all logits) vs decode step, kv %d\n", a.k,
                a.context);
    for (int b : a.step_batches) {
      if (a.step_only_q > 0) {
        const double t = step_time(*target, b, a.step_only_q, a.context);
        std::printf("  batch %3d: q %d %8.3f ms\n", b, a.step_only_q, 1e3 * t);
        continue;
      }
      const double dec = step_time(*target, b, 1, a.context), ver = step_time(*target, b, 1 + a.k, a.context);
      if (b == 1) t_decode1 = dec;
      std::printf("  batch %3d: decode %8.3f ms, verify %8.3f ms, ratio %.3f\n", b, 1e3 * dec, 1e3 * ver, ver / dec);
      out["step"][std::to_string(b)] = {{"decode_ms", 1e3 * dec}, {"verify_ms", 1e3 * ver}, {"ratio", ver / dec}};
    }
  }
  if (!skip('b')) {
    if (t_decode1 == 0.0) t_decode1 = step_time(*target, 1, 1, a.context);
    const double t_verify1 = out.contains("step") ? out["step"]["1"]["verify_ms"].get<double>() / 1e3
                                                  : step_time(*target, 1, 1 + a.k, a.context);
    auto draft = make_runner(a.draft_config_dir, a, max_len);
    const double t_draft = step_time(*draft, 1, 1, a.context);
    // One speculative step: k draft decodes + one verification; it yields (1 - α^(k+1)) / (1 - α)
    // tokens at per-token acceptance α. Break-even: that many tokens in the time of as many
    // plain decodes.
    const double cost = a.k * t_draft + t_verify1;
    double lo = 0.0, hi = 1.0;
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      const double tokens = mid >= 1.0 ? a.k + 1 : (1.0 - std::pow(mid, a.k + 1)) / (1.0 - mid);
      (tokens * t_decode1 < cost ? lo : hi) = mid;
    }
    std::printf(
        "\n(b) draft %s at batch 1: decode %.3f ms (target %.3f ms, %.3fx); a step of %d drafts + "
        "verification %.3f ms; break-even acceptance %.1f%%\n",
        a.draft_config_dir.c_str(), 1e3 * t_draft, 1e3 * t_decode1, t_draft / t_decode1, a.k, 1e3 * cost, 100.0 * hi);
    out["draft"] = {{"draft_decode_ms", 1e3 * t_draft},
                    {"target_decode_ms", 1e3 * t_decode1},
                    {"spec_step_ms", 1e3 * cost},
                    {"break_even_acceptance", hi}};
  }
  std::mt19937 rng(99);
  auto prompts = [&](int n, int len, int out_len) {
    std::vector<fg::Request> rs;
    for (int i = 0; i < n; ++i) {
      fg::Request r;
      for (int j = 0; j < len; ++j) r.prompt_ids.push_back(int32_t(rng() % uint32_t(target->vocab_size())));
      r.params.temperature = a.temperature;
      r.params.seed = uint64_t(i) + 1;
      r.params.max_new_tokens = out_len;
      r.params.ignore_eos = true;
      rs.push_back(r);
    }
    return rs;
  };
  if (!skip('c')) {
    const auto rs = prompts(1, a.e2e_prompt, a.e2e_tokens);
    const E2e off = run_engine(*target, fg::SpecMethod::kOff, a.k, rs, 256);
    const E2e on = run_engine(*target, fg::SpecMethod::kNgram, a.k, rs, 256);
    std::printf(
        "\n(c) batch 1, %d tokens at temperature %g: off %.1f tok/s (%.0f steps), n-gram %.1f tok/s (%.0f steps), "
        "speedup %.2fx at %.1f%% acceptance\n",
        a.e2e_tokens, a.temperature, off.tokens / off.seconds, off.steps, on.tokens / on.seconds, on.steps,
        (on.tokens / on.seconds) / (off.tokens / off.seconds), 100.0 * on.acceptance);
    out["batch1"] = {{"temperature", a.temperature},
                     {"off_tok_s", off.tokens / off.seconds},
                     {"ngram_tok_s", on.tokens / on.seconds},
                     {"speedup", (on.tokens / on.seconds) / (off.tokens / off.seconds)},
                     {"acceptance", on.acceptance}};
  }
  if (!skip('d')) {
    const auto rs = prompts(a.load_requests, a.load_prompt, a.load_output);
    const E2e off = run_engine(*target, fg::SpecMethod::kOff, a.k, rs, 256);
    const E2e on = run_engine(*target, fg::SpecMethod::kNgram, a.k, rs, 256);
    std::printf(
        "\n(d) load: %d requests (prompt %d, output %d), 256 running: off %.1f tok/s, n-gram %.1f tok/s "
        "(%.3fx, acceptance %.1f%%)\n",
        a.load_requests, a.load_prompt, a.load_output, off.tokens / off.seconds, on.tokens / on.seconds,
        (on.tokens / on.seconds) / (off.tokens / off.seconds), 100.0 * on.acceptance);
    out["load"] = {{"off_tok_s", off.tokens / off.seconds},
                   {"ngram_tok_s", on.tokens / on.seconds},
                   {"ratio", (on.tokens / on.seconds) / (off.tokens / off.seconds)},
                   {"acceptance", on.acceptance}};
  }
  if (!a.json_path.empty()) std::ofstream(a.json_path) << out.dump(2) << "\n";
  return 0;
}
