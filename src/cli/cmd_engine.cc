// The engine-backed part of `flashgen generate`:
//   generate --model DIR --prompts FILE [--json] [--dummy-weights] [--kv-cache-memory SIZE |
//            --gpu-memory-fraction F] [--max-batch-tokens N] [--max-running N] [--max-model-len N]
//            [--no-prefix-cache] [--no-cuda-graphs]   (the engine flags: cli/engine_flags.h)
// FILE holds one JSON request per line, e.g.
//   {"prompt_ids": [1, 2, 3], "max_new_tokens": 24, "temperature": 0, "seed": 7}
// (fields: prompt_ids, max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
// presence_penalty, frequency_penalty, seed, stop_token_ids, ignore_eos, logprobs, priority,
// cache_salt; missing ones take the command line's values). All requests are submitted at once
// and run concurrently through the engine; results are printed in input order, with --json one
// line per request (with cached_tokens: prompt tokens served from the prefix cache).
// A summary (throughput, steps, preemptions, pages, prefix-cache hits) goes to stderr.
// User errors are thrown as one-line std::runtime_error messages naming the file and line.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/token_ids.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kvcache/kv_sizing.h"

namespace fg::cli {
namespace {

struct EngineArgs {
  std::string prompts_file;
  EngineFlags engine;
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

Request default_request(const GenerateDefaults& d) {
  Request r;
  r.params.max_new_tokens = d.max_new_tokens;
  r.params.temperature = d.temperature;
  r.params.top_k = d.top_k;
  r.params.top_p = d.top_p;
  r.params.seed = d.seed;
  r.params.ignore_eos = d.ignore_eos;
  return r;
}

// One JSON line -> a request; errors name the file and line.
Request parse_request_line(const std::string& line, const std::string& where, const GenerateDefaults& d) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) fail(where + ": expected a JSON object per line");
  Request r = default_request(d);
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const nlohmann::json& v = it.value();
      if (k == "prompt_ids") {
        r.prompt_ids = v.get<std::vector<int32_t>>();
      } else if (k == "prompt") {
        fail(where +
             ": text prompts need the tokenizer, which `generate --prompts` does not load yet; "
             "give \"prompt_ids\"");
      } else if (k == "max_new_tokens" || k == "max_tokens") {
        r.params.max_new_tokens = v.get<int>();
      } else if (k == "temperature") {
        r.params.temperature = v.get<float>();
      } else if (k == "top_k") {
        r.params.top_k = v.get<int>();
      } else if (k == "top_p") {
        r.params.top_p = v.get<float>();
      } else if (k == "min_p") {
        r.params.min_p = v.get<float>();
      } else if (k == "repetition_penalty") {
        r.params.repetition_penalty = v.get<float>();
      } else if (k == "presence_penalty") {
        r.params.presence_penalty = v.get<float>();
      } else if (k == "frequency_penalty") {
        r.params.frequency_penalty = v.get<float>();
      } else if (k == "seed") {
        r.params.seed = v.get<uint64_t>();
      } else if (k == "stop_token_ids") {
        r.params.stop_token_ids = v.get<std::vector<int32_t>>();
      } else if (k == "stop") {
        r.params.stop =
            v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
      } else if (k == "ignore_eos") {
        r.params.ignore_eos = v.get<bool>();
      } else if (k == "logprobs") {
        r.params.logprobs = v.get<int>();
      } else if (k == "priority") {
        r.priority = v.get<int>();
      } else if (k == "cache_salt") {
        r.cache_salt = v.get<uint64_t>();
      } else {
        fail(where + ": unknown field '" + k + "'");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": wrong type of a field (" + e.what() + ")");
  }
  if (r.prompt_ids.empty()) fail(where + ": \"prompt_ids\" is missing or empty");
  return r;
}

std::vector<Request> read_prompts(const std::string& path, const GenerateDefaults& d) {
  std::ifstream in(path);
  if (!in) fail(path + ": cannot open the prompts file");
  std::vector<Request> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_request_line(line, path + ":" + std::to_string(n), d));
  }
  if (out.empty()) fail(path + ": no requests (one JSON object per line)");
  return out;
}

