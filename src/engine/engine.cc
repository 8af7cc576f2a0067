// Engine: the engine thread and the locked inbox client threads use to reach it.
#include "engine/engine.h"

namespace fg {

Engine::Engine(const EngineConfig& config, std::unique_ptr<StepRunner> runner)
    : runner_(std::move(runner)), core_(config, *runner_) {
  snapshot_ = core_.stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  shutdown();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<RequestHandle> Engine::submit(Request request) {
  const uint64_t id = next_id_.fetch_add(1);
  FG_ASSIGN_OR_RETURN(auto seq, core_.prepare(std::move(request), id));
  RequestHandle h{id, seq->events};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(ErrorCode::kCancelled, "the engine is shutting down");
    inbox_.push_back(std::move(seq));
  }
  cv_.notify_all();
  return h;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

void Engine::loop() {
  std::vector<std::unique_ptr<Sequence>> arrived;
  std::vector<uint64_t> cancels;
  for (;;) {
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = core_.has_work();
      cv_.wait(lock, [&] { return stopping_ || busy || !inbox_.empty() || !cancels_.empty(); });
      arrived.swap(inbox_);
      cancels.swap(cancels_);
      stop = stopping_;
    }
    for (auto& seq : arrived) core_.add(std::move(seq));
    arrived.clear();
    for (uint64_t id : cancels) core_.cancel(id);
    cancels.clear();
    if (stop) {
      core_.cancel_all();
    } else if (core_.has_work()) {
      // A failed step already ended its requests with an error event; the loop carries on.
      (void)core_.step();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      snapshot_ = core_.stats();
    }
    if (stop) return;
  }
}

}  // namespace fg
