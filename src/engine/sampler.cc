// Sampler: host-side penalties and logprobs around Backend::sample (policy in sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "spec/verify.h"

namespace fg {

Sampler::Sampler(Backend& backend, int32_t vocab_size, int32_t max_rows)
    : backend_(backend), vocab_(vocab_size), max_rows_(max_rows) {
  FG_CHECK(vocab_size > 0 && max_rows > 0);
  ids_device_ = backend_.alloc(size_t(max_rows) * sizeof(int32_t));
  ids_host_ = backend_.alloc_host(size_t(max_rows) * sizeof(int32_t));
  rows_.reserve(size_t(max_rows));
}

void Sampler::apply_penalties(const Sequence& seq, std::span<const int32_t> extra, float* row) const {
  if (seq.params.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(seq.tokens.begin(), seq.tokens.end());
    seen.insert(seen.end(), extra.begin(), extra.end());
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
    std::unordered_map<int32_t, int32_t> counts = seq.output_counts;
    for (int32_t t : extra) ++counts[t];
    for (const auto& [t, count] : counts) {
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
  for (int i = 0; i < k; ++i) {
    const int32_t id = ids[size_t(i)];
    if (row[id] == -INFINITY) break;  // masked by a constraint: not a candidate
    out.top_logprobs.push_back({id, row[id] - log_z});
  }
}

Status Sampler::sample(Tensor& logits, std::span<const SampleGroup> groups, std::vector<SampleOutcome>& out) {
  int32_t m = 0;
  for (const SampleGroup& g : groups) m += g.rows();
  if (m == 0) return Status::ok();
  if (m > max_rows_) return internal_error("sampler got more rows than it was sized for");
  if (logits.ndim != 2 || logits.size(0) != m || logits.size(1) != vocab_ || logits.dtype != DType::kF32 ||
      !logits.is_contiguous()) {
    return internal_error("sampler expects contiguous f32 logits [" + std::to_string(m) + ", " +
                          std::to_string(vocab_) + "], got " + logits.describe());
  }
  const size_t V = size_t(vocab_);
  // Sampled verification runs on the host; penalties and logprobs need the rows there too.
  auto verified_on_host = [](const SampleGroup& g) { return !g.draft.empty() && g.seq->params.temperature > 0.0f; };
  bool any_penalty = false, any_host = false;
  int32_t constrained = 0;
  for (const SampleGroup& g : groups) {
    any_penalty |= g.seq->params.needs_penalties();
    any_host |= g.seq->params.needs_penalties() || g.seq->params.wants_logprobs() || verified_on_host(g);
    constrained += g.seq->constraint ? 1 : 0;
  }
  // Constrained rows' masks, filled on the host while the GPU still runs the step's layers.
  const size_t words = (V + 31) / 32;
  if (constrained > 0) {
    if (mask_host_.bytes() < size_t(constrained) * words * 4) {
      mask_host_ = backend_.alloc_host(size_t(constrained) * words * 4);
      mask_device_ = backend_.alloc(size_t(constrained) * words * 4);
      mask_rows_host_ = backend_.alloc_host(size_t(constrained) * 4);
      mask_rows_device_ = backend_.alloc(size_t(constrained) * 4);
    }
    auto* bits = static_cast<uint32_t*>(mask_host_.data());
    auto* rows = static_cast<int32_t*>(mask_rows_host_.data());
    int32_t r = 0, i = 0;
    for (const SampleGroup& g : groups) {
      if (g.seq->constraint) {
        FG_CHECK(g.draft.empty(), "a constrained sequence never verifies drafts");
        rows[i] = r;
        g.seq->constraint->fill_mask(std::span<uint32_t>(bits + size_t(i) * words, words));
        ++i;
      }
      r += g.rows();
    }
  }
  float* host = nullptr;
  const size_t block_bytes = size_t(m) * V * sizeof(float);
  if (any_host) {
    if (host_logits_.bytes() < block_bytes) host_logits_ = backend_.alloc_host(block_bytes);
    host = static_cast<float*>(host_logits_.data());
    backend_.copy_to_host(host, logits.data, block_bytes);
    backend_.synchronize();
    if (any_penalty) {
      int32_t r = 0;
      for (const SampleGroup& g : groups) {
        for (int32_t j = 0; j < g.rows(); ++j, ++r)
          if (g.seq->params.needs_penalties()) apply_penalties(*g.seq, g.draft.first(size_t(j)), host + size_t(r) * V);
      }
    }
    // Masks on the host rows too: logprobs are those of the constrained distribution.
    const auto* bits = static_cast<const uint32_t*>(mask_host_.data());
    const auto* rows = static_cast<const int32_t*>(mask_rows_host_.data());
    for (int32_t i = 0; i < constrained; ++i) {
      float* row = host + size_t(rows[i]) * V;
      const uint32_t* b = bits + size_t(i) * words;
      for (size_t t = 0; t < V; ++t)
        if (!((b[t >> 5] >> (t & 31)) & 1u)) row[t] = -INFINITY;
    }
    if (any_penalty || constrained > 0) backend_.copy_from_host(logits.data, host, block_bytes);
  } else if (constrained > 0) {
    backend_.copy_from_host(mask_device_.data(), mask_host_.data(), size_t(constrained) * words * 4);
    backend_.copy_from_host(mask_rows_device_.data(), mask_rows_host_.data(), size_t(constrained) * 4);
    Tensor rows = Tensor::contiguous(mask_rows_device_.data(), DType::kI32, backend_.device(), {constrained});
    Tensor masks =
        Tensor::contiguous(mask_device_.data(), DType::kI32, backend_.device(), {constrained, int64_t(words)});
    backend_.mask_logits(logits, rows, masks);
  }

  // Every row with the rule and the output position it has without speculation.
  rows_.clear();
  for (const SampleGroup& g : groups) {
    for (int32_t j = 0; j < g.rows(); ++j) {
      SamplingRow r{g.seq->params.rule()};
      r.seed = g.seq->seed;
      r.counter = uint64_t(g.seq->num_output() + j);
      rows_.push_back(r);
    }
  }
  Tensor ids = Tensor::contiguous(ids_device_.data(), DType::kI32, backend_.device(), {m});
  backend_.sample(logits, rows_, ids);
  int32_t* ids_host = static_cast<int32_t*>(ids_host_.data());
  backend_.copy_to_host(ids_host, ids_device_.data(), size_t(m) * sizeof(int32_t));
  backend_.synchronize();
  for (int32_t i = 0; i < m; ++i) {
    if (ids_host[i] < 0 || ids_host[i] >= vocab_)
      return internal_error("the backend sampled token " + std::to_string(ids_host[i]) + " outside the vocabulary");
  }

  int32_t r0 = 0;
  for (const SampleGroup& g : groups) {
    const Sequence& s = *g.seq;
    SampleOutcome o;
    std::vector<int32_t> tokens;
    if (g.draft.empty()) {
      tokens.push_back(ids_host[r0]);
    } else if (!verified_on_host(g)) {
      spec::Verdict v = spec::verify_greedy(g.draft, std::span<const int32_t>(ids_host + r0, size_t(g.rows())));
      tokens = std::move(v.tokens);
      o.accepted = v.accepted;
    } else {
      dist_.resize(size_t(g.rows()) * V);
      std::vector<const float*> p, q;
      for (int32_t j = 0; j < g.rows(); ++j) {
        cpu_sampling_distribution(host + size_t(r0 + j) * V, vocab_, rows_[size_t(r0 + j)], scratch_,
                                  dist_.data() + size_t(j) * V);
        p.push_back(dist_.data() + size_t(j) * V);
      }
      if (!g.draft_probs.empty()) {
        if (g.draft_probs.size() != g.draft.size() * V) return internal_error("draft distributions of the wrong size");
        for (size_t j = 0; j < g.draft.size(); ++j) q.push_back(g.draft_probs.data() + j * V);
      }
      spec::Verdict v = spec::verify_sampled(g.draft, p, q, vocab_, s.seed, uint64_t(s.num_output()));
      tokens = std::move(v.tokens);
      o.accepted = v.accepted;
    }
    for (size_t j = 0; j < tokens.size(); ++j) {
      SampledToken t;
      t.token = tokens[j];
      if (s.params.wants_logprobs()) fill_logprobs(host + size_t(r0) * V + j * V, t.token, s.params.logprobs, t);
      o.tokens.push_back(std::move(t));
    }
    out.push_back(std::move(o));
    r0 += g.rows();
  }
  return Status::ok();
}

}  // namespace fg