void print_result(size_t index, const Request& req, const RequestOutput& out, bool json) {
  if (json) {
    nlohmann::json j;
    j["index"] = index;
    j["prompt_tokens"] = req.prompt_ids.size();
    j["cached_tokens"] = out.cached_tokens;
    j["output_ids"] = out.output_ids;
    j["finish_reason"] = finish_reason_name(out.finish_reason);
    if (out.finish_reason == FinishReason::kError) j["error"] = out.status.to_string();
    if (!out.logprobs.empty()) {
      j["logprobs"] = out.logprobs;
      nlohmann::json tops = nlohmann::json::array();
      for (const auto& top : out.top_logprobs) {
        nlohmann::json t = nlohmann::json::array();
        for (const TokenLogprob& c : top) t.push_back({{"id", c.token}, {"logprob", c.logprob}});
        tops.push_back(t);
      }
      j["top_logprobs"] = tops;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string ids;
    for (size_t i = 0; i < out.output_ids.size(); ++i) ids += (i ? " " : "") + std::to_string(out.output_ids[i]);
    std::printf("[%zu] %s: %s\n", index, finish_reason_name(out.finish_reason),
                out.finish_reason == FinishReason::kError ? out.status.to_string().c_str() : ids.c_str());
  }
}

void run(const EngineArgs& a, const GenerateDefaults& d) {
  std::vector<Request> requests;
  if (!a.prompts_file.empty()) {
    requests = read_prompts(a.prompts_file, d);
  } else {
    Request r = default_request(d);
    r.prompt_ids = parse_token_ids(d.prompt_ids, "--prompt-ids");
    if (r.prompt_ids.empty()) fail("give --prompt-ids or --prompts FILE");
    requests.push_back(std::move(r));
  }
  ModelRunnerOptions o;
  EngineConfig config;
  o.model_dir = d.model_dir;
  o.backend = d.backend;
  o.dummy_seed = d.seed;
  o.page_size = d.page_size;
  if (d.page_size <= 0) fail("--page-size must be positive");
  apply_engine_flags(a.engine, o, config);
  config.seed = d.seed;
  auto runner = ModelRunner::create(o);
  if (!runner.is_ok()) fail(runner.status().message());
  const int32_t pages = (*runner)->kv_num_pages();
  const int64_t kv_bytes = (*runner)->kv_cache_bytes();
  std::fprintf(stderr, "flashgen: KV cache %d pages of %d tokens (%s) on %s\n", pages, d.page_size,
               format_byte_size(kv_bytes).c_str(), (*runner)->backend().name().c_str());

  Engine engine(config, std::move(runner).value());

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(engine.submit(r));
  std::vector<RequestOutput> outputs(requests.size());
  bool any_error = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (handles[i].is_ok()) {
      outputs[i] = handles[i]->wait();
    } else {
      outputs[i].finish_reason = FinishReason::kError;
      outputs[i].status = handles[i].status();
    }
    any_error |= outputs[i].finish_reason == FinishReason::kError;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  engine.shutdown();
  for (size_t i = 0; i < requests.size(); ++i) print_result(i, requests[i], outputs[i], d.json);

  const EngineStats s = engine.stats();
  std::fprintf(stderr,
               "flashgen: %zu requests, %lld output tokens in %.3f s (%.1f tok/s); %lld steps (mean %.2f ms: "
               "schedule %.2f, build %.2f, forward %.2f, sample %.2f, post %.2f); %lld preemptions; peak %lld/%lld "
               "pages\n",
               requests.size(), static_cast<long long>(s.generated_tokens), seconds,
               seconds > 0 ? double(s.generated_tokens) / seconds : 0.0, static_cast<long long>(s.steps),
               1e3 * s.mean_step_seconds(), 1e3 * s.times.schedule / double(std::max<int64_t>(1, s.steps)),
               1e3 * s.times.build / double(std::max<int64_t>(1, s.steps)),
               1e3 * s.times.forward / double(std::max<int64_t>(1, s.steps)),
               1e3 * s.times.sample / double(std::max<int64_t>(1, s.steps)),
               1e3 * s.times.postprocess / double(std::max<int64_t>(1, s.steps)), static_cast<long long>(s.preemptions),
               static_cast<long long>(s.pages.peak_held), static_cast<long long>(s.pages.num_pages));
  if (s.prefix_cache_enabled) {
    std::fprintf(stderr,
                 "flashgen: prefix cache: %lld lookups, %lld hits, %lld of %lld tokens served from the cache "
                 "(%.1f%%), %lld admissions deferred for pages in flight, %lld pages cached, %lld evicted\n",
                 static_cast<long long>(s.prefix_cache_lookups), static_cast<long long>(s.prefix_cache_hits),
                 static_cast<long long>(s.prefix_cache_hit_tokens), static_cast<long long>(s.prefix_cache_query_tokens),
                 100.0 * s.prefix_cache_hit_ratio(), static_cast<long long>(s.prefix_cache_deferred),
                 static_cast<long long>(s.pages.cached), static_cast<long long>(s.prefix_cache.evicted));
  } else {
    std::fprintf(stderr, "flashgen: prefix cache off\n");
  }
  if (any_error) fail("some requests failed (see their lines above)");
}

}  // namespace

std::function<bool(const GenerateDefaults&)> add_engine_generate_options(CLI::App* generate) {
  auto a = std::make_shared<EngineArgs>();
  generate->add_option("--prompts", a->prompts_file,
                       "JSON-lines file of requests ({\"prompt_ids\": [...], \"max_new_tokens\": 24, ...}); "
                       "all run concurrently through the engine");
  add_engine_flags(generate, a->engine);
  return [a](const GenerateDefaults& d) {
    const EngineFlags& f = a->engine;
    if (a->prompts_file.empty() && !f.dummy_weights && f.kv_cache_memory.empty() && !f.no_prefix_cache) return false;
    run(*a, d);
    return true;
  };
}

}  // namespace fg::cli
