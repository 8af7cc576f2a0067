// EngineBackend: GenerationBackend over the real engine (src/engine), tokenizer and chat template
// (src/tokenizer). This is what `flashgen serve` runs.
//
// The engine speaks token ids through per-request EventStreams; this adapter turns them into the
// server's events: incremental text deltas (IncrementalDecoder), stop strings (StopStringMatcher:
// a match ends the request, cuts the text and cancels the engine sequence so its pages are freed
// at once), token texts for logprobs, finish reasons and cached-token counts.
//
// Events are pushed, never polled: every request's stream marks one ReadyQueue, and one pump
// thread sleeps in it until some request has events, so an idle server spends no CPU here and a
// token is handed to its HTTP handler as soon as the engine step that made it ends. The heavy
// part of delivery (detokenization, stop strings, the callbacks into the HTTP layer) runs on the
// pump thread, never on the engine thread. The engine reports each step's batch size
// (EngineConfig::on_step) for the /metrics histogram.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/constraint_factory.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "server/generation_backend.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fg::server {

struct EngineBackendOptions {
  // The names clients may use; the first is the one reported. Empty -> the model folder's name.
  std::vector<std::string> served_model_names;
  std::string tokenizer_dir;       // "" -> runner.model_dir
  std::string chat_template_file;  // "" -> the tokenizer folder's template
  // Reasoning blocks split out of chat replies: "auto" (when the chat template speaks of
  // <think> ... </think>), "think" (always), "none".
  std::string reasoning_parser = "auto";
  ModelRunnerOptions runner;
  EngineConfig engine;
};

class EngineBackend final : public GenerationBackend {
 public:
  // Loads the tokenizer, the chat template (optional) and the model, and starts the engine.
  // Errors name the folder or file at fault.
  static Result<std::unique_ptr<EngineBackend>> create(const EngineBackendOptions& options);
  ~EngineBackend() override;

  const ModelInfo& model_info() const override { return info_; }
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special_tokens) override;
  Result<std::string> detokenize(std::span<const int32_t> ids, bool skip_special_tokens) override;
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) override;
  Result<uint64_t> submit(GenerationRequest request, EventCallback on_event) override;
  void cancel(uint64_t handle) override;
  BackendStats stats() override;

  // Times the pump thread woke up (tests check that it sleeps while nothing happens).
  uint64_t pump_wakeups() const { return ready_->wakeups(); }

 private:
  struct Live;
  EngineBackend() = default;
  void pump();
  // Turns one engine event into a server event; true when the request is finished.
  bool translate(Live& live, RequestEvent&& in, GenerationEvent& out);
  std::string piece(int32_t id) const;
  // A token as the server shows it: its text, whether it is special, its top list's texts.
  GeneratedToken token(int32_t id, float logprob, std::span<const TokenLogprob> top) const;

  ModelInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ConstraintFactory> constraints_;  // after tokenizer_ (it reads it)
  std::optional<ChatTemplate> template_;
  std::string template_error_;
  std::unique_ptr<Engine> engine_;
  int64_t kv_pages_total_ = 0;

  std::shared_ptr<ReadyQueue> ready_ = std::make_shared<ReadyQueue>();
  std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Live>> live_;  // by engine id; guarded by mu_
  Histogram batch_sizes_{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}};
  std::thread pump_;
};

}  // namespace fg::server
