// The model's tokenizer and chat template as the commands that generate use them (`generate`,
// `chat`): text prompts and chats to ids (exactly as the server's routes make them), output ids
// to text, and the engine's stop-string matcher over the tokenizer.
// Errors are thrown as one-line std::runtime_error messages naming the folder or the problem.
// Must never run the model or hold engine state.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fg::cli {

class ModelText {
 public:
  // Loads DIR's tokenizer and, when it has one, its chat template. With `required` false, a folder
  // without a tokenizer gives a ModelText without one (ids only) instead of an error; a broken
  // tokenizer is an error either way.
  static ModelText load(const std::string& model_dir, bool required);

  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // A text prompt -> ids, with the tokenizer's BOS/EOS rules (as /v1/completions).
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // A chat (OpenAI-shaped messages) -> ids: the chat template with add_generation_prompt, encoded
  // without adding special tokens (as /v1/chat/completions). `where` names the source in errors.
  std::vector<int32_t> encode_chat(const nlohmann::ordered_json& messages, const std::string& where) const;
  // The text of `output` (special tokens skipped), decoded incrementally after the last prompt ids
  // so a leading space survives; cut before the earliest of `stops` when one occurs.
  std::string decode_output(std::span<const int32_t> prompt, std::span<const int32_t> output,
                            const std::vector<std::string>& stops) const;
  // The engine's stop-string matcher over this tokenizer (EngineConfig::stop_matcher_factory).
  StopMatcherFactory stop_matcher_factory() const;

 private:
  std::string dir_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const ChatTemplate> template_;
  std::string template_error_;
};

}  // namespace fg::cli
