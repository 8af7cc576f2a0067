// FakeBackend: a deterministic GenerationBackend for the server's tests (no model, no tokenizer).
//
// Tokens are bytes (id = byte value; 256 = BOS, 257 = EOS). One worker thread advances every
// active request by one token per tick, like an engine step: greedy requests produce letters
// that depend on the prompt length, seeded ones letters that depend on the seed. Stop strings are
// matched with hold-back (a partial match is not sent), KV "pages" are counted per request so
// tests can check that cancellation frees them, and a full queue refuses with kResourceExhausted.
// A message whose content is "__template_limit__" makes the chat template hit a rendering limit;
// chat_template_kwargs {"open_think": true} ends the generation prompt with "<think>\n".
// Prompt logprobs, when asked, come on the finished event: -1 for every prompt token but the first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <thread>

#include "server/generation_backend.h"
#include "server/http_types.h"

namespace fg::server::testing {

class FakeBackend final : public GenerationBackend {
 public:
  struct Options {
    int tick_us = 200;  // time per "step"
    int64_t max_model_len = 512;
    int64_t max_active = 64;  // more concurrent requests: kResourceExhausted
    int64_t pages_total = 1024;
    int64_t page_size = 16;
    int eos_after = -1;                // >= 0: greedy requests emit EOS after this many tokens
                                       // (and not before min_new_tokens, as the engine)
    std::vector<std::string> aliases;  // further served names besides "fake-model"
    std::string script;                // non-empty: greedy requests write these bytes, then EOS
    bool reasoning = false;            // ModelInfo::reasoning
    std::string tool_call_format;      // ModelInfo::tool_call_format
  };
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;

  explicit FakeBackend(Options options);
  ~FakeBackend() override;

  const ModelInfo& model_info() const override { return info_; }
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special_tokens) override;
  Result<std::string> detokenize(std::span<const int32_t> ids, bool skip_special_tokens) override;
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) override;
  Result<uint64_t> submit(GenerationRequest request, EventCallback on_event) override;
  void cancel(uint64_t handle) override;
  BackendStats stats() override;

  // Changes the step time (tests slow generation down to cancel mid-stream).
  void set_tick_us(int us) { tick_us_.store(us); }
  int64_t active() const;
  int64_t submitted() const { return submitted_.load(); }
  int64_t cancelled() const { return cancelled_.load(); }

 private:
  struct Active {
    uint64_t handle = 0;
    GenerationRequest req;
    EventCallback cb;
    int64_t generated = 0;
    std::string text;  // all text so far (for stop matching)
    size_t sent = 0;   // bytes of `text` already sent
    bool cancel = false;
  };
  void loop();
  int64_t pages_of(const Active& a) const;

  Options opt_;
  ModelInfo info_;
  std::atomic<int> tick_us_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<Active> active_;
  uint64_t next_handle_ = 1;
  bool stop_ = false;
  std::atomic<int64_t> submitted_{0};
  std::atomic<int64_t> cancelled_{0};
  int64_t steps_ = 0;
  std::thread thread_;
};

// Runs a reply's source to completion the way the transport does (polling after each wake-up);
// returns the body, and the final head in *head when given.
std::string run_reply_source(Reply& r, HttpResponse* head = nullptr);

}  // namespace fg::server::testing
