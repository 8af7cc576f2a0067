// StepTimeModel and the prefill chunk choice (see step_latency.h).
#include "engine/step_latency.h"

#include <algorithm>
#include <cmath>

namespace fg {

namespace {
double median(std::vector<double> xs) {
  const size_t mid = xs.size() / 2;
  std::nth_element(xs.begin(), xs.begin() + std::ptrdiff_t(mid), xs.end());
  const double hi = xs[mid];
  if (xs.size() % 2 == 1) return hi;
  return 0.5 * (hi + *std::max_element(xs.begin(), xs.begin() + std::ptrdiff_t(mid)));
}
}  // namespace

void StepTimeModel::observe(int32_t decodes, int32_t prefill_tokens, double seconds) {
  if (decodes <= 0 || prefill_tokens < 0 || !std::isfinite(seconds) || seconds < 0.0) return;
  if (prefill_tokens == 0) {
    if (decode_times_.size() < kDecodeWindow) {
      decode_times_.push_back(seconds);
    } else {
      decode_times_[decode_next_] = seconds;
    }
    decode_next_ = (decode_next_ + 1) % kDecodeWindow;
    decode_median_ = median(decode_times_);
    return;
  }
  if (!knows_decode()) return;  // the excess over base needs base
  const double p = double(prefill_tokens);
  prefill_excess_ = kForget * prefill_excess_ + p * (seconds - decode_median_);
  prefill_tokens_ = kForget * prefill_tokens_ + p * p;
  last_prefill_tokens_ = prefill_tokens;
}

double StepTimeModel::prefill_token_seconds() const {
  return prefill_tokens_ > 0.0 ? prefill_excess_ / prefill_tokens_ : 0.0;
}

double StepTimeModel::predict(int32_t prefill_tokens) const {
  return decode_median_ + prefill_token_seconds() * double(prefill_tokens);
}

double step_latency_budget(const StepLatencyConfig& config, const StepTimeModel& model) {
  if (!config.adaptive || !model.knows_decode()) return 0.0;
  return config.max_step_seconds > 0.0 ? config.max_step_seconds : config.decode_factor * model.decode_seconds();
}

int32_t prefill_chunk_limit(const StepLatencyConfig& config, const StepTimeModel& model, int32_t tokens_left) {
  if (!config.adaptive || tokens_left <= 0) return tokens_left;
  if (!model.knows_decode()) return 0;  // this step times the base
  const int32_t min_chunk = std::min(std::max(config.min_prefill_tokens, 1), tokens_left);
  const double room = step_latency_budget(config, model) - model.decode_seconds();
  if (!model.knows_prefill() || room <= 0.0) return min_chunk;  // learn the cost from below; no room
  // Trusted near what was measured: at most twice the latest chunk.
  const int64_t cap = std::min<int64_t>(tokens_left, 2 * int64_t(std::max(model.last_prefill_tokens(), min_chunk)));
  const double slope = model.prefill_token_seconds();
  if (slope <= 0.0) return int32_t(cap);   // prefill cost nothing measurable so far
  const double fit = room / slope + 1e-6;  // (+ 1e-6: a budget that fits n tokens exactly survives rounding)
  if (fit >= double(cap)) return int32_t(cap);
  return std::max(min_chunk, int32_t(std::max(fit, 0.0)));
}

}  // namespace fg
