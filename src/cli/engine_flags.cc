// The engine flags and the engine start of the offline commands (see engine_flags.h).
#include "cli/engine_flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "kvcache/kv_sizing.h"

namespace fg::cli {

void add_engine_flags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_flag("--dummy-weights", f.dummy_weights,
                "random bf16 weights from config.json alone (performance work; output is meaningless)");
  cmd->add_option("--quantization", f.quantization,
                  "fp8: quantize the checkpoint's bf16/f16/f32 linear weights to FP8 (e4m3, one scale per output "
                  "channel) at load; FP8 checkpoints need no flag (default: none)")
      ->check(CLI::IsMember({"none", "fp8"}));
  cmd->add_option("--kv-cache-memory", f.kv_cache_memory,
                  "KV cache size, e.g. 8GiB (default: a memory fraction; on the CPU at most what 4 sequences of "
                  "--max-model-len need, and at most 2 GiB)");
  cmd->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                  "what the KV cache stores: auto (default: fp8 when the checkpoint has calibrated K/V scales, "
                  "else the activation dtype: bf16 on CUDA, f32 on the CPU), bf16 (on the CPU: rows rounded to bf16) "
                  "or fp8 (e4m3 with a "
                  "power-of-two scale per layer and kv head: twice the tokens of bf16 in the same memory)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}));
  cmd->add_option("--gpu-memory-fraction", f.gpu_memory_fraction,
                  "share of device memory for weights + KV cache when --kv-cache-memory is not set (0.9)");
  cmd->add_option("--max-batch-tokens", f.max_batch_tokens, "new tokens per engine step (2048)");
  cmd->add_option("--max-running", f.max_running, "sequences in flight at once (256)");
  cmd->add_option("--max-model-len", f.max_model_len, "cap on prompt + output tokens (default: the config's)");
  cmd->add_flag("--no-prefix-cache", f.no_prefix_cache,
                "turn prefix caching off (on by default: requests reuse the KV pages of prompt prefixes already "
                "computed)");
  cmd->add_flag("--no-cuda-graphs", f.no_cuda_graphs,
                "run decode steps eagerly (by default CUDA decode steps replay graphs recorded per batch size)");
  cmd->add_flag("--batch-invariant", f.batch_invariant,
                "a request's tokens and logprobs are bitwise the same whatever else is in the batch (one GEMM "
                "algorithm per weight shape, attention without KV splits; costs some throughput)");
  cmd->add_flag("--no-adaptive-prefill", f.no_adaptive_prefill,
                "let every step fill --max-batch-tokens (by default a step that carries running decodes "
                "takes only the prefill chunk its measured step times predict fits --max-step-latency-ms)");
  cmd->add_option("--max-step-latency-ms", f.max_step_latency_ms,
                  "latency budget of a step that carries running decodes (0, default: 1.8 times the "
                  "median decode-only step, measured)");
  cmd->add_option("--min-prefill-chunk", f.min_prefill_chunk,
                  "prefill tokens a step with running decodes may always take, whatever the budget (256)");
  cmd->add_option("--step-trace", f.step_trace,
                  "write one CSV line per engine step to FILE: its start and duration, decodes, prefill "
                  "tokens, the latency budget's chunk, running and waiting sequences (for latency analysis)");
  cmd->add_option("--speculative", f.speculative,
                  "speculative decoding: off (default), ngram (prompt lookup) or draft (--draft-model)")
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  cmd->add_option("--num-speculative-tokens", f.num_speculative_tokens,
                  "tokens drafted per step at most, also from a request's predicted output (4)");
  cmd->add_option("--draft-model", f.draft_model,
                  "a smaller model with the same tokenizer that drafts for --speculative draft (any format "
                  "--model takes)");
  cmd->add_option("--ngram-min", f.ngram_min, "shortest suffix n-gram lookup matches (2)");
  cmd->add_option("--ngram-max", f.ngram_max, "longest suffix n-gram lookup tries first (4)");
  cmd->add_option("--spec-max-batch", f.spec_max_batch,
                  "no speculation in a step with more running decodes than this (32): large batches are "
                  "compute-bound");
  cmd->add_option("--tensor-parallel-size", f.tensor_parallel_size,
                  "split the model over N GPUs of this host (attention heads, MLP columns and the vocabulary; "
                  "NCCL), or N CPU backends with --backend cpu (1)");
}

