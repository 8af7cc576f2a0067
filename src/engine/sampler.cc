// Sampler: host-side penalties and logit biases around Backend::sample and Backend::logprobs (policy in sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "spec/verify.h"

namespace fg {

Sampler::Sampler(Backend& backend, int32_t vocab_size, int32_t max_rows, std::vector<int32_t> eos_ids)
    : backend_(backend), vocab_(vocab_size), max_rows_(max_rows), eos_ids_(std::move(eos_ids)) {
  FG_CHECK(vocab_size > 0 && max_rows > 0);
  ids_device_ = backend_.alloc(size_t(max_rows) * sizeof(int32_t));
  ids_host_ = backend_.alloc_host(size_t(max_rows) * sizeof(int32_t));
  rows_.reserve(size_t(max_rows));
}

void Sampler::adjust_row(const Sequence& seq, std::span<const int32_t> extra, float* row) const {
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
  for (const auto& [t, bias] : seq.params.logit_bias) row[t] += bias;  // ids validated at submit
  if (seq.num_output() + int32_t(extra.size()) < seq.params.min_new_tokens) {
    if (!seq.params.ignore_eos) {
      for (int32_t t : eos_ids_)
        if (t >= 0 && t < vocab_) row[t] = -INFINITY;
    }
    for (int32_t t : seq.params.stop_token_ids) row[t] = -INFINITY;  // ids validated at submit
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
  // Sampled verification reads the rule's distribution of each of the group's rows (the backend's,
  // copied to the host); penalties and biases need the logits rows on the host, and so does the
  // logprob of a draft token verification keeps.
  auto verified_sampled = [](const SampleGroup& g) { return !g.draft.empty() && g.seq->params.temperature > 0.0f; };
  bool any_adjusted = false, any_host = false;  // (adjusts: penalties, biases, min_new_tokens)
  int32_t constrained = 0;
  // Rows whose log-probabilities are asked for (every row of such a group), and the most top
  // entries any of them wants.
  lp_rows_.clear();
  int top_n = 0;
  // The rows sampled verification reads the distributions of, in group order.
  std::vector<int32_t> dist_rows;
  {
    int32_t r = 0;
    for (const SampleGroup& g : groups) {
      const bool adjusted = adjusts(*g.seq, 0);  // row 0 adjusts whenever a later row of the group does
      any_adjusted |= adjusted;
      any_host |= adjusted || (verified_sampled(g) && g.seq->params.wants_logprobs());
      if (verified_sampled(g))
        for (int32_t j = 0; j < g.rows(); ++j) dist_rows.push_back(r + j);
      constrained += g.seq->constraint ? 1 : 0;
      if (g.seq->params.wants_logprobs()) {
        for (int32_t j = 0; j < g.rows(); ++j) lp_rows_.push_back(r + j);
        top_n = std::max(top_n, g.seq->params.logprobs);
      }
      r += g.rows();
    }
  }
  if (top_n > Backend::kMaxTopLogprobs) return internal_error("more top logprobs asked for than the backend lists");
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
    if (any_adjusted) {
      int32_t r = 0;
      for (const SampleGroup& g : groups) {
        for (int32_t j = 0; j < g.rows(); ++j, ++r)
          if (adjusts(*g.seq, j)) adjust_row(*g.seq, g.draft.first(size_t(j)), host + size_t(r) * V);
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
    if (any_adjusted || constrained > 0) backend_.copy_from_host(logits.data, host, block_bytes);
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
  const auto n_dist = int64_t(dist_rows.size());
  Tensor dist;
  if (n_dist > 0) {
    const size_t bytes = size_t(n_dist) * V * sizeof(float);
    if (dist_host_.bytes() < bytes) {
      dist_host_ = backend_.alloc_host(bytes);
      dist_device_ = backend_.alloc(bytes);
    }
    for (int64_t i = 0; i < n_dist; ++i) rows_[size_t(dist_rows[size_t(i)])].dist_row = int32_t(i);
    dist = Tensor::contiguous(dist_device_.data(), DType::kF32, backend_.device(), {n_dist, int64_t(V)});
  }
  Tensor ids = Tensor::contiguous(ids_device_.data(), DType::kI32, backend_.device(), {m});
  backend_.sample(logits, rows_, ids, n_dist > 0 ? &dist : nullptr);
  // Log-probabilities on the backend, from the logits as sampled (penalties, biases and masks applied):
  // the chosen row's value at the sampled id, the log-normalizer and the top entries.
  const auto r_lp = int64_t(lp_rows_.size());
  if (r_lp > 0) {
    if (!lp_rows_device_.data()) {
      const size_t rows_cap = size_t(max_rows_);
      lp_rows_host_ = backend_.alloc_host(rows_cap * sizeof(int32_t));
      lp_rows_device_ = backend_.alloc(rows_cap * sizeof(int32_t));
      lp_out_host_ = backend_.alloc_host(rows_cap * kLpWords * 4);
      lp_out_device_ = backend_.alloc(rows_cap * kLpWords * 4);
    }
    std::copy(lp_rows_.begin(), lp_rows_.end(), static_cast<int32_t*>(lp_rows_host_.data()));
    backend_.copy_from_host(lp_rows_device_.data(), lp_rows_host_.data(), size_t(r_lp) * sizeof(int32_t));
    // One device block, [stats (r, 2) | top ids (r, n) | top logprobs (r, n)], one copy back.
    auto* out_dev = static_cast<char*>(lp_out_device_.data());
    const Device dev = backend_.device();
    Tensor lp_rows = Tensor::contiguous(lp_rows_device_.data(), DType::kI32, dev, {r_lp});
    Tensor stats = Tensor::contiguous(out_dev, DType::kF32, dev, {r_lp, 2});
    Tensor top_ids = Tensor::contiguous(out_dev + size_t(r_lp) * 8, DType::kI32, dev, {r_lp, top_n});
    Tensor top_lp =
        Tensor::contiguous(out_dev + size_t(r_lp) * (8 + 4 * size_t(top_n)), DType::kF32, dev, {r_lp, top_n});
    backend_.logprobs(logits, lp_rows, ids, top_n, stats, top_ids, top_lp);
    backend_.copy_to_host(lp_out_host_.data(), out_dev, size_t(r_lp) * (8 + 8 * size_t(top_n)));
  }
  int32_t* ids_host = static_cast<int32_t*>(ids_host_.data());
  backend_.copy_to_host(ids_host, ids_device_.data(), size_t(m) * sizeof(int32_t));
  if (n_dist > 0) backend_.copy_to_host(dist_host_.data(), dist_device_.data(), size_t(n_dist) * V * sizeof(float));
  backend_.synchronize();
  const float* lp_stats = nullptr;
  const int32_t* lp_top_ids = nullptr;
  const float* lp_top = nullptr;
  if (r_lp > 0) {
    lp_stats = static_cast<const float*>(lp_out_host_.data());
    lp_top_ids = reinterpret_cast<const int32_t*>(lp_stats + 2 * r_lp);
    lp_top = reinterpret_cast<const float*>(lp_top_ids + r_lp * top_n);
  }
  for (int32_t i = 0; i < m; ++i) {
    if (ids_host[i] < 0 || ids_host[i] >= vocab_)
      return internal_error("the backend sampled token " + std::to_string(ids_host[i]) + " outside the vocabulary");
  }

  int32_t r0 = 0;
  int64_t lp0 = 0;   // the group's first entry in lp_rows_
  size_t dist0 = 0;  // the group's first row in dist_host_
  for (const SampleGroup& g : groups) {
    const Sequence& s = *g.seq;
    SampleOutcome o;
    std::vector<int32_t> tokens;
    if (g.draft.empty()) {
      tokens.push_back(ids_host[r0]);
    } else if (!verified_sampled(g)) {
      spec::Verdict v = spec::verify_greedy(g.draft, std::span<const int32_t>(ids_host + r0, size_t(g.rows())));
      tokens = std::move(v.tokens);
      o.accepted = v.accepted;
    } else {
      std::vector<const float*> p, q;
      const auto* dists = static_cast<const float*>(dist_host_.data());
      for (int32_t j = 0; j < g.rows(); ++j) p.push_back(dists + (dist0 + size_t(j)) * V);
      dist0 += size_t(g.rows());
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
      if (s.params.wants_logprobs()) {
        const int64_t e = lp0 + int64_t(j);
        // The backend took the sampled id's value; a token that differs (sampled verification
        // kept a draft) is read from the host rows that verification used.
        if (t.token == ids_host[r0 + int32_t(j)]) {
          t.logprob = lp_stats[2 * e];
        } else {
          FG_CHECK(host != nullptr, "a logprob of a token the backend did not sample needs the host rows");
          t.logprob = host[size_t(r0) * V + j * V + size_t(t.token)] - lp_stats[2 * e + 1];
        }
        for (int k = 0; k < s.params.logprobs; ++k) {
          const int32_t id = lp_top_ids[e * top_n + k];
          if (id < 0) break;  // the row's unmasked tokens ran out
          t.top_logprobs.push_back({id, lp_top[e * top_n + k]});
        }
      }
      o.tokens.push_back(std::move(t));
    }
    out.push_back(std::move(o));
    if (s.params.wants_logprobs()) lp0 += g.rows();
    r0 += g.rows();
  }
  return Status::ok();
}

Status Sampler::prompt_logprobs(const Tensor& logits, std::span<const int32_t> targets, int n,
                                std::vector<PromptLogprob>& out) {
  const auto r = int64_t(targets.size());
  out.clear();
  if (r == 0) return Status::ok();
  if (n < 0 || n > Backend::kMaxTopLogprobs) return internal_error("prompt logprobs: top n out of range");
  if (logits.ndim != 2 || logits.size(0) != r || logits.size(1) != vocab_ || logits.dtype != DType::kF32 ||
      !logits.is_contiguous())
    return internal_error("prompt logprobs expect contiguous f32 logits [" + std::to_string(r) + ", " +
                          std::to_string(vocab_) + "], got " + logits.describe());
  if (r > prompt_cap_) {
    prompt_in_host_ = backend_.alloc_host(size_t(r) * 2 * sizeof(int32_t));
    prompt_in_device_ = backend_.alloc(size_t(r) * 2 * sizeof(int32_t));
    prompt_out_host_ = backend_.alloc_host(size_t(r) * kLpWords * 4);
    prompt_out_device_ = backend_.alloc(size_t(r) * kLpWords * 4);
    prompt_cap_ = r;
  }
  auto* in = static_cast<int32_t*>(prompt_in_host_.data());
  for (int64_t i = 0; i < r; ++i) {
    in[i] = int32_t(i);
    in[r + i] = targets[size_t(i)];
  }
  backend_.copy_from_host(prompt_in_device_.data(), in, size_t(r) * 2 * sizeof(int32_t));
  const Device dev = backend_.device();
  auto* in_dev = static_cast<int32_t*>(prompt_in_device_.data());
  auto* out_dev = static_cast<char*>(prompt_out_device_.data());
  Tensor rows = Tensor::contiguous(in_dev, DType::kI32, dev, {r});
  Tensor tokens = Tensor::contiguous(in_dev + r, DType::kI32, dev, {r});
  Tensor stats = Tensor::contiguous(out_dev, DType::kF32, dev, {r, 2});
  Tensor top_ids = Tensor::contiguous(out_dev + size_t(r) * 8, DType::kI32, dev, {r, n});
  Tensor top_lp = Tensor::contiguous(out_dev + size_t(r) * (8 + 4 * size_t(n)), DType::kF32, dev, {r, n});
  backend_.logprobs(logits, rows, tokens, n, stats, top_ids, top_lp);
  backend_.copy_to_host(prompt_out_host_.data(), out_dev, size_t(r) * (8 + 8 * size_t(n)));
  backend_.synchronize();
  const auto* lp_stats = static_cast<const float*>(prompt_out_host_.data());
  const auto* lp_top_ids = reinterpret_cast<const int32_t*>(lp_stats + 2 * r);
  const auto* lp_top = reinterpret_cast<const float*>(lp_top_ids + r * n);
  out.resize(size_t(r));
  for (int64_t i = 0; i < r; ++i) {
    PromptLogprob& p = out[size_t(i)];
    p.id = targets[size_t(i)];
    p.logprob = lp_stats[2 * i];
    for (int k = 0; k < n; ++k) {
      const int32_t id = lp_top_ids[i * n + k];
      if (id < 0) break;
      p.top.push_back({id, lp_top[i * n + k]});
    }
  }
  return Status::ok();
}

}  // namespace fg
