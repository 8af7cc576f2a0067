// prefix_cache_bench: what the prefix cache buys on a shared-system-prompt workload, and how the
// page size trades hit granularity against attention / step speed.
//
//  (a) N requests share one S-token system prompt, each followed by a distinct Q-token question,
//      and generate A tokens (greedy, ignore_eos), all submitted at once. Run on fresh engines in
//      the same process: cache off, cache on (cold: nothing cached yet), and cache on (warm: one
//      earlier request already computed the system prompt). Reports mean / p50 / p99 TTFT, total
//      time, output tokens/s, and the prompt tokens actually computed, with their ratio to the
//      cache-off run (the TTFT ratio should approach it).
//  (b) Page-size sweep (default 1, 16, 64, 256): for each page size a new runner (and KV cache),
//      the same workload with the cache on (warm). Reports cached tokens per request (the hit
//      granularity: only whole pages are shared), computed prompt tokens, mean TTFT, total time,
//      and the mean decode-only step time (attention over ~S + Q + A/2 tokens per sequence).
// Prints tables; --json FILE also writes every figure. Never part of the test suite.
//
//   prefix_cache_bench --config bench/configs/llama-3.1-8b --backend cuda          (the H200 run)
//   prefix_cache_bench --model tests/fixtures/models/llama --backend cpu --num-requests 8
//       --system-len 64 --question-len 6 --answer-len 4 --page-sizes 1,4,16       (a quick check)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
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

struct Args {
  std::string config_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.1-8b";
  std::string model_dir;  // real weights instead of dummy ones
  std::string backend = "auto";
  std::string kv_cache_memory;
  double gpu_memory_fraction = 0.9;
  int page_size = 16;  // for (a)
  std::vector<int> sweep_page_sizes = {1, 16, 64, 256};
  int max_batch_tokens = 8192;
  int max_running = 256;
  int num_requests = 200;
  int system_len = 2000;
  int question_len = 50;
  int answer_len = 100;
  int sweep_requests = 0;  // 0: num_requests
  bool skip_compare = false;
  bool skip_sweep = false;
  int tensor_parallel_size = 1;
  std::string json_path;
};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "prefix_cache_bench: %s\n", m.c_str());
  std::exit(1);
}

struct Workload {
  std::vector<int32_t> system;
  std::vector<fg::Request> requests;
};

Workload make_workload(const Args& a, int num_requests, int vocab) {
  std::mt19937 rng(2024);
  auto token = [&] { return int32_t(rng() % uint32_t(vocab)); };
  Workload w;
  w.system.resize(size_t(a.system_len));
  for (int32_t& t : w.system) t = token();
  for (int i = 0; i < num_requests; ++i) {
    fg::Request r;
    r.prompt_ids = w.system;
    for (int j = 0; j < a.question_len; ++j) r.prompt_ids.push_back(token());
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = a.answer_len;
    r.params.ignore_eos = true;
    w.requests.push_back(std::move(r));
  }
  return w;
}

struct ModeResult {
  std::string mode;
  int page_size = 0;
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double total_s = 0;
  double output_tokens_per_s = 0;
  int64_t prompt_tokens = 0;
  int64_t computed_prompt_tokens = 0;  // prompt tokens minus those served from the cache
  double cached_tokens_per_request = 0;
  double hit_ratio = 0;
  int64_t deferred = 0;  // admissions that waited for pages another request was computing
  int64_t steps = 0;
  int64_t decode_steps = 0;
  double decode_step_ms = 0;   // mean over decode-only steps
  double prefill_step_ms = 0;  // mean over the other steps
  int64_t preemptions = 0;
  int64_t peak_pages = 0;

  nlohmann::json to_json() const {
    return {{"mode", mode},
            {"page_size", page_size},
            {"ttft_mean_s", ttft_mean_s},
            {"ttft_p50_s", ttft_p50_s},
            {"ttft_p99_s", ttft_p99_s},
            {"total_s", total_s},
            {"output_tokens_per_s", output_tokens_per_s},
            {"prompt_tokens", prompt_tokens},
            {"computed_prompt_tokens", computed_prompt_tokens},
            {"cached_tokens_per_request", cached_tokens_per_request},
            {"hit_ratio", hit_ratio},
            {"deferred", deferred},
            {"steps", steps},
            {"decode_steps", decode_steps},
            {"decode_step_ms", decode_step_ms},
            {"prefill_step_ms", prefill_step_ms},
            {"preemptions", preemptions},
            {"peak_pages", peak_pages}};
  }
};