void apply_engine_flags(const EngineFlags& f, ModelRunnerOptions& runner, EngineConfig& engine) {
  if (f.max_batch_tokens <= 0 || f.max_running <= 0)
    throw std::runtime_error("--max-batch-tokens and --max-running must be positive");
  if (f.max_model_len < 0) throw std::runtime_error("--max-model-len must not be negative");
  if (!(f.gpu_memory_fraction > 0.0 && f.gpu_memory_fraction <= 1.0))
    throw std::runtime_error("--gpu-memory-fraction must be in (0, 1]");
  if (f.tensor_parallel_size < 1) throw std::runtime_error("--tensor-parallel-size must be at least 1");
  runner.tensor_parallel_size = f.tensor_parallel_size;
  runner.dummy_weights = f.dummy_weights;
  auto quantization = parse_load_quantization(f.quantization);
  if (!quantization.is_ok()) throw std::runtime_error(quantization.status().message());
  runner.quantization = *quantization;
  if (!f.kv_cache_memory.empty()) {
    auto bytes = parse_byte_size(f.kv_cache_memory);
    if (!bytes.is_ok()) throw std::runtime_error("--kv-cache-memory: " + bytes.status().message());
    runner.kv_cache_bytes = *bytes;
  }
  runner.kv_cache_dtype = f.kv_cache_dtype;
  runner.gpu_memory_fraction = f.gpu_memory_fraction;
  runner.max_model_len = f.max_model_len;
  runner.cuda_graphs = !f.no_cuda_graphs;
  runner.batch_invariant = f.batch_invariant;
  runner.max_graph_batch = std::min(f.max_running, 256);
  engine.scheduler.max_batch_tokens = f.max_batch_tokens;
  runner.max_step_tokens = f.max_batch_tokens;
  engine.scheduler.max_running = f.max_running;
  engine.enable_prefix_cache = !f.no_prefix_cache;
  if (!(f.max_step_latency_ms >= 0.0)) throw std::runtime_error("--max-step-latency-ms must not be negative");
  if (f.min_prefill_chunk <= 0) throw std::runtime_error("--min-prefill-chunk must be positive");
  StepLatencyConfig& latency = engine.scheduler.latency;
  latency.adaptive = !f.no_adaptive_prefill;
  latency.max_step_seconds = f.max_step_latency_ms * 1e-3;
  latency.min_prefill_tokens = f.min_prefill_chunk;
  if (!f.step_trace.empty()) {
    std::shared_ptr<FILE> out(std::fopen(f.step_trace.c_str(), "w"), [](FILE* p) {
      if (p != nullptr) std::fclose(p);
    });
    if (!out) throw std::runtime_error("--step-trace: cannot write " + f.step_trace + ": " + std::strerror(errno));
    std::setvbuf(out.get(), nullptr, _IOLBF, 1 << 16);  // a line per step: readable while it runs
    std::fprintf(out.get(), "step,start_s,seconds,seqs,decodes,prefill_tokens,prefill_chunk,running,waiting\n");
    engine.on_step = [out, next = engine.on_step](const StepSummary& s) {
      std::fprintf(out.get(), "%lld,%.6f,%.6f,%d,%d,%d,%d,%lld,%lld\n", static_cast<long long>(s.step), s.start_seconds,
                   s.seconds, s.num_seqs, s.num_decode, s.prefill_tokens, s.prefill_chunk,
                   static_cast<long long>(s.running), static_cast<long long>(s.waiting));
      if (next) next(s);
    };
  }

  SpecConfig& spec = engine.spec;
  spec.method = f.speculative == "ngram"   ? SpecMethod::kNgram
                : f.speculative == "draft" ? SpecMethod::kDraft
                                           : SpecMethod::kOff;
  // Also without --speculative: requests' predicted outputs draft this many tokens a step.
  if (f.num_speculative_tokens < 1 || f.num_speculative_tokens > 16)
    throw std::runtime_error("--num-speculative-tokens must be in [1, 16]");
  if (f.ngram_min < 1 || f.ngram_max < f.ngram_min)
    throw std::runtime_error("--ngram-min must be >= 1 and --ngram-max >= --ngram-min");
  if (f.spec_max_batch < 0) throw std::runtime_error("--spec-max-batch must not be negative");
  if (spec.method == SpecMethod::kDraft && f.draft_model.empty())
    throw std::runtime_error("--speculative draft needs --draft-model DIR");
  if (spec.method != SpecMethod::kDraft && !f.draft_model.empty())
    throw std::runtime_error("--draft-model is used only with --speculative draft");
  spec.num_tokens = f.num_speculative_tokens;
  spec.ngram = {f.ngram_min, f.ngram_max};
  spec.max_batch = f.spec_max_batch;
  runner.draft_model_dir = f.draft_model;
  runner.graph_max_query_len = spec.method == SpecMethod::kOff ? 1 : 1 + spec.num_tokens;
}

std::unique_ptr<Engine> start_engine(const EngineStart& start, const EngineFlags& flags) {
  if (start.page_size <= 0) throw std::runtime_error("--page-size must be positive");
  ModelRunnerOptions o;
  EngineConfig config;
  o.model_dir = start.model_dir;
  o.backend = start.backend;
  o.dummy_seed = start.seed;
  o.page_size = start.page_size;
  apply_engine_flags(flags, o, config);
  config.seed = start.seed;
  config.stop_matcher_factory = start.stop_matcher_factory;
  auto runner = ModelRunner::create(o);
  if (!runner.is_ok()) throw std::runtime_error(runner.status().message());
  std::fprintf(stderr, "flashgen: KV cache %d pages of %d tokens (%s, %s) on %s\n", (*runner)->kv_num_pages(),
               start.page_size, format_byte_size((*runner)->kv_cache_bytes()).c_str(),
               dtype_name((*runner)->kv_cache_dtype()).data(), (*runner)->backend().name().c_str());
  return std::make_unique<Engine>(config, std::move(runner).value());
}

}  // namespace fg::cli
