// FakeBackend implementation (see fake_backend.h).
#include "unit/server/fake_backend.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

namespace fg::server::testing {

FakeBackend::FakeBackend(Options options) : opt_(options), tick_us_(options.tick_us) {
  info_.id = "fake-model";
  info_.aliases = opt_.aliases;
  info_.model_dir = "/nonexistent/fake-model";
  info_.max_model_len = opt_.max_model_len;
  info_.vocab_size = 258;
  info_.dtype = "float32";
  info_.device = "cpu";
  info_.created = 1700000000;
  info_.max_batch_tokens = 512;
  info_.max_running = opt_.max_active;
  info_.has_chat_template = true;
  info_.reasoning = opt_.reasoning;
  info_.tool_call_format = opt_.tool_call_format;
  thread_ = std::thread([this] { loop(); });
}

FakeBackend::~FakeBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::vector<int32_t>> FakeBackend::tokenize(std::string_view text, bool add_special_tokens) {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

Result<std::string> FakeBackend::detokenize(std::span<const int32_t> ids, bool skip_special_tokens) {
  std::string s;
  for (int32_t id : ids) {
    if (id < 0 || id >= 258) return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
    if (id >= 256) {
      if (!skip_special_tokens) s += id == kBos ? "<s>" : "</s>";
      continue;
    }
    s += char(id);
  }
  return s;
}

Result<std::string> FakeBackend::render_chat(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra) {
  std::string s;
  if (!tools.is_null()) s += "<|tools|>" + tools.dump() + "\n";
  for (const auto& m : messages) {
    if (m.value("role", "") == "raise") return invalid_argument("chat template: raise_exception('role raise')");
    if (m.value("content", "") == "__template_limit__")
      return Status(ErrorCode::kResourceExhausted, "template limit exceeded: output exceeds the limit");
    s += "<|" + m.value("role", "") + "|>" + m.value("content", "") + "\n";
  }
  if (add_generation_prompt) s += "<|assistant|>";
  if (add_generation_prompt && extra.is_object() && extra.value("open_think", false)) s += "<think>\n";
  return s;
}

Result<uint64_t> FakeBackend::submit(GenerationRequest request, EventCallback on_event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int64_t(active_.size()) >= opt_.max_active)
    return Status(ErrorCode::kResourceExhausted, "the fake backend's queue is full");
  const int64_t max_new =
      request.sampling.max_new_tokens.value_or(opt_.max_model_len - int64_t(request.prompt_ids.size()));
  const int64_t need = (int64_t(request.prompt_ids.size()) + max_new + opt_.page_size - 1) / opt_.page_size;
  if (need > opt_.pages_total)
    return Status(ErrorCode::kContextTooLong, "request needs " + std::to_string(need) + " KV pages, the pool has " +
                                                  std::to_string(opt_.pages_total));
  Active a;
  a.handle = next_handle_++;
  a.req = std::move(request);
  a.cb = std::move(on_event);
  active_.push_back(std::move(a));
  ++submitted_;
  cv_.notify_all();
  return active_.back().handle;
}

void FakeBackend::cancel(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Active& a : active_)
    if (a.handle == handle) a.cancel = true;
  cv_.notify_all();
}

int64_t FakeBackend::pages_of(const Active& a) const {
  return (int64_t(a.req.prompt_ids.size()) + a.generated + opt_.page_size - 1) / opt_.page_size;
}

int64_t FakeBackend::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(active_.size());
}

BackendStats FakeBackend::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  BackendStats s;
  s.running = int64_t(active_.size());
  s.kv_pages_total = opt_.pages_total;
  for (const Active& a : active_) s.kv_pages_used += pages_of(a);
  s.steps = steps_;
  s.batch_size.upper_bounds = {1, 2, 4, 8, 16, 32, 64};
  s.batch_size.counts.assign(8, 0);
  return s;
}

namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > best; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}

}  // namespace