// Runs one request to completion (the warm-up that puts the system prompt in the cache).
void run_warmup(fg::EngineCore& core, const Workload& w, int answer_len) {
  fg::Request r;
  r.prompt_ids = w.system;
  r.prompt_ids.push_back(1);
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = std::max(1, std::min(answer_len, 4));
  r.params.ignore_eos = true;
  auto h = core.submit(r);
  if (!h.is_ok()) die(h.status().to_string());
  while (core.has_work()) {
    fg::Status st = core.step();
    if (!st.is_ok()) die(st.to_string());
  }
  h->wait();
}

// Submits the workload on a fresh engine over `runner` and steps it to completion.
ModeResult run_mode(fg::ModelRunner& runner, const Args& a, const Workload& w, const std::string& mode, bool cache,
                    bool warm) {
  fg::EngineConfig config;
  config.scheduler.max_batch_tokens = a.max_batch_tokens;
  config.scheduler.max_running = a.max_running;
  config.enable_prefix_cache = cache;
  fg::EngineCore core(config, runner);
  if (warm) run_warmup(core, w, a.answer_len);
  const fg::EngineStats before = core.stats();

  const size_t n = w.requests.size();
  std::vector<fg::RequestHandle> handles;
  std::vector<std::optional<double>> ttft(n);
  std::vector<int32_t> cached(n, 0);
  std::vector<size_t> produced(n, 0);
  std::vector<bool> done(n, false);
  const auto t0 = Clock::now();
  for (const fg::Request& r : w.requests) {
    auto h = core.submit(r);
    if (!h.is_ok()) die(h.status().to_string());
    handles.push_back(*h);
  }
  double decode_s = 0, other_s = 0;
  int64_t decode_steps = 0, other_steps = 0;
  while (core.has_work()) {
    const int64_t decode_before = core.stats().decode_only_steps;
    const auto ts = Clock::now();
    fg::Status st = core.step();
    const double dt = since(ts);
    if (!st.is_ok()) die(st.to_string());
    if (core.stats().decode_only_steps > decode_before) {
      decode_s += dt;
      ++decode_steps;
    } else {
      other_s += dt;
      ++other_steps;
    }
    const double now = since(t0);
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      while (auto e = handles[i].events->try_next()) {
        if (e->token) {
          if (!ttft[i]) ttft[i] = now;
          ++produced[i];
        }
        cached[i] = e->cached_tokens;
        if (e->finish) {
          done[i] = true;
          if (*e->finish == fg::FinishReason::kError) die("a request failed: " + e->status.to_string());
        }
      }
    }
  }
  ModeResult m;
  m.mode = mode;
  m.page_size = runner.kv_page_size();
  m.total_s = since(t0);
  std::vector<double> t;
  int64_t cached_sum = 0, outputs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (produced[i] != size_t(a.answer_len)) die("a request ended after " + std::to_string(produced[i]) + " tokens");
    t.push_back(ttft[i].value_or(m.total_s));
    cached_sum += cached[i];
    outputs += int64_t(produced[i]);
    m.prompt_tokens += int64_t(w.requests[i].prompt_ids.size());
  }
  std::sort(t.begin(), t.end());
  for (double x : t) m.ttft_mean_s += x / double(n);
  m.ttft_p50_s = t[n / 2];
  m.ttft_p99_s = t[std::min(n - 1, size_t(double(n) * 0.99))];
  m.output_tokens_per_s = double(outputs) / m.total_s;
  m.computed_prompt_tokens = m.prompt_tokens - cached_sum;
  m.cached_tokens_per_request = double(cached_sum) / double(n);
  const fg::EngineStats s = core.stats();
  const int64_t query = s.prefix_cache_query_tokens - before.prefix_cache_query_tokens;
  m.hit_ratio = query > 0 ? double(s.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens) / double(query) : 0.0;
  m.deferred = s.prefix_cache_deferred - before.prefix_cache_deferred;
  m.steps = decode_steps + other_steps;
  m.decode_steps = decode_steps;
  m.decode_step_ms = decode_steps > 0 ? 1e3 * decode_s / double(decode_steps) : 0.0;
  m.prefill_step_ms = other_steps > 0 ? 1e3 * other_s / double(other_steps) : 0.0;
  m.preemptions = s.preemptions - before.preemptions;
  m.peak_pages = s.pages.peak_held;
  return m;
}

