// `flashgen generate`: runs prompts through the engine, or with --reference through the
// single-sequence reference loop of model/generate.cc (the loop the parity tests use).
//
//   generate --model DIR (--prompt TEXT [--chat] | --prompt-ids "1,2,3" | --prompts FILE)
//            [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//            [--stop STR]... [--ignore-eos] [--json] [--backend cpu|cuda|auto] [--page-size P]
//            [engine flags (cli/engine_flags.h)] [--reference]
//
// --prompt is encoded with the model's tokenizer (its BOS/EOS rules); with --chat it is one user
// message rendered with the model's chat template (add_generation_prompt). FILE holds one JSON
// request per line with exactly one of "prompt_ids", "prompt" (text) or "messages" (a chat, as
// with --chat), and optionally max_new_tokens (null: no limit but the context), min_new_tokens, temperature,
// top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed,
// stop_token_ids, stop (stop strings), ignore_eos, logprobs, prompt_logprobs, logit_bias (token
// id -> bias, as OpenAI's), priority, cache_salt; missing ones take the command line's values. All requests run
// concurrently through the engine.
// --reference runs one prompt (--prompt or --prompt-ids) and refuses the flags only the engine
// has (--prompts, --stop, the engine flags).
//
// Output per request, in input order: "[i] <finish reason>: <output ids>" and, when the model
// has a tokenizer, the output text on the next line (cut before a matched stop string); with
// --json one object per line (index, prompt_ids, output_ids, text, finish_reason, cached_tokens,
// logprobs, prompt_logprobs). The engine's summary (throughput, steps, pages, prefix cache) goes to stderr.
// User errors are thrown as one-line std::runtime_error messages naming the flag, file or line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "cli/model_text.h"
#include "cli/token_ids.h"
#include "engine/engine.h"
#include "model/generate.h"
#include "model/model.h"

namespace fg::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct GenerateArgs {
  std::string model_dir;
  std::string backend = "auto";
  std::string prompt;        // --prompt (text)
  std::string prompt_ids;    // --prompt-ids "1,2,3"
  std::string prompts_file;  // --prompts FILE
  bool chat = false;
  bool reference = false;
  int page_size = 16;
  int max_new_tokens = 32;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json = false;
  EngineFlags engine;
};

// What one request produced, whichever path ran it.
struct Outcome {
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> stop;  // the request's stop strings (to cut the text)
  RequestOutput out;
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

template <class T>
T value_or_fail(Result<T> r) {
  if (!r.is_ok()) fail(r.status().message());
  return std::move(r).value();
}

Request default_request(const GenerateArgs& a) {
  Request r;
  r.params.max_new_tokens = a.max_new_tokens;
  r.params.temperature = a.temperature;
  r.params.top_k = a.top_k;
  r.params.top_p = a.top_p;
  r.params.seed = a.seed;
  r.params.ignore_eos = a.ignore_eos;
  r.params.stop = a.stop;
  return r;
}

// One JSON line -> a request; errors name the file and line.
Request parse_request_line(const std::string& line, const std::string& where, const GenerateArgs& a,
                           const ModelText& text) {
  ojson j;
  try {
    j = ojson::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) fail(where + ": expected a JSON object per line");
  Request r = default_request(a);
  int prompts = 0;
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const ojson& v = it.value();
      SamplingParams& p = r.params;
      if (k == "prompt_ids") {
        r.prompt_ids = v.get<std::vector<int32_t>>();
        ++prompts;
      } else if (k == "prompt" || k == "messages") {
        if (!text.has_tokenizer())
          fail(where + ": \"" + k + "\" needs the model's tokenizer, and " + a.model_dir + " has no tokenizer.json");
        r.prompt_ids = k == "prompt" ? text.encode_prompt(v.get<std::string>()) : text.encode_chat(v, where);
        ++prompts;
      } else if (k == "max_new_tokens" || k == "max_tokens") {
        p.max_new_tokens = v.is_null() ? std::nullopt : std::optional<int32_t>(v.get<int32_t>());
      } else if (k == "min_new_tokens" || k == "min_tokens") {
        p.min_new_tokens = v.get<int32_t>();
      } else if (k == "temperature") {
        p.temperature = v.get<float>();
      } else if (k == "top_k") {
        p.top_k = v.get<int>();
      } else if (k == "top_p") {
        p.top_p = v.get<float>();
      } else if (k == "min_p") {
        p.min_p = v.get<float>();
      } else if (k == "repetition_penalty") {
        p.repetition_penalty = v.get<float>();
      } else if (k == "presence_penalty") {
        p.presence_penalty = v.get<float>();
      } else if (k == "frequency_penalty") {
        p.frequency_penalty = v.get<float>();
      } else if (k == "seed") {
        p.seed = v.get<uint64_t>();
      } else if (k == "stop_token_ids") {
        p.stop_token_ids = v.get<std::vector<int32_t>>();
      } else if (k == "stop") {
        p.stop = v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
      } else if (k == "ignore_eos") {
        p.ignore_eos = v.get<bool>();
      } else if (k == "logprobs") {
        p.logprobs = v.get<int>();
      } else if (k == "prompt_logprobs") {
        p.prompt_logprobs = v.get<int>();
      } else if (k == "logit_bias") {
        if (!v.is_object()) fail(where + ": \"logit_bias\" must be an object of token id -> bias");
        for (auto b = v.begin(); b != v.end(); ++b) {
          const std::optional<int32_t> id = token_id_from_key(b.key());
          if (!id) fail(where + ": \"logit_bias\" keys must be token ids in decimal");
          p.logit_bias.emplace_back(*id, b.value().get<float>());
        }
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
  if (prompts != 1) fail(where + ": give exactly one of \"prompt_ids\", \"prompt\" or \"messages\"");
  if (r.prompt_ids.empty()) fail(where + ": \"prompt_ids\" is empty");
  return r;
}

std::vector<Request> read_prompts(const GenerateArgs& a, const ModelText& text) {
  std::ifstream in(a.prompts_file);
  if (!in) fail(a.prompts_file + ": cannot open the prompts file");
  std::vector<Request> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_request_line(line, a.prompts_file + ":" + std::to_string(n), a, text));
  }
  if (out.empty()) fail(a.prompts_file + ": no requests (one JSON object per line)");
  return out;
}

