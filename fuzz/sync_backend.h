// SyncBackend: a GenerationBackend for the HTTP and API fuzz targets that answers within submit()
// and never starts a thread, so one fuzz input runs start to end on one thread in microseconds.
//
// Tokens are bytes (id = byte, 256 = BOS, 257 = EOS); chats are rendered by a real ChatTemplate
// (flashgen's Jinja engine on a ChatML-style template that prints messages, tools and extra
// variables), so request-controlled JSON reaches the template engine as it does in `serve`.
// submit() validates the request the way the engine does (SamplingParams::validate, token ids,
// context) and delivers a few token events and the finish before returning; cancel() is a no-op.
#pragma once

#include <optional>

#include "server/generation_backend.h"
#include "tokenizer/chat_template.h"

namespace fg::fuzz {

class SyncBackend final : public server::GenerationBackend {
 public:
  SyncBackend();

  const server::ModelInfo& model_info() const override { return info_; }
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special_tokens) override;
  Result<std::string> detokenize(std::span<const int32_t> ids, bool skip_special_tokens) override;
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) override;
  Result<uint64_t> submit(server::GenerationRequest request, server::EventCallback on_event) override;
  void cancel(uint64_t) override {}
  server::BackendStats stats() override { return {}; }

 private:
  server::ModelInfo info_;
  std::optional<ChatTemplate> template_;
  uint64_t next_ = 1;
};

}  // namespace fg::fuzz
