// ReadyQueue, EventStream and the helpers of request.h.
#include "engine/request.h"

namespace fg {

void ReadyQueue::mark(uint64_t id) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(id);
    wake = sleeping_;
    sleeping_ = false;
  }
  if (wake) cv_.notify_one();
}

bool ReadyQueue::wait(std::vector<uint64_t>& out) {
  std::unique_lock<std::mutex> lock(mu_);
  while (ready_.empty() && !closed_) {
    sleeping_ = true;
    cv_.wait(lock);
  }
  sleeping_ = false;
  ++wakeups_;
  if (closed_) return false;
  out.insert(out.end(), ready_.begin(), ready_.end());
  ready_.clear();
  return true;
}

void ReadyQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

uint64_t ReadyQueue::wakeups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wakeups_;
}

void EventStream::push(RequestEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    FG_CHECK(!ended_, "event pushed after the stream's finishing event");
    if (event.finish.has_value()) ended_ = true;
    queue_.push_back(std::move(event));
  }
  cv_.notify_all();
  if (ready_) ready_->mark(id_);
}

std::optional<RequestEvent> EventStream::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || ended_; });
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

std::optional<RequestEvent> EventStream::try_next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool EventStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

RequestOutput RequestHandle::wait() const {
  RequestOutput out;
  out.id = id;
  while (auto e = events->next()) {
    out.cached_tokens = e->cached_tokens;
    out.draft_tokens = e->draft_tokens;
    out.accepted_draft_tokens = e->accepted_draft_tokens;
    if (!e->prompt_logprobs.empty()) out.prompt_logprobs = std::move(e->prompt_logprobs);
    if (e->token.has_value()) {
      out.output_ids.push_back(*e->token);
      if (e->has_logprobs) {
        out.logprobs.push_back(e->logprob);
        out.top_logprobs.push_back(std::move(e->top_logprobs));
      }
    }
    if (e->finish.has_value()) {
      out.finish_reason = *e->finish;
      out.status = e->status;
    }
  }
  return out;
}

}  // namespace fg
