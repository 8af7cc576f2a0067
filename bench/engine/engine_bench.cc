// engine_bench: the engine at real shapes (dummy weights from bench/configs by default).
//  (a) decode: one request (or --decode-batch N decoding together); time per decode step against
//      the floor (weight bytes read + every sequence's KV bytes read) / measured device copy
//      bandwidth, where a mixture of experts reads only its top_k experts per layer and a
//      sliding-window layer only its window of the KV;
//  (b) throughput: N requests (prompt P, output O, ignore_eos) submitted at once; output tokens/s,
//      steps, preemptions, and where the step time went (schedule / build / forward / sample / post).
//  (a) and (b) sample greedily unless --temperature (with --top-p / --top-k) is given.
// Prints a table; --json FILE also writes the figures. Never part of the test suite.
//
//   engine_bench --config bench/configs/llama-3.1-8b --backend cuda --kv-cache-memory 60GiB
//  (c) structured output (--structured-fraction F --schema FILE --tokenizer DIR): throughput with
//      a share F of the requests following a JSON schema vs none, and with jump-forward off.
//   engine_bench --model tests/fixtures/models/llama --backend cpu --num-requests 16
//                --prompt-len 32 --output-len 16 --decode-tokens 16      (a quick check on a laptop)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/constraint_factory.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kvcache/kv_sizing.h"
#include "model/dummy_weights.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  std::string config_dir = std::string(FG_SOURCE_DIR) + "/bench/configs/llama-3.1-8b";
  std::string model_dir;  // real weights instead of dummy ones
  std::string backend = "auto";
  std::string quantization = "none";  // fp8: FP8 linear weights (dummy or quantized at load)
  std::string kv_cache_memory;
  std::string kv_cache_dtype = "auto";
  double gpu_memory_fraction = 0.9;
  int page_size = 16;
  int max_batch_tokens = 8192;
  int max_running = 256;
  int num_requests = 1000;
  int prompt_len = 512;
  int output_len = 256;
  int decode_prompt_len = 128;
  int decode_tokens = 128;
  int decode_batch = 1;
  // (a) and (b): every request's sampling (default greedy)
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  bool skip_decode = false;
  bool skip_throughput = false;
  // (c) structured output: a share of the throughput requests follow a JSON schema (needs the
  // model's tokenizer); also run without constraints in the same process to compare.
  std::string tokenizer_dir;
  double structured_fraction = 0.0;
  std::string schema_file;
  bool no_cuda_graphs = false;
  bool batch_invariant = false;
  int max_graph_batch = 0;  // 0: --max-running
  int tensor_parallel_size = 1;
  std::string json_path;
};

std::string sampling_name(const Args& a) {
  if (!(a.temperature > 0.0f)) return "greedy";
  char buf[96];
  std::snprintf(buf, sizeof buf, "temperature %g, top_p %g, top_k %d", a.temperature, a.top_p, a.top_k);
  return buf;
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "engine_bench: %s\n", m.c_str());
  std::exit(1);
}

std::vector<int32_t> random_prompt(int len, int vocab, std::mt19937& rng) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t& t : p) t = int32_t(rng() % uint32_t(vocab));
  return p;
}