void FakeBackend::loop() {
  std::vector<std::pair<EventCallback, GenerationEvent>> out;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !active_.empty(); });
      if (stop_) {
        for (Active& a : active_) {
          GenerationEvent ev;
          ev.finish = FinishReason::kCancelled;
          out.emplace_back(std::move(a.cb), std::move(ev));
        }
        active_.clear();
      }
      ++steps_;
      for (auto it = active_.begin(); it != active_.end();) {
        Active& a = *it;
        GenerationEvent ev;
        if (a.cancel) {
          ++cancelled_;
          ev.finish = FinishReason::kCancelled;
        } else if (a.req.sampling.max_new_tokens == 0) {
          ev.finish = FinishReason::kLength;  // nothing to generate
        } else {
          const SamplingParams& s = a.req.sampling;
          GeneratedToken t;
          const bool scripted = !opt_.script.empty() && s.temperature <= 0;
          const int64_t ends_at = scripted ? int64_t(opt_.script.size()) : opt_.eos_after;  // < 0: never
          const bool eos = !s.ignore_eos && s.temperature <= 0 && ends_at >= 0 &&
                           a.generated == std::max<int64_t>(ends_at, s.min_new_tokens);
          if (eos) {
            t.id = kEos;
            t.special = true;
          } else if (scripted) {
            t.id = int32_t(static_cast<unsigned char>(opt_.script[size_t(a.generated) % opt_.script.size()]));
          } else if (s.temperature <= 0) {
            t.id = 'a' + int32_t((a.req.prompt_ids.size() + size_t(a.generated)) % 26);
          } else {
            uint64_t x = s.seed.value_or(a.handle * 7919) * 6364136223846793005ull +
                         uint64_t(a.generated) * 1442695040888963407ull;
            x ^= x >> 29;
            t.id = 'a' + int32_t(x % 26);
          }
          if (!t.special) t.text = std::string(1, char(t.id));
          t.logprob = -0.25f - 0.01f * float(t.id % 26);  // differs by token (best_of ranks by it)
          for (int k = 0; k < s.logprobs; ++k)
            t.top.push_back({t.id + k, t.logprob - float(k), std::string(1, char(t.id + k))});
          ++a.generated;
          a.text += t.text;
          ev.tokens.push_back(t);
          bool stop = false;
          for (size_t si = 0; si < s.stop.size() && !stop; ++si) {
            const size_t pos = a.text.find(s.stop[si], a.sent > s.stop[si].size() ? a.sent - s.stop[si].size() : 0);
            if (pos != std::string::npos) {
              stop = true;
              const size_t end = a.req.include_stop_str_in_output ? pos + s.stop[si].size() : pos;
              if (end > a.sent) ev.text_delta = a.text.substr(a.sent, end - a.sent);
              a.sent = a.text.size();
              ev.finish = FinishReason::kStopString;
              ev.stop_string = s.stop[si];
            }
          }
          if (!stop) {
            const size_t keep = held_suffix(a.text, s.stop);
            if (a.text.size() - keep > a.sent) {
              ev.text_delta = a.text.substr(a.sent, a.text.size() - keep - a.sent);
              a.sent = a.text.size() - keep;
            }
            if (eos) {
              ev.finish = FinishReason::kEos;
            } else if (a.generated >= s.max_new_tokens.value_or(opt_.max_model_len)) {
              ev.finish = FinishReason::kLength;
            }
            if (ev.finished() && a.sent < a.text.size()) {
              ev.text_delta += a.text.substr(a.sent);
              a.sent = a.text.size();
            }
          }
        }
        if (ev.finished()) {
          if (a.req.prompt_logprobs >= 0) {
            // Every prompt token has logprob -1 (the first none) and tops its own top list.
            for (size_t i = 0; i < a.req.prompt_ids.size(); ++i) {
              GeneratedToken t;
              t.id = a.req.prompt_ids[i];
              t.text = t.id < 256 ? std::string(1, char(t.id)) : std::string();
              t.logprob = i == 0 ? std::numeric_limits<float>::quiet_NaN() : -1.0f;
              if (i > 0 && a.req.prompt_logprobs > 0) t.top.push_back({t.id, -1.0f, t.text});
              ev.prompt_logprobs.push_back(std::move(t));
            }
          }
          ev.prompt_tokens = int64_t(a.req.prompt_ids.size());
          ev.generated_tokens = a.generated;
          ev.cached_prompt_tokens = 0;
          ev.seed = a.req.sampling.seed.value_or(0);
          out.emplace_back(std::move(a.cb), std::move(ev));
          it = active_.erase(it);
        } else {
          out.emplace_back(a.cb, std::move(ev));
          ++it;
        }
      }
    }
    for (auto& [cb, ev] : out) cb(std::move(ev));
    out.clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(tick_us_.load()));
  }
}

std::string run_reply_source(Reply& r, HttpResponse* head) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool woke = false;
  };
  auto sig = std::make_shared<Signal>();
  r.source->start([sig] {
    std::lock_guard<std::mutex> lock(sig->mu);
    sig->woke = true;
    sig->cv.notify_all();
  });
  std::string out;
  while (!r.source->poll(out)) {
    std::unique_lock<std::mutex> lock(sig->mu);
    sig->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return sig->woke; });
    sig->woke = false;
  }
  if (head) *head = r.streamed ? r.head : r.source->final_head();
  return out;
}

}  // namespace fg::server::testing
