// The engine settings shared by every command that runs the engine (`generate`, `chat`, `serve`):
// one definition of the flags, their defaults and their validation, so the commands cannot drift
// apart; and the engine start of the offline commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/model_runner.h"

namespace fg::cli {

struct EngineFlags {
  bool dummy_weights = false;
  std::string quantization = "none";    // none or fp8
  std::string kv_cache_memory;          // "8GiB"; empty: a share of device memory
  std::string kv_cache_dtype = "auto";  // auto, bf16 or fp8
  double gpu_memory_fraction = 0.9;
  int max_batch_tokens = 2048;
  int max_running = 256;
  int max_model_len = 0;
  bool no_prefix_cache = false;
  bool no_cuda_graphs = false;
  bool batch_invariant = false;
  // The prefill chunk of steps that carry running decodes, under a latency budget
  // (engine/step_latency.h).
  bool no_adaptive_prefill = false;
  double max_step_latency_ms = 0.0;  // 0: 1.8 times the median decode-only step
  int min_prefill_chunk = 256;
  std::string step_trace;  // a CSV line per engine step to this file (--step-trace)
  // Speculative decoding (engine/spec_decoder.h).
  std::string speculative = "off";  // off, ngram or draft
  int num_speculative_tokens = 4;
  std::string draft_model;  // for --speculative draft
  int ngram_min = 2;
  int ngram_max = 4;
  int spec_max_batch = 32;       // no speculation in steps with more running decodes
  int tensor_parallel_size = 1;  // ranks (GPUs, or CPU backends) the model is split over
};

// Adds --dummy-weights, --quantization, --kv-cache-memory, --kv-cache-dtype, --gpu-memory-fraction,
// --max-batch-tokens,
// --max-running, --max-model-len, --no-prefix-cache, --no-cuda-graphs, --batch-invariant, the
// prefill chunk's latency budget (--no-adaptive-prefill, --max-step-latency-ms,
// --min-prefill-chunk), the speculative decoding flags (--speculative, --num-speculative-tokens,
// --draft-model, --ngram-min, --ngram-max, --spec-max-batch) and --tensor-parallel-size to `cmd`.
void add_engine_flags(CLI::App* cmd, EngineFlags& flags);

// Writes the flags into the runner and engine settings; throws std::runtime_error with a one-line
// message naming the flag when a value is impossible.
void apply_engine_flags(const EngineFlags& flags, ModelRunnerOptions& runner, EngineConfig& engine);

// What an offline command (`generate`, `chat`) gives the engine besides the flags.
struct EngineStart {
  std::string model_dir;
  std::string backend = "auto";
  int page_size = 16;
  uint64_t seed = 0;                        // for requests that bring none, and --dummy-weights
  StopMatcherFactory stop_matcher_factory;  // empty: stop strings are refused
};

// Loads the model, starts the engine thread and says on stderr how large its KV cache is.
// Throws std::runtime_error with a one-line message (the model's folder or file, or the flag).
std::unique_ptr<Engine> start_engine(const EngineStart& start, const EngineFlags& flags);

}  // namespace fg::cli