// The requests the flags ask for: --prompts FILE, or one from --prompt [--chat] / --prompt-ids.
std::vector<Request> make_requests(const GenerateArgs& a, const ModelText& text) {
  if (!a.prompts_file.empty()) return read_prompts(a, text);
  Request r = default_request(a);
  if (!a.prompt_ids.empty()) {
    r.prompt_ids = parse_token_ids(a.prompt_ids, "--prompt-ids");
    if (r.prompt_ids.empty()) fail("--prompt-ids: no token ids given");
  } else if (a.chat) {
    r.prompt_ids = text.encode_chat(ojson::array({{{"role", "user"}, {"content", a.prompt}}}), "--chat");
  } else {
    r.prompt_ids = text.encode_prompt(a.prompt);
  }
  std::vector<Request> out;
  out.push_back(std::move(r));
  return out;
}

void print_outcome(size_t index, const Outcome& o, const ModelText& text, bool json) {
  const RequestOutput& out = o.out;
  const bool failed = out.finish_reason == FinishReason::kError;
  std::optional<std::string> reply;
  if (text.has_tokenizer() && !failed) reply = text.decode_output(o.prompt_ids, out.output_ids, o.stop);
  if (json) {
    nlohmann::json j;
    j["index"] = index;
    j["prompt_ids"] = o.prompt_ids;
    j["output_ids"] = out.output_ids;
    if (reply) j["text"] = *reply;
    j["finish_reason"] = finish_reason_name(out.finish_reason);
    j["cached_tokens"] = out.cached_tokens;
    if (failed) j["error"] = out.status.message();
    if (!out.logprobs.empty()) {
      j["logprobs"] = out.logprobs;
      nlohmann::json tops = nlohmann::json::array();
      for (const auto& top : out.top_logprobs) {
        nlohmann::json t = nlohmann::json::array();
        for (const TokenLogprob& c : top) t.push_back({{"id", c.id}, {"logprob", c.logprob}});
        tops.push_back(t);
      }
      j["top_logprobs"] = tops;
    }
    if (!out.prompt_logprobs.empty()) {  // prompt positions 1..: {id, logprob, top}
      nlohmann::json pl = nlohmann::json::array();
      for (const PromptLogprob& p : out.prompt_logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const TokenLogprob& c : p.top) top.push_back({{"id", c.id}, {"logprob", c.logprob}});
        pl.push_back({{"id", p.id}, {"logprob", p.logprob}, {"top", top}});
      }
      j["prompt_logprobs"] = pl;
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::string ids;
  for (size_t i = 0; i < out.output_ids.size(); ++i) ids += (i ? " " : "") + std::to_string(out.output_ids[i]);
  std::printf("[%zu] %s: %s\n", index, finish_reason_name(out.finish_reason),
              failed ? out.status.message().c_str() : ids.c_str());
  if (reply) std::printf("%s\n", reply->c_str());
}

void print_summary(const EngineStats& s, size_t requests, double seconds) {
  const double steps = double(std::max<int64_t>(1, s.steps));
  std::fprintf(stderr,
               "flashgen: %zu requests, %lld output tokens in %.3f s (%.1f tok/s); %lld steps (mean %.2f ms: "
               "schedule %.2f, build %.2f, forward %.2f, sample %.2f, post %.2f); %lld preemptions; peak %lld/%lld "
               "pages\n",
               requests, static_cast<long long>(s.generated_tokens), seconds,
               seconds > 0 ? double(s.generated_tokens) / seconds : 0.0, static_cast<long long>(s.steps),
               1e3 * s.mean_step_seconds(), 1e3 * s.times.schedule / steps, 1e3 * s.times.build / steps,
               1e3 * s.times.forward / steps, 1e3 * s.times.sample / steps, 1e3 * s.times.postprocess / steps,
               static_cast<long long>(s.preemptions), static_cast<long long>(s.pages.peak_held),
               static_cast<long long>(s.pages.num_pages));
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
  if (s.spec_method != SpecMethod::kOff) {
    std::string by_position;
    for (size_t i = 0; i < s.spec.drafted_at.size(); ++i) {
      if (s.spec.drafted_at[i] == 0) break;
      by_position += (i ? " " : "") +
                     std::to_string(int(100.0 * double(s.spec.accepted_at[i]) / double(s.spec.drafted_at[i]) + 0.5)) +
                     "%";
    }
    std::fprintf(stderr,
                 "flashgen: speculative (%s): %lld drafted, %lld accepted (%.1f%%; by position %s) in %lld "
                 "verifications, drafting %.2f ms per step\n",
                 spec_method_name(s.spec_method), static_cast<long long>(s.spec.draft_tokens),
                 static_cast<long long>(s.spec.accepted_tokens), 100.0 * s.spec.acceptance_rate(),
                 by_position.empty() ? "-" : by_position.c_str(), static_cast<long long>(s.spec.verify_steps),
                 1e3 * s.times.propose / steps);
  }
}

// Every request through the engine, concurrently.
std::vector<Outcome> run_engine(const GenerateArgs& a, std::vector<Request> requests, const ModelText& text) {
  EngineStart start;
  start.model_dir = a.model_dir;
  start.backend = a.backend;
  start.page_size = a.page_size;
  start.seed = a.seed;
  start.stop_matcher_factory = text.stop_matcher_factory();
  std::unique_ptr<Engine> engine = start_engine(start, a.engine);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Outcome> outcomes(requests.size());
  std::vector<Result<RequestHandle>> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    outcomes[i].prompt_ids = requests[i].prompt_ids;
    outcomes[i].stop = requests[i].params.stop;
    handles.push_back(engine->submit(std::move(requests[i])));
  }
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (handles[i].is_ok()) {
      outcomes[i].out = handles[i]->wait();
    } else {
      outcomes[i].out.finish_reason = FinishReason::kError;
      outcomes[i].out.status = handles[i].status();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  engine->shutdown();
  print_summary(engine->stats(), outcomes.size(), seconds);
  return outcomes;
}

// One request through model/generate.cc's loop: greedy or seeded sampling, nothing else.
Outcome run_reference(const GenerateArgs& a, Request request) {
  const SamplingParams& p = request.params;
  FG_CHECK(p.max_new_tokens.has_value(), "the reference loop always has a token limit");
  if (*p.max_new_tokens < 0) fail("--max-new-tokens must be >= 0");
  if (p.top_k < 0) fail("--top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("--top-p must be in (0, 1]");
  if (a.page_size <= 0) fail("--page-size must be positive");
  std::unique_ptr<Backend> backend = value_or_fail(make_backend(a.backend));
  std::unique_ptr<Model> model = value_or_fail(Model::load(a.model_dir, *backend));
  GenerateOptions o;
  o.max_new_tokens = *p.max_new_tokens;
  static_cast<SamplingRule&>(o.sampling) = p.rule();
  o.sampling.seed = p.seed.value_or(0);
  o.page_size = a.page_size;
  if (!p.ignore_eos) o.stop_ids = model->config().eos_token_ids;
  Outcome out;
  out.prompt_ids = request.prompt_ids;
  out.out.output_ids = value_or_fail(generate(*model, request.prompt_ids, o));
  const bool eos = !out.out.output_ids.empty() && std::find(o.stop_ids.begin(), o.stop_ids.end(),
                                                            int64_t(out.out.output_ids.back())) != o.stop_ids.end();
  out.out.finish_reason = eos ? FinishReason::kEos : FinishReason::kLength;
  return out;
}

void run_generate(GenerateArgs a, const std::vector<CLI::Option*>& engine_only) {
  if (a.model_dir.empty()) a.model_dir = default_model_path();
  const int sources = int(!a.prompt.empty()) + int(!a.prompt_ids.empty()) + int(!a.prompts_file.empty());
  if (sources != 1) fail("give exactly one of --prompt TEXT, --prompt-ids IDS or --prompts FILE");
  if (a.chat && a.prompt.empty())
    fail("--chat applies to --prompt (in a --prompts file, give a \"messages\" line instead)");
  if (a.reference) {
    for (const CLI::Option* o : engine_only) {
      if (o->count() > 0)
        fail("--reference runs the single-sequence reference loop, which has no " + o->get_name() +
             " (that flag is for the engine, the default)");
    }
  }
  // The tokenizer is needed for text prompts and stop strings; otherwise it only adds the text.
  const bool need_text = !a.prompt.empty() || !a.stop.empty();
  const ModelText text = ModelText::load(a.model_dir, need_text);
  std::vector<Request> requests = make_requests(a, text);

  std::vector<Outcome> outcomes;
  if (a.reference) {
    outcomes.push_back(run_reference(a, std::move(requests[0])));
  } else {
    outcomes = run_engine(a, std::move(requests), text);
  }
  // A single request that failed is the command's error; of several, each line says which.
  if (outcomes.size() == 1 && outcomes[0].out.finish_reason == FinishReason::kError)
    fail(outcomes[0].out.status.message());
  bool any_error = false;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    print_outcome(i, outcomes[i], text, a.json);
    any_error |= outcomes[i].out.finish_reason == FinishReason::kError;
  }
  if (any_error) fail("some requests failed (see their lines above)");
}

}  // namespace