std::unique_ptr<fg::ModelRunner> make_runner(const Args& a, int page_size) {
  fg::ModelRunnerOptions o;
  o.model_dir = a.model_dir.empty() ? a.config_dir : a.model_dir;
  o.dummy_weights = a.model_dir.empty();
  o.backend = a.backend;
  o.page_size = page_size;
  o.gpu_memory_fraction = a.gpu_memory_fraction;
  o.max_model_len = a.system_len + a.question_len + a.answer_len + 1;
  o.tensor_parallel_size = a.tensor_parallel_size;
  if (!a.kv_cache_memory.empty()) {
    auto bytes = fg::parse_byte_size(a.kv_cache_memory);
    if (!bytes.is_ok()) die(bytes.status().message());
    o.kv_cache_bytes = *bytes;
  }
  auto created = fg::ModelRunner::create(o);
  if (!created.is_ok()) die(created.status().to_string());
  return std::move(created).value();
}

void print_header(const char* first) {
  std::printf("  %-10s %9s %9s %9s %9s %10s %12s %7s %9s %9s %9s %6s\n", first, "TTFT mean", "p50", "p99", "total",
              "out tok/s", "computed", "ratio", "cached/r", "decode", "prefill", "preem");
  std::printf("  %-10s %9s %9s %9s %9s %10s %12s %7s %9s %9s %9s %6s\n", "", "(s)", "(s)", "(s)", "(s)", "",
              "prompt tok", "", "tokens", "ms/step", "ms/step", "");
}

void print_row(const std::string& label, const ModeResult& m, int64_t reference_computed) {
  std::printf("  %-10s %9.3f %9.3f %9.3f %9.3f %10.1f %12lld %7.3f %9.1f %9.3f %9.3f %6lld\n", label.c_str(),
              m.ttft_mean_s, m.ttft_p50_s, m.ttft_p99_s, m.total_s, m.output_tokens_per_s,
              static_cast<long long>(m.computed_prompt_tokens),
              reference_computed > 0 ? double(m.computed_prompt_tokens) / double(reference_computed) : 0.0,
              m.cached_tokens_per_request, m.decode_step_ms, m.prefill_step_ms, static_cast<long long>(m.preemptions));
}

