// Prometheus text format 0.0.4 exposition of the server's metrics (see metrics.h).
#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace fg::server {

Histogram::Histogram(std::vector<double> upper_bounds) {
  data_.upper_bounds = std::move(upper_bounds);
  data_.counts.assign(data_.upper_bounds.size() + 1, 0);
}

void Histogram::observe(double value) {
  size_t b = 0;
  while (b < data_.upper_bounds.size() && value > data_.upper_bounds[b]) ++b;
  std::lock_guard<std::mutex> lock(mu_);
  ++data_.counts[b];
  data_.sum += value;
  ++data_.count;
}

HistogramSnapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_;
}

namespace {

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2, 0.3,
                                            0.5,   0.75,   1.0,   2.5,  5.0,   7.5,  10.0,  20.0, 40.0, 80.0};
const std::vector<double> kE2eBounds = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,   1.0,   2.5,
                                        5.0,  10.0,  20.0, 30.0, 60.0, 120.0, 300.0, 600.0};

std::string fmt_double(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double v) {
  header(out, name, type, help);
  out += name;
  out += ' ';
  out += fmt_double(v);
  out += '\n';
}

void histogram(std::string& out, const char* name, const char* help, const HistogramSnapshot& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= h.upper_bounds.size(); ++b) {
    cumulative += b < h.counts.size() ? h.counts[b] : 0;
    const std::string le = b < h.upper_bounds.size() ? fmt_double(h.upper_bounds[b]) : "+Inf";
    out += std::string(name) + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_sum " + fmt_double(h.sum) + "\n";
  out += std::string(name) + "_count " + std::to_string(h.count) + "\n";
}

}  // namespace

Metrics::Metrics() : ttft_(kLatencyBounds), itl_(kLatencyBounds), e2e_(kE2eBounds) {}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::count_finish(FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finishes_[finish_reason_name(reason)];
}

void Metrics::add_tokens(int64_t prompt, int64_t cached_prompt, int64_t generated) {
  prompt_tokens_ += prompt;
  cached_prompt_tokens_ += cached_prompt;
  generated_tokens_ += generated;
}

int64_t Metrics::requests_with_status(int status) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [key, count] : requests_)
    if (key.second == status) n += count;
  return n;
}

