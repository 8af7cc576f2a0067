// ModelText: the tokenizer and chat template of `generate` and `chat` (see model_text.h).
#include "cli/model_text.h"

#include <algorithm>
#include <stdexcept>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/stop_matcher.h"

namespace fg::cli {
namespace {

// Token ids in, "is a stop string in the text yet?" out: the engine's StopMatcher over the
// tokenizer's incremental decoder and the text matcher the server uses.
class TextStopMatcher final : public StopMatcher {
 public:
  TextStopMatcher(std::shared_ptr<const Tokenizer> tokenizer, const std::vector<std::string>& stops)
      : tokenizer_(std::move(tokenizer)), decoder_(*tokenizer_, /*skip_special_tokens=*/true), matcher_(stops) {}
  bool feed(int32_t token) override { return matcher_.push(decoder_.push(token)).stopped; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;  // outlives decoder_
  IncrementalDecoder decoder_;
  StopStringMatcher matcher_;
};

}  // namespace

ModelText ModelText::load(const std::string& model_dir, bool required) {
  ModelText t;
  t.dir_ = model_dir;
  auto tok = Tokenizer::load(model_dir);
  if (!tok.is_ok()) {
    if (!required && tok.status().code() == ErrorCode::kNotFound) return t;
    throw std::runtime_error("tokenizer: " + tok.status().message());
  }
  t.tokenizer_ = std::shared_ptr<const Tokenizer>(std::move(tok).value());
  auto tmpl = ChatTemplate::from_model_dir(model_dir);
  if (tmpl.is_ok()) {
    t.template_ = std::make_shared<const ChatTemplate>(std::move(tmpl).value());
  } else {
    t.template_error_ = tmpl.status().message();
  }
  return t;
}

std::vector<int32_t> ModelText::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids = tokenizer_->encode(text, /*add_special_tokens=*/true);
  if (ids.empty()) throw std::runtime_error("the prompt encodes to zero tokens");
  return ids;
}

std::vector<int32_t> ModelText::encode_chat(const nlohmann::ordered_json& messages, const std::string& where) const {
  if (!template_) throw std::runtime_error(where + ": " + dir_ + " has no chat template (" + template_error_ + ")");
  if (!messages.is_array() || messages.empty())
    throw std::runtime_error(where + ": \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
  Result<std::string> text =
      template_->render(messages, nullptr, /*add_generation_prompt=*/true, nlohmann::ordered_json::object());
  if (!text.is_ok()) throw std::runtime_error(where + ": " + text.status().message());
  std::vector<int32_t> ids = tokenizer_->encode(*text, /*add_special_tokens=*/false);
  if (ids.empty()) throw std::runtime_error(where + ": the rendered chat encodes to zero tokens");
  return ids;
}

std::string ModelText::decode_output(std::span<const int32_t> prompt, std::span<const int32_t> output,
                                     const std::vector<std::string>& stops) const {
  const size_t ctx = std::min<size_t>(prompt.size(), 4);
  IncrementalDecoder decoder(*tokenizer_, /*skip_special_tokens=*/true, prompt.subspan(prompt.size() - ctx));
  std::string text;
  for (int32_t id : output) text += decoder.push(id);
  text += decoder.flush();
  size_t cut = text.size();
  for (const std::string& s : stops)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  text.resize(cut);
  return text;
}

StopMatcherFactory ModelText::stop_matcher_factory() const {
  if (!tokenizer_) return {};
  return [tok = tokenizer_](const std::vector<std::string>& stops) -> Result<std::unique_ptr<StopMatcher>> {
    return std::unique_ptr<StopMatcher>(new TextStopMatcher(tok, stops));
  };
}

}  // namespace fg::cli