std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    int v = 0;
    try {
      v = std::stoi(item);
    } catch (const std::exception&) {
      die("--page-sizes: '" + item + "' is not a number");
    }
    if (v <= 0) die("--page-sizes: page sizes must be positive");
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::string sweep_sizes = "1,16,64,256";
  CLI::App app{"prefix_cache_bench: shared-system-prompt workload with the prefix cache on vs off, page-size sweep"};
  app.add_option("--config", a.config_dir, "directory with a config.json; dummy weights (default llama-3.1-8b)");
  app.add_option("--model", a.model_dir, "model directory with real weights (overrides --config)");
  app.add_option("--backend", a.backend, "cpu, cuda or auto");
  app.add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache size, e.g. 60GiB");
  app.add_option("--gpu-memory-fraction", a.gpu_memory_fraction, "used when --kv-cache-memory is not set");
  app.add_option("--page-size", a.page_size, "page size of the on/off comparison (16)");
  app.add_option("--page-sizes", sweep_sizes, "page sizes of the sweep, comma-separated (1,16,64,256)");
  app.add_option("--max-batch-tokens", a.max_batch_tokens, "new tokens per step (8192)");
  app.add_option("--max-running", a.max_running, "sequences in flight (256)");
  app.add_option("--num-requests", a.num_requests, "requests (200)");
  app.add_option("--system-len", a.system_len, "shared system-prompt tokens (2000)");
  app.add_option("--question-len", a.question_len, "distinct question tokens per request (50)");
  app.add_option("--answer-len", a.answer_len, "output tokens per request, ignore_eos (100)");
  app.add_option("--sweep-requests", a.sweep_requests, "requests per sweep point (default: --num-requests)");
  app.add_flag("--skip-compare", a.skip_compare, "skip (a), the on/off comparison");
  app.add_flag("--skip-sweep", a.skip_sweep, "skip (b), the page-size sweep");
  app.add_option("--tensor-parallel-size", a.tensor_parallel_size, "split the model over N GPUs (1)");
  app.add_option("--json", a.json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  a.sweep_page_sizes = parse_sizes(sweep_sizes);
  if (a.num_requests <= 0 || a.system_len <= 0 || a.question_len <= 0 || a.answer_len <= 0) {
    die("--num-requests, --system-len, --question-len and --answer-len must be positive");
  }
  if (a.sweep_requests <= 0) a.sweep_requests = a.num_requests;

  nlohmann::json out;
  out["workload"] = {{"num_requests", a.num_requests},         {"system_len", a.system_len},
                     {"question_len", a.question_len},         {"answer_len", a.answer_len},
                     {"max_batch_tokens", a.max_batch_tokens}, {"max_running", a.max_running}};
  out["model"] = a.model_dir.empty() ? a.config_dir : a.model_dir;
  out["dummy_weights"] = a.model_dir.empty();

  if (!a.skip_compare) {
    auto t_load = Clock::now();
    auto runner = make_runner(a, a.page_size);
    const fg::ModelConfig& cfg = runner->config();
    out["backend"] = runner->backend().name();
    out["weight_bytes"] = fg::weight_bytes(runner->model().weights());
    std::printf("prefix_cache_bench: %s (%s weights) on %s, loaded in %.1f s; KV cache %d pages of %d (%s)\n",
                out["model"].get<std::string>().c_str(), a.model_dir.empty() ? "dummy" : "real",
                runner->backend().name().c_str(), since(t_load), runner->kv_num_pages(), a.page_size,
                fg::format_byte_size(runner->kv_cache_bytes()).c_str());
    const Workload w = make_workload(a, a.num_requests, int(cfg.vocab_size));
    std::printf(
        "\n(a) %d requests: %d shared system tokens + %d distinct question tokens, %d output tokens each, "
        "submitted at once; page size %d\n",
        a.num_requests, a.system_len, a.question_len, a.answer_len, a.page_size);
    // Warm the device (kernels, allocator) so the first mode is not charged for it.
    {
      Args tiny = a;
      tiny.answer_len = 2;
      const Workload warm = make_workload(tiny, 2, int(cfg.vocab_size));
      (void)run_mode(*runner, tiny, warm, "warmup", false, false);
    }
    const ModeResult off = run_mode(*runner, a, w, "off", false, false);
    const ModeResult cold = run_mode(*runner, a, w, "on (cold)", true, false);
    const ModeResult warm = run_mode(*runner, a, w, "on (warm)", true, true);
    print_header("cache");
    for (const ModeResult* m : {&off, &cold, &warm}) print_row(m->mode, *m, off.computed_prompt_tokens);
    std::printf(
        "  TTFT ratio on/off: cold %.3f, warm %.3f; computed-prompt-token ratio: cold %.3f, warm %.3f; "
        "total-time ratio: cold %.3f, warm %.3f\n",
        cold.ttft_mean_s / off.ttft_mean_s, warm.ttft_mean_s / off.ttft_mean_s,
        double(cold.computed_prompt_tokens) / double(off.computed_prompt_tokens),
        double(warm.computed_prompt_tokens) / double(off.computed_prompt_tokens), cold.total_s / off.total_s,
        warm.total_s / off.total_s);
    out["compare"] = {
        {"page_size", a.page_size},
        {"off", off.to_json()},
        {"on_cold", cold.to_json()},
        {"on_warm", warm.to_json()},
        {"ttft_ratio_cold", cold.ttft_mean_s / off.ttft_mean_s},
        {"ttft_ratio_warm", warm.ttft_mean_s / off.ttft_mean_s},
        {"computed_ratio_cold", double(cold.computed_prompt_tokens) / double(off.computed_prompt_tokens)},
        {"computed_ratio_warm", double(warm.computed_prompt_tokens) / double(off.computed_prompt_tokens)}};
  }

  if (!a.skip_sweep) {
    std::printf("\n(b) page-size sweep, cache on (warm), %d requests of the same shape\n", a.sweep_requests);
    print_header("page size");
    nlohmann::json sweep = nlohmann::json::array();
    int64_t reference_computed = 0;
    for (int p : a.sweep_page_sizes) {
      auto runner = make_runner(a, p);  // the previous runner is gone: one model in memory at a time
      const Workload w = make_workload(a, a.sweep_requests, int(runner->config().vocab_size));
      {
        Args tiny = a;
        tiny.answer_len = 2;
        const Workload warm = make_workload(tiny, 2, int(runner->config().vocab_size));
        (void)run_mode(*runner, tiny, warm, "warmup", false, false);
      }
      const ModeResult m = run_mode(*runner, a, w, "on (warm)", true, true);
      if (reference_computed == 0) reference_computed = m.computed_prompt_tokens;
      print_row(std::to_string(p), m, reference_computed);
      sweep.push_back(m.to_json());
    }
    std::printf(
        "  ratio: computed prompt tokens relative to the first page size; cached/r: prompt tokens served\n"
        "  from the cache per request (whole pages only, and never the prompt's last token)\n");
    out["sweep"] = sweep;
  }

  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    if (!f) die(a.json_path + ": cannot write the JSON results");
    f << out.dump(2) << "\n";
  }
  return 0;
}