void register_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* g = app.add_subcommand("generate", "generate from prompts (the engine; --reference: the reference loop)");
  g->add_option("--model", a->model_dir, model_option_help());
  g->add_option("--prompt", a->prompt, "prompt text, encoded with the model's tokenizer");
  g->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, e.g. \"1,2,3\"");
  g->add_flag("--chat", a->chat, "--prompt is one user message of a chat, rendered with the model's chat template");
  g->add_flag("--reference", a->reference,
              "run the single-sequence reference loop of the model layer instead of the engine");
  g->add_option("--backend", a->backend, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  g->add_option("--page-size", a->page_size, "KV cache page size in tokens (16)");
  g->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate at most (32; 0 = none)");
  g->add_option("--temperature", a->temperature, "sampling temperature (0 = greedy, the default)");
  g->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = off)");
  g->add_option("--top-p", a->top_p, "nucleus sampling mass (1 = off)");
  g->add_option("--seed", a->seed, "sampling seed");
  g->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-sequence ids");
  g->add_flag("--json", a->json, "one JSON object per request: prompt_ids, output_ids, text, finish_reason, ...");
  // What only the engine has: --reference refuses these.
  std::vector<CLI::Option*> engine_only;
  engine_only.push_back(g->add_option("--prompts", a->prompts_file,
                                      "JSON-lines file of requests ({\"prompt\": \"...\"} or {\"prompt_ids\": [...]} "
                                      "or {\"messages\": [...]}, plus settings); all run concurrently"));
  engine_only.push_back(
      g->add_option("--stop", a->stop, "stop string (repeatable); the text is cut before it")->allow_extra_args(false));
  const size_t before = g->get_options().size();
  add_engine_flags(g, a->engine);
  const std::vector<CLI::Option*> all = g->get_options();
  for (size_t i = before; i < all.size(); ++i) engine_only.push_back(all[i]);
  g->callback([a, engine_only] { run_generate(*a, engine_only); });
}

}  // namespace fg::cli