std::string Metrics::render_prometheus(const BackendStats& stats, const ModelInfo& info) const {
  std::string out;
  out.reserve(8192);
  header(out, "flashgen_requests_total", "counter", "HTTP requests answered, by route and status code.");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, count] : requests_) {
      out += "flashgen_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(count) + "\n";
    }
    header(out, "flashgen_request_finish_total", "counter", "Finished generations (one per choice), by finish reason.");
    for (const auto& [reason, count] : finishes_)
      out += "flashgen_request_finish_total{reason=\"" + reason + "\"} " + std::to_string(count) + "\n";
  }
  scalar(out, "flashgen_requests_in_flight", "gauge", "HTTP generation requests accepted and not yet answered.",
         double(in_flight_.load()));
  scalar(out, "flashgen_requests_queued", "gauge",
         "HTTP generation requests accepted that have produced nothing yet (--max-queued-requests).",
         double(queued_.load()));
  if (connection_counts_) {
    const auto [open, refused] = connection_counts_();
    scalar(out, "flashgen_http_connections_open", "gauge", "Open HTTP connections (--max-connections).", double(open));
    scalar(out, "flashgen_http_connections_refused_total", "counter",
           "Connections answered 429 because --max-connections were open.", double(refused));
  }
  scalar(out, "flashgen_num_requests_waiting", "gauge", "Requests queued in the engine.", double(stats.waiting));
  scalar(out, "flashgen_num_requests_running", "gauge", "Sequences being prefilled or decoded.", double(stats.running));
  scalar(out, "flashgen_kv_pages_used", "gauge", "KV cache pages held by live sequences.", double(stats.kv_pages_used));
  scalar(out, "flashgen_kv_pages_cached", "gauge", "Evictable KV pages kept by the prefix cache.",
         double(stats.kv_pages_cached));
  scalar(out, "flashgen_kv_pages_total", "gauge", "KV cache pages in the pool.", double(stats.kv_pages_total));
  scalar(out, "flashgen_kv_cache_usage_ratio", "gauge", "kv_pages_used / kv_pages_total.",
         stats.kv_pages_total > 0 ? double(stats.kv_pages_used) / double(stats.kv_pages_total) : 0.0);
  scalar(out, "flashgen_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         double(prompt_tokens_.load()));
  scalar(out, "flashgen_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.",
         double(cached_prompt_tokens_.load()));
  scalar(out, "flashgen_generation_tokens_total", "counter", "Generated tokens of finished requests.",
         double(generated_tokens_.load()));
  const int64_t prompt = prompt_tokens_.load();
  scalar(out, "flashgen_prefix_cache_hit_ratio", "gauge",
         "Share of prompt tokens served from the prefix cache since start.",
         prompt > 0 ? double(cached_prompt_tokens_.load()) / double(prompt) : 0.0);
  scalar(out, "flashgen_preemptions_total", "counter", "Sequences preempted (recomputed later).",
         double(stats.preemptions));
  scalar(out, "flashgen_engine_steps_total", "counter", "Engine steps (forward passes).", double(stats.steps));
  scalar(out, "flashgen_step_latency_budget_seconds", "gauge",
         "Latency budget of an engine step that carries running decodes (--max-step-latency-ms, or 1.8 times "
         "flashgen_decode_step_seconds); 0 while unknown or with --no-adaptive-prefill.",
         stats.step_latency_budget_seconds);
  scalar(out, "flashgen_decode_step_seconds", "gauge", "Median duration of the latest decode-only engine steps.",
         stats.decode_step_seconds);
  scalar(out, "flashgen_prefill_token_seconds", "gauge",
         "Fitted time one prefill token adds to an engine step that carries running decodes.",
         stats.prefill_token_seconds);
  scalar(out, "flashgen_prefill_chunk_tokens", "gauge",
         "Prefill tokens the latest engine step with running decodes could take under the budget.",
         double(stats.prefill_chunk_tokens));
  scalar(out, "flashgen_prefill_chunk_limited_steps_total", "counter",
         "Engine steps whose prefill filled a chunk the latency budget had cut below the tokens the step had left.",
         double(stats.prefill_chunk_limited_steps));
  scalar(out, "flashgen_jump_forward_tokens_total", "counter",
         "Tokens a constraint forced (jump-forward), run as one multi-token query instead of sampled.",
         double(stats.jump_forward_tokens));
  scalar(out, "flashgen_spec_draft_tokens_total", "counter", "Speculative tokens drafted and verified.",
         double(stats.spec_draft_tokens));
  scalar(out, "flashgen_spec_accepted_tokens_total", "counter", "Speculative drafts the target model accepted.",
         double(stats.spec_accepted_tokens));
  header(out, "flashgen_spec_drafted_by_position_total", "counter",
         "Drafts verified, by their position in the draft (1 = first drafted token).");
  for (size_t i = 0; i < stats.spec_drafted_at.size(); ++i)
    out += "flashgen_spec_drafted_by_position_total{position=\"" + std::to_string(i + 1) + "\"} " +
           std::to_string(stats.spec_drafted_at[i]) + "\n";
  header(out, "flashgen_spec_accepted_by_position_total", "counter",
         "Drafts accepted, by their position in the draft (acceptance at i = accepted / drafted at i).");
  for (size_t i = 0; i < stats.spec_accepted_at.size(); ++i)
    out += "flashgen_spec_accepted_by_position_total{position=\"" + std::to_string(i + 1) + "\"} " +
           std::to_string(stats.spec_accepted_at[i]) + "\n";
  scalar(out, "flashgen_max_model_len", "gauge", "Most tokens (prompt + output) of one sequence.",
         double(info.max_model_len));
  histogram(out, "flashgen_time_to_first_token_seconds", "From request arrival to the first generated token.",
            ttft_.snapshot());
  histogram(out, "flashgen_inter_token_latency_seconds", "Between consecutive generated tokens of one sequence.",
            itl_.snapshot());
  histogram(out, "flashgen_e2e_request_latency_seconds", "From request arrival to its last token.", e2e_.snapshot());
  if (!stats.batch_size.upper_bounds.empty())
    histogram(out, "flashgen_batch_size", "Sequences per engine step.", stats.batch_size);
  return out;
}

}  // namespace fg::server
