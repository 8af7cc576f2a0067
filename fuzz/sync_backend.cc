// SyncBackend (see sync_backend.h).
#include "sync_backend.h"

#include <algorithm>

namespace fg::fuzz {

namespace {

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;

// ChatML with the parts of real templates that read request data: tools as JSON, message keys,
// loops with loop variables, and an extra variable from chat_template_kwargs.
constexpr const char* kTemplate = R"({%- if tools %}<|im_start|>system
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% endif %}{%- for message in messages %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] | trim }}{% endif %}
{%- if message.tool_calls is defined %}{% for c in message.tool_calls %}{{ c | tojson(indent=2) }}{% endfor %}{% endif %}
{%- if loop.last and enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %})";

}  // namespace

SyncBackend::SyncBackend() {
  info_.id = "fuzz-model";
  info_.model_dir = "/nonexistent/fuzz-model";
  info_.max_model_len = 512;
  info_.vocab_size = 258;
  info_.dtype = "float32";
  info_.device = "cpu";
  info_.max_batch_tokens = 512;
  info_.max_running = 64;
  info_.has_chat_template = true;
  auto t = ChatTemplate::from_string(kTemplate, nlohmann::ordered_json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (t.is_ok()) template_ = std::move(t).value();
  jinja::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_work_bytes = 8 << 20;
  limits.max_steps = 100000;
  if (template_) template_->set_limits(limits);
}

Result<std::vector<int32_t>> SyncBackend::tokenize(std::string_view text, bool add_special_tokens) {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

Result<std::string> SyncBackend::detokenize(std::span<const int32_t> ids, bool skip_special_tokens) {
  std::string s;
  for (int32_t id : ids) {
    if (id < 0 || id > kEos) return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
    if (id >= kBos) {
      if (!skip_special_tokens) s += id == kBos ? "<s>" : "</s>";
      continue;
    }
    s += char(id);
  }
  return s;
}

Result<std::string> SyncBackend::render_chat(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra) {
  if (!template_) return internal_error("the fuzz chat template did not parse");
  return template_->render(messages, tools, add_generation_prompt, extra);
}

Result<uint64_t> SyncBackend::submit(server::GenerationRequest request, server::EventCallback on_event) {
  FG_RETURN_IF_ERROR(request.sampling.validate(int(info_.vocab_size)));
  if (request.prompt_ids.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= info_.vocab_size) return invalid_argument("prompt token id outside the vocabulary");
  const int64_t room = info_.max_model_len - int64_t(request.prompt_ids.size());
  if (room <= 0 || request.sampling.max_new_tokens.value_or(0) > room)
    return Status(ErrorCode::kContextTooLong, "the request does not fit the context");
  // A few tokens, each its own event, then the finish: enough for SSE framing, logprobs, stop
  // strings and usage to run. The text is the prompt's last bytes, so stop strings can match.
  const int64_t n = std::min<int64_t>(request.sampling.max_new_tokens.value_or(3), 3);
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    server::GenerationEvent ev;
    server::GeneratedToken t;
    const int32_t id = request.prompt_ids[size_t(i) % request.prompt_ids.size()];
    t.id = id == kBos ? 'a' : id;
    t.text = id < 256 ? std::string(1, char(id)) : std::string();
    t.logprob = -0.5f;
    for (int k = 0; k < request.sampling.logprobs; ++k) t.top.push_back({int32_t('a' + k), -1.0f - float(k), "x"});
    ev.text_delta = t.text;
    ev.tokens.push_back(std::move(t));
    on_event(std::move(ev));
  }
  server::GenerationEvent fin;
  fin.finish = n == 0 ? FinishReason::kLength : (next_ % 3 == 0 ? FinishReason::kEos : FinishReason::kLength);
  fin.prompt_tokens = int64_t(request.prompt_ids.size());
  fin.generated_tokens = n;
  fin.seed = request.sampling.seed.value_or(0);
  on_event(std::move(fin));
  return next_++;
}

}  // namespace fg::fuzz
