// Server metrics and their Prometheus text exposition (GET /metrics).
//
// Counters and histograms are updated from HTTP threads (one mutex per histogram, atomics for
// counters); gauges that belong to the engine (queue length, running sequences, KV pages, batch
// sizes) are read from GenerationBackend::stats() at scrape time, so they are never stale.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/generation_backend.h"

namespace fg::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  HistogramSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  HistogramSnapshot data_;
};

class Metrics {
 public:
  Metrics();

  // One finished HTTP request (any route), by route pattern and status code.
  void count_request(const std::string& route, int status);
  // One finished generation (one choice).
  void count_finish(FinishReason reason);
  void add_tokens(int64_t prompt, int64_t cached_prompt, int64_t generated);
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_itl(double seconds) { itl_.observe(seconds); }
  void observe_e2e(double seconds) { e2e_.observe(seconds); }
  void set_in_flight(int64_t n) { in_flight_.store(n); }
  void set_queued(int64_t n) { queued_.store(n); }
  // Open and refused HTTP connections, read at scrape time (set by the transport's owner).
  void set_connection_counts(std::function<std::pair<int64_t, int64_t>()> open_and_refused) {
    connection_counts_ = std::move(open_and_refused);
  }

  // The whole exposition: server metrics plus the backend's gauges.
  std::string render_prometheus(const BackendStats& stats, const ModelInfo& info) const;

  // For tests and logs.
  int64_t requests_with_status(int status) const;
  int64_t generated_tokens() const { return generated_tokens_.load(); }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, int64_t> finishes_;
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> cached_prompt_tokens_{0};
  std::atomic<int64_t> generated_tokens_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> queued_{0};
  std::function<std::pair<int64_t, int64_t>()> connection_counts_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
};

}  // namespace fg::server