// Device copy bandwidth in bytes/s, counting read + write of a `bytes` copy.
double copy_bandwidth(fg::Backend& backend, size_t bytes) {
  fg::Buffer a = backend.alloc(bytes), b = backend.alloc(bytes);
  backend.copy_on_device(b.data(), a.data(), bytes);
  backend.synchronize();
  const int reps = 10;
  auto t = Clock::now();
  for (int i = 0; i < reps; ++i)
    backend.copy_on_device(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  backend.synchronize();
  return 2.0 * double(bytes) * reps / since(t);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"engine_bench: batch-1 decode vs the bandwidth floor, and offline throughput"};
  app.add_option("--config", a.config_dir, "directory with a config.json; dummy weights (default llama-3.1-8b)");
  app.add_option("--model", a.model_dir, "model directory with real weights (overrides --config)");
  app.add_option("--backend", a.backend, "cpu, cuda or auto");
  app.add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache size, e.g. 40GiB");
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype, "auto, bf16 or fp8 (flashgen generate's --kv-cache-dtype)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}));
  app.add_option("--gpu-memory-fraction", a.gpu_memory_fraction, "used when --kv-cache-memory is not set");
  app.add_option("--page-size", a.page_size, "KV page size in tokens");
  app.add_option("--max-batch-tokens", a.max_batch_tokens, "new tokens per step");
  app.add_option("--max-running", a.max_running, "sequences in flight");
  app.add_option("--num-requests", a.num_requests, "throughput: requests");
  app.add_option("--prompt-len", a.prompt_len, "throughput: prompt tokens per request");
  app.add_option("--output-len", a.output_len, "throughput: output tokens per request (ignore_eos)");
  app.add_option("--decode-prompt-len", a.decode_prompt_len, "decode: prompt tokens");
  app.add_option("--decode-tokens", a.decode_tokens, "decode: tokens generated by each sequence");
  app.add_option("--decode-batch", a.decode_batch,
                 "decode: sequences decoding together (their prompts are one prefill step)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--temperature", a.temperature, "(a), (b): sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-p", a.top_p, "(a), (b): nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", a.top_k, "(a), (b): keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--skip-decode", a.skip_decode, "skip (a)");
  app.add_flag("--skip-throughput", a.skip_throughput, "skip (b)");
  app.add_option("--tokenizer", a.tokenizer_dir, "(c): the model's tokenizer folder (structured requests)");
  app.add_option("--structured-fraction", a.structured_fraction,
                 "(c): share of the throughput requests constrained by --schema (0 = skip (c))");
  app.add_option("--schema", a.schema_file, "(c): a JSON schema file");
  app.add_flag("--no-cuda-graphs", a.no_cuda_graphs, "run decode steps eagerly instead of replaying CUDA graphs");
  app.add_flag("--batch-invariant", a.batch_invariant,
               "batch-invariant mode (a request's results do not depend on its batch; costs throughput)");
  app.add_option("--max-graph-batch", a.max_graph_batch,
                 "largest decode batch replayed as a graph (default: --max-running, at most 256)");
  app.add_option("--tensor-parallel-size", a.tensor_parallel_size,
                 "split the model over N GPUs (NCCL); the floor is then one rank's share of the bytes");
  app.add_option("--quantization", a.quantization,
                 "fp8: the linear weights as FP8 codes with per-channel scales (dummy weights on CUDA, or a real "
                 "checkpoint quantized at load)");
  app.add_option("--json", a.json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  fg::ModelRunnerOptions o;
  o.model_dir = a.model_dir.empty() ? a.config_dir : a.model_dir;
  o.dummy_weights = a.model_dir.empty();
  o.backend = a.backend;
  auto quantization = fg::parse_load_quantization(a.quantization);
  if (!quantization.is_ok()) die(quantization.status().message());
  o.quantization = *quantization;
  o.page_size = a.page_size;
  o.gpu_memory_fraction = a.gpu_memory_fraction;
  o.kv_cache_dtype = a.kv_cache_dtype;
  o.cuda_graphs = !a.no_cuda_graphs;
  o.batch_invariant = a.batch_invariant;
  o.max_graph_batch = a.max_graph_batch > 0 ? a.max_graph_batch : std::min(a.max_running, 256);
  o.max_model_len = std::max(a.prompt_len + a.output_len, a.decode_prompt_len + a.decode_tokens) + 1;
  o.max_step_tokens = a.max_batch_tokens;
  o.tensor_parallel_size = a.tensor_parallel_size;
  if (!a.kv_cache_memory.empty()) {
    auto bytes = fg::parse_byte_size(a.kv_cache_memory);
    if (!bytes.is_ok()) die(bytes.status().message());
    o.kv_cache_bytes = *bytes;
  }
  auto t_load = Clock::now();
  auto created = fg::ModelRunner::create(o);
  if (!created.is_ok()) die(created.status().to_string());
  std::unique_ptr<fg::ModelRunner> runner = std::move(created).value();
  fg::Backend& backend = runner->backend();
  const fg::ModelConfig& cfg = runner->config();
  const int64_t weight_bytes = fg::weight_bytes(runner->model().weights());  // as kept (quantized on the cpu)
  // What one token reads: the top-k experts' share of the weights in a mixture-of-experts model.
  const int64_t active_bytes =
      int64_t(double(weight_bytes) * double(fg::model_active_weight_bytes(cfg, backend.act_dtype())) /
              double(fg::model_weight_bytes(cfg, backend.act_dtype())));
  if (runner->tensor_parallel_size() > 1)
    std::printf("tensor parallel: %d ranks; weights and KV below are rank 0's share\n", runner->tensor_parallel_size());
  const int vocab = int(cfg.vocab_size);
  nlohmann::json out;
  out["model"] = o.model_dir;
  out["dummy_weights"] = o.dummy_weights;
  out["quantization"] = a.quantization;
  out["backend"] = backend.name();
  out["batch_invariant"] = a.batch_invariant;
  out["weight_bytes"] = weight_bytes;
  out["active_weight_bytes"] = active_bytes;
  out["kv_cache_bytes"] = runner->kv_cache_bytes();
  out["kv_cache_dtype"] = std::string(fg::dtype_name(runner->kv_cache_dtype()));
  out["kv_pages"] = runner->kv_num_pages();
  out["page_size"] = a.page_size;
  out["tensor_parallel_size"] = runner->tensor_parallel_size();
  std::printf("engine_bench: %s (%s weights, %s) on %s%s, loaded in %.1f s\n", o.model_dir.c_str(),
              o.dummy_weights ? "dummy" : "real", fg::format_byte_size(weight_bytes).c_str(), backend.name().c_str(),
              a.batch_invariant ? ", batch-invariant" : "", since(t_load));
  std::printf("KV cache: %d pages of %d tokens (%s, %s)\n", runner->kv_num_pages(), a.page_size,
              fg::format_byte_size(runner->kv_cache_bytes()).c_str(), fg::dtype_name(runner->kv_cache_dtype()).data());

  fg::EngineConfig config;
  config.scheduler.max_batch_tokens = a.max_batch_tokens;
  config.scheduler.max_running = a.max_running;
  fg::EngineCore core(config, *runner);
  std::mt19937 rng(1234);
  // (a) and (b)'s requests: a random prompt, exactly `output` tokens, the run's sampling.
  auto submit = [&](int prompt_len, int output) {
    fg::Request r;
    r.prompt_ids = random_prompt(prompt_len, vocab, rng);
    r.params.temperature = a.temperature;
    r.params.top_p = a.top_p;
    r.params.top_k = a.top_k;
    r.params.max_new_tokens = output;
    r.params.ignore_eos = true;
    auto h = core.submit(r);
    if (!h.is_ok()) die(h.status().to_string());
    return *h;
  };

  if (!a.skip_decode) {
    // Every step after the first is a decode of all decode_batch sequences: their prompts are one
    // prefill step, and they stop together.
    if (a.decode_batch > a.max_running || int64_t(a.decode_batch) * a.decode_prompt_len > a.max_batch_tokens)
      die("--decode-batch: needs decode_batch <= --max-running and decode_batch * --decode-prompt-len <= "
          "--max-batch-tokens (the prompts are one prefill step)");
    const double bw = copy_bandwidth(backend, size_t(1) << 30);
    for (int i = 0; i < a.decode_batch; ++i) submit(a.decode_prompt_len, a.decode_tokens);
    std::vector<double> decode_steps;
    bool first = true;
    while (core.has_work()) {
      auto t = Clock::now();
      fg::Status st = core.step();
      const double dt = since(t);
      if (!st.is_ok()) die(st.to_string());
      if (!first) decode_steps.push_back(dt);  // the first step is the prefill
      first = false;
    }
    std::sort(decode_steps.begin(), decode_steps.end());
    const double median = decode_steps.empty() ? 0.0 : decode_steps[decode_steps.size() / 2];
    double mean = 0.0;
    for (double d : decode_steps) mean += d;
    mean = decode_steps.empty() ? 0.0 : mean / double(decode_steps.size());
    // The mean KV a token reads: each layer its keys and values up to its window. With tensor
    // parallelism every figure here is one rank's (its kv heads, its weights: weight_bytes above is
    // rank 0's), read by all ranks at once.
    const fg::ModelConfig& local = runner->model().local_config();
    const int64_t mean_len = a.decode_prompt_len + a.decode_tokens / 2;
    int64_t kv_read = 0;
    for (int l = 0; l < cfg.num_layers; ++l) {
      const int w = cfg.layer_sliding_window[size_t(l)];
      kv_read += int64_t(2) * local.num_kv_heads * cfg.head_dim * int64_t(fg::dtype_size(runner->kv_cache_dtype())) *
                 (w > 0 ? std::min<int64_t>(w, mean_len) : mean_len);
    }
    kv_read *= a.decode_batch;
    // The floor: every weight byte a step reads (a mixture of experts: its top_k experts per
    // layer, counted once whatever the batch) and every sequence's KV cross the memory bus once
    // per step, at the rate a device copy moves bytes (read + write counted).
    const double floor_s = double(active_bytes + kv_read) / bw;
    std::printf("\n(a) batch-%d decode, prompt %d, %d tokens, %s\n", a.decode_batch, a.decode_prompt_len,
                a.decode_tokens, sampling_name(a).c_str());
    std::printf("  copy bandwidth        %10.1f GB/s (read + write)\n", bw / 1e9);
    std::printf("  floor per step        %10.3f ms  (weights read %s + mean KV read %s, at the copy rate)\n",
                1e3 * floor_s, fg::format_byte_size(active_bytes).c_str(), fg::format_byte_size(kv_read).c_str());
    std::printf("  measured median       %10.3f ms  (%.1f%% above the floor)\n", 1e3 * median,
                floor_s > 0 ? 100.0 * (median / floor_s - 1.0) : 0.0);
    std::printf("  measured mean         %10.3f ms  (%.1f tok/s)\n", 1e3 * mean,
                mean > 0 ? a.decode_batch / mean : 0.0);
    out["decode"] = {
        {"batch", a.decode_batch},   {"sampling", sampling_name(a)},    {"prompt_len", a.decode_prompt_len},
        {"tokens", a.decode_tokens}, {"copy_bandwidth_gbps", bw / 1e9}, {"floor_ms", 1e3 * floor_s},
        {"kv_read_bytes", kv_read},  {"median_ms", 1e3 * median},       {"mean_ms", 1e3 * mean}};
  }

  if (!a.skip_throughput) {
    const fg::EngineStats before = core.stats();
    std::vector<fg::RequestHandle> handles;
    auto t0 = Clock::now();
    for (int i = 0; i < a.num_requests; ++i) handles.push_back(submit(a.prompt_len, a.output_len));
    double first_token_s = 0.0;
    while (core.has_work()) {
      fg::Status st = core.step();
      if (!st.is_ok()) die(st.to_string());
      if (first_token_s == 0.0 && core.stats().generated_tokens > before.generated_tokens) first_token_s = since(t0);
    }
    const double wall = since(t0);
    const fg::EngineStats s = core.stats();
    const int64_t tokens = s.generated_tokens - before.generated_tokens;
    const int64_t steps = s.steps - before.steps;
    auto ms_per_step = [&](double total, double prev) {
      return steps > 0 ? 1e3 * (total - prev) / double(steps) : 0.0;
    };
    std::printf("\n(b) offline throughput: %d requests, prompt %d, output %d (ignore_eos), %s\n", a.num_requests,
                a.prompt_len, a.output_len, sampling_name(a).c_str());
    std::printf("  output tokens/s       %10.1f  (%lld tokens in %.2f s)\n", double(tokens) / wall,
                static_cast<long long>(tokens), wall);
    std::printf("  total tokens/s        %10.1f  (prompt + output)\n",
                double(tokens + int64_t(a.num_requests) * a.prompt_len) / wall);
    std::printf("  first token after     %10.3f s\n", first_token_s);
    std::printf("  steps                 %10lld  (%lld decode-only), %lld preemptions, peak %lld/%lld pages\n",
                static_cast<long long>(steps), static_cast<long long>(s.decode_only_steps - before.decode_only_steps),
                static_cast<long long>(s.preemptions - before.preemptions), static_cast<long long>(s.pages.peak_held),
                static_cast<long long>(s.pages.num_pages));
    std::printf("  ms per step           schedule %.3f | build %.3f | forward %.3f | sample %.3f | post %.3f\n",
                ms_per_step(s.times.schedule, before.times.schedule), ms_per_step(s.times.build, before.times.build),
                ms_per_step(s.times.forward, before.times.forward), ms_per_step(s.times.sample, before.times.sample),
                ms_per_step(s.times.postprocess, before.times.postprocess));
    out["throughput"] = {{"num_requests", a.num_requests},
                         {"prompt_len", a.prompt_len},
                         {"output_len", a.output_len},
                         {"output_tokens_per_s", double(tokens) / wall},
                         {"wall_s", wall},
                         {"steps", steps},
                         {"preemptions", s.preemptions - before.preemptions},
                         {"ms_per_step",
                          {{"schedule", ms_per_step(s.times.schedule, before.times.schedule)},
                           {"build", ms_per_step(s.times.build, before.times.build)},
                           {"forward", ms_per_step(s.times.forward, before.times.forward)},
                           {"sample", ms_per_step(s.times.sample, before.times.sample)},
                           {"postprocess", ms_per_step(s.times.postprocess, before.times.postprocess)}}}};
    for (auto& h : handles) {
      const fg::RequestOutput r = h.wait();
      if (r.output_ids.size() != size_t(a.output_len)) die("a request ended early: " + r.status.to_string());
    }
  }
  if (a.structured_fraction > 0.0) {
    if (a.tokenizer_dir.empty() || a.schema_file.empty()) die("(c) needs --tokenizer and --schema");
    auto tok = fg::Tokenizer::load(a.tokenizer_dir);
    if (!tok.is_ok()) die(tok.status().to_string());
    std::ifstream sf(a.schema_file);
    const std::string schema((std::istreambuf_iterator<char>(sf)), std::istreambuf_iterator<char>());
    auto factory = fg::ConstraintFactory::create(**tok, runner->eos_token_ids(), runner->vocab_size(), std::nullopt);
    if (!factory.is_ok()) die(factory.status().to_string());
    fg::ConstraintSpec spec{fg::ConstraintSpec::Kind::kJsonSchema, schema, "", true};
    struct Pass {
      double tok_s = 0, wall = 0;
      int64_t tokens = 0, steps = 0, forced = 0;
      std::vector<int32_t> lengths;  // output tokens of each request
    };
    // The same prompts each pass; every k-th request constrained (fraction 0: none). `lengths`:
    // the output length of each request (unconstrained requests only; default a.output_len).
    std::mt19937 prng(777);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < a.num_requests; ++i) prompts.push_back(random_prompt(a.prompt_len, vocab, prng));
    auto pass = [&](double fraction, bool jump_forward, const std::vector<int32_t>* lengths) {
      fg::EngineCore c(config, *runner);
      int64_t constrained = 0;
      std::vector<fg::RequestHandle> handles;
      for (int i = 0; i < a.num_requests; ++i) {
        fg::Request r;
        r.prompt_ids = prompts[size_t(i)];
        r.params.temperature = 0.0f;
        r.params.max_new_tokens = lengths ? (*lengths)[size_t(i)] : a.output_len;
        r.params.ignore_eos = true;
        if (double(constrained) < fraction * double(i + 1)) {
          auto made = (*factory)->make(spec);
          if (!made.is_ok()) die(made.status().to_string());
          r.constraint = *made;
          r.jump_forward = jump_forward;
          ++constrained;
        }
        auto h = c.submit(r);
        if (!h.is_ok()) die(h.status().to_string());
        handles.push_back(std::move(*h));
      }
      auto t = Clock::now();
      while (c.has_work())
        if (fg::Status st = c.step(); !st.is_ok()) die(st.to_string());
      Pass p;
      p.wall = since(t);
      const fg::EngineStats st = c.stats();
      p.tokens = st.generated_tokens;
      p.steps = st.steps;
      p.forced = st.jump_forward_tokens;
      p.tok_s = double(p.tokens) / p.wall;
      for (auto& h : handles) p.lengths.push_back(int32_t(h.wait().output_ids.size()));
      return p;
    };
    // A structured request ends when its JSON does, so the structured pass generates fewer tokens
    // per request than `--output-len`; the unconstrained reference generates exactly the same
    // number of tokens for every request (the structured pass's lengths), so the ratio is the cost
    // of the constraints alone, not of shorter requests leaving the batch.
    const Pass structured = pass(a.structured_fraction, true, nullptr);
    const Pass plain = pass(0.0, true, &structured.lengths);
    const Pass no_jump = pass(a.structured_fraction, false, nullptr);
    // Jump-forward alone: every request follows the schema.
    const Pass all_jump = pass(1.0, true, nullptr);
    const Pass all_no_jump = pass(1.0, false, nullptr);
    std::printf("\n(c) structured output: %d requests (prompt %d, output <= %d), %.0f%% following %s\n", a.num_requests,
                a.prompt_len, a.output_len, 100.0 * a.structured_fraction, a.schema_file.c_str());
    std::printf("  unconstrained         %10.1f tok/s  (%lld tokens, %lld steps; the structured pass's lengths)\n",
                plain.tok_s, static_cast<long long>(plain.tokens), static_cast<long long>(plain.steps));
    std::printf("  structured            %10.1f tok/s  (%.3fx; %lld tokens, %lld steps, %lld forced by jump-forward)\n",
                structured.tok_s, structured.tok_s / plain.tok_s, static_cast<long long>(structured.tokens),
                static_cast<long long>(structured.steps), static_cast<long long>(structured.forced));
    std::printf("  structured, no jump   %10.1f tok/s  (%lld tokens, %lld steps, %.2f s vs %.2f s)\n", no_jump.tok_s,
                static_cast<long long>(no_jump.tokens), static_cast<long long>(no_jump.steps), no_jump.wall,
                structured.wall);
    auto per_step = [](const Pass& p) { return p.steps > 0 ? double(p.tokens) / double(p.steps) : 0.0; };
    std::printf("  all structured, jump  %10.2f s  (%lld tokens in %lld steps: %.1f tokens/step, %lld forced)\n",
                all_jump.wall, static_cast<long long>(all_jump.tokens), static_cast<long long>(all_jump.steps),
                per_step(all_jump), static_cast<long long>(all_jump.forced));
    std::printf("  all structured, none  %10.2f s  (%lld tokens in %lld steps: %.1f tokens/step; jump-forward %.2fx)\n",
                all_no_jump.wall, static_cast<long long>(all_no_jump.tokens), static_cast<long long>(all_no_jump.steps),
                per_step(all_no_jump), all_no_jump.wall / all_jump.wall);
    out["structured"] = {{"fraction", a.structured_fraction},
                         {"unconstrained_tok_s", plain.tok_s},
                         {"structured_tok_s", structured.tok_s},
                         {"ratio", structured.tok_s / plain.tok_s},
                         {"structured_steps", structured.steps},
                         {"jump_forward_tokens", structured.forced},
                         {"no_jump_steps", no_jump.steps},
                         {"no_jump_wall_s", no_jump.wall},
                         {"jump_wall_s", structured.wall},
                         {"all_structured",
                          {{"jump_wall_s", all_jump.wall},
                           {"jump_steps", all_jump.steps},
                           {"jump_tokens", all_jump.tokens},
                           {"forced_tokens", all_jump.forced},
                           {"no_jump_wall_s", all_no_jump.wall},
                           {"no_jump_steps", all_no_jump.steps},
                           {"no_jump_tokens", all_no_jump.tokens}}}};
  }
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    f << out.dump(2) << "\n";
  }
  return 0;
}
