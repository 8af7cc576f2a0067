// Sampler: host-side penalties and logprobs around Backend::sample (policy in sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace fg {

Sampler::Sampler(Backend& backend, int32_t vocab_size, int32_t max_rows)
    : backend_(backend), vocab_(vocab_size), max_rows_(max_rows) {
  FG_CHECK(vocab_size > 0 && max_rows > 0);
  ids_device_ = backend_.alloc(size_t(max_rows) * sizeof(int32_t));
  ids_host_ = backend_.alloc_host(size_t(max_rows) * sizeof(int32_t));
  rows_.reserve(size_t(max_rows));
}

void Sampler::apply_penalties(const Sequence& seq, float* row) const {
  if (seq.params.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(seq.tokens.begin(), seq.tokens.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const float p = seq.params.repetition_penalty;
    for (int32_t t : seen) {
      if (t < 0 || t >= vocab_) continue;
      float& x = row[t];
      x = x > 0.0f ? x / p : x * p;
    }
  }
  if (seq.params.presence_penalty != 0.0f || seq.params.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : seq.output_counts) {
      if (t < 0 || t >= vocab_) continue;
      row[t] -= seq.params.presence_penalty + seq.params.frequency_penalty * float(count);
    }
  }
}

void Sampler::fill_logprobs(const float* row, int32_t token, int n, SampledToken& out) const {
  float mx = -INFINITY;
  for (int32_t i = 0; i < vocab_; ++i) mx = std::max(mx, row[i]);
  double sum = 0.0;
  for (int32_t i = 0; i < vocab_; ++i) sum += std::exp(double(row[i] - mx));
  const float log_z = mx + float(std::log(sum));
  out.logprob = row[token] - log_z;
  out.top_logprobs.clear();
  if (n <= 0) return;
  const int k = std::min<int>(n, vocab_);
  std::vector<int32_t> ids(static_cast<size_t>(vocab_));
  for (int32_t i = 0; i < vocab_; ++i) ids[size_t(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  for (int i = 0; i < k; ++i) out.top_logprobs.push_back({ids[size_t(i)], row[ids[size_t(i)]] - log_z});
}

Status Sampler::sample(Tensor& logits, std::span<Sequence* const> seqs, std::vector<SampledToken>& out) {
  const int32_t m = int32_t(seqs.size());
  if (m == 0) return Status::ok();
  if (m > max_rows_) return internal_error("sampler got more rows than it was sized for");
  if (logits.ndim != 2 || logits.size(0) != m || logits.size(1) != vocab_ || logits.dtype != DType::kF32 ||
      !logits.is_contiguous()) {
    return internal_error("sampler expects contiguous f32 logits [" + std::to_string(m) + ", " +
                          std::to_string(vocab_) + "], got " + logits.describe());
  }

  bool any_penalty = false, any_logprobs = false;
  for (const Sequence* s : seqs) {
    any_penalty |= s->params.needs_penalties();
    any_logprobs |= s->params.wants_logprobs();
  }
  float* host = nullptr;
  const size_t block_bytes = size_t(m) * size_t(vocab_) * sizeof(float);
  if (any_penalty || any_logprobs) {
    if (host_logits_.bytes() < block_bytes) host_logits_ = backend_.alloc_host(block_bytes);
    host = static_cast<float*>(host_logits_.data());
    backend_.copy_to_host(host, logits.data, block_bytes);
    backend_.synchronize();
    if (any_penalty) {
      for (int32_t i = 0; i < m; ++i) {
        if (seqs[size_t(i)]->params.needs_penalties())
          apply_penalties(*seqs[size_t(i)], host + size_t(i) * size_t(vocab_));
      }
      backend_.copy_from_host(logits.data, host, block_bytes);
    }
  }

  rows_.clear();
  for (const Sequence* s : seqs) {
    SamplingRow r{s->params.rule()};
    r.seed = s->seed;
    r.counter = uint64_t(s->num_output());
    rows_.push_back(r);
  }
  Tensor ids = Tensor::contiguous(ids_device_.data(), DType::kI32, backend_.device(), {m});
  backend_.sample(logits, rows_, ids);
  int32_t* ids_host = static_cast<int32_t*>(ids_host_.data());
  backend_.copy_to_host(ids_host, ids_device_.data(), size_t(m) * sizeof(int32_t));
  backend_.synchronize();

  for (int32_t i = 0; i < m; ++i) {
    SampledToken t;
    t.token = ids_host[i];
    if (t.token < 0 || t.token >= vocab_) {
      return internal_error("the backend sampled token " + std::to_string(t.token) + " outside the vocabulary");
    }
    const Sequence& s = *seqs[size_t(i)];
    if (s.params.wants_logprobs()) fill_logprobs(host + size_t(i) * size_t(vocab_), t.token, s.params.logprobs, t);
    out.push_back(std::move(t));
  }
  return Status::ok();
}

}  // namespace fg
