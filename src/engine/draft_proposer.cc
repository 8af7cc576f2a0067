// DraftModelProposer (see draft_proposer.h).
#include "engine/draft_proposer.h"

#include <algorithm>

#include "backend/sampling_rule.h"

namespace fg {

namespace {
// Draws of the draft's own samples, apart from the target's streams.
constexpr uint64_t kDraftStream = 0x6a09e667f3bcc909ull;
}  // namespace

DraftModelProposer::DraftModelProposer(StepRunner& runner, int32_t max_batch_tokens)
    : runner_(runner),
      pool_(runner.kv_num_pages(), runner.kv_page_size()),
      max_batch_tokens_(max_batch_tokens),
      vocab_(runner.vocab_size()) {
  FG_CHECK(max_batch_tokens > 0, "draft proposer: a positive token budget");
}

void DraftModelProposer::release(Sequence& seq) {
  for (auto it = seq.draft_pages.rbegin(); it != seq.draft_pages.rend(); ++it) pool_.release(*it);
  seq.draft_pages.clear();
  seq.draft_computed = 0;
}

void DraftModelProposer::draw(const Tensor& logits, std::span<Sequence* const> seqs) {
  const int32_t m = int32_t(seqs.size());
  const size_t V = size_t(vocab_);
  if (ids_device_.bytes() < size_t(m) * sizeof(int32_t)) {
    ids_device_ = runner_.backend().alloc(size_t(std::max(m, 64)) * sizeof(int32_t));
    ids_host_ = runner_.backend().alloc_host(size_t(std::max(m, 64)) * sizeof(int32_t));
  }
  bool any_sampled = false;
  rows_.clear();
  for (Sequence* s : seqs) {
    SamplingRow r;  // greedy rows: the argmax
    if (s->params.temperature > 0.0f) {
      r = SamplingRow{s->params.rule()};
      any_sampled = true;
    }
    rows_.push_back(r);
  }
  Backend& backend = runner_.backend();
  Tensor ids = Tensor::contiguous(ids_device_.data(), DType::kI32, backend.device(), {m});
  if (any_sampled) {
    // Sampled requests need the whole distribution q (the target's rejection test divides by it):
    // every row's, from the backend (a point mass on the argmax for greedy rows).
    const size_t bytes = size_t(m) * V * sizeof(float);
    if (dist_host_.bytes() < bytes) {
      dist_host_ = backend.alloc_host(bytes);
      dist_device_ = backend.alloc(bytes);
    }
    for (int32_t i = 0; i < m; ++i) rows_[size_t(i)].dist_row = i;
    Tensor dist = Tensor::contiguous(dist_device_.data(), DType::kF32, backend.device(), {m, int64_t(V)});
    backend.sample(logits, rows_, ids, &dist);
    backend.copy_to_host(dist_host_.data(), dist_device_.data(), bytes);
    backend.synchronize();
    const auto* dists = static_cast<const float*>(dist_host_.data());
    for (int32_t i = 0; i < m; ++i) {
      Sequence& s = *seqs[size_t(i)];
      const size_t at = s.draft_probs.size();
      s.draft_probs.insert(s.draft_probs.end(), dists + size_t(i) * V, dists + size_t(i + 1) * V);
      const float* q = s.draft_probs.data() + at;
      // A draw from q with the draft's own stream, at the output position the draft stands for.
      const uint64_t pos = uint64_t(s.num_output()) + s.draft.size();
      const double target = double(sample_uniform(s.seed ^ kDraftStream, pos));
      double cum = 0.0;
      int32_t pick = -1;
      for (int64_t t = 0; t < vocab_; ++t) {
        if (q[t] <= 0.0f) continue;
        pick = int32_t(t);
        cum += q[t];
        if (cum > target) break;
      }
      s.draft.push_back(pick);
    }
    return;
  }
  backend.sample(logits, rows_, ids);
  auto* ids_host = static_cast<int32_t*>(ids_host_.data());
  backend.copy_to_host(ids_host, ids_device_.data(), size_t(m) * sizeof(int32_t));
  backend.synchronize();
  for (int32_t i = 0; i < m; ++i) seqs[size_t(i)]->draft.push_back(ids_host[i]);
}

void DraftModelProposer::propose(std::span<Sequence* const> seqs, std::span<const int32_t> ks) {
  FG_CHECK(seqs.size() == ks.size(), "draft proposer: one draft length per sequence");
  // ---- step 1: catch the draft's KV up with each sequence; sample d1 where it got there.
  std::vector<Sequence*> active;
  std::vector<int32_t> want;
  std::vector<SequenceChunk> chunks;
  std::vector<Sequence*> chunk_seqs, sampled;
  StepShape shape;
  int32_t budget = max_batch_tokens_;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const int32_t k = ks[i];
    if (k <= 0 || budget <= 0) continue;
    s.draft_computed = std::min(s.draft_computed, s.num_tokens() - 1);
    // Pages for every position the draft writes: up to num_tokens + k - 2 (d_k is never fed).
    const int32_t need = pool_.pages_for_tokens(int64_t(s.num_tokens()) + k - 1) - int32_t(s.draft_pages.size());
    if (need > 0 && !pool_.allocate(need, s.draft_pages)) continue;
    const int32_t n = std::min(s.num_tokens() - s.draft_computed, budget);
    budget -= n;
    const bool complete = s.draft_computed + n == s.num_tokens();
    SequenceChunk c;
    c.new_tokens = std::span<const int32_t>(s.tokens).subspan(size_t(s.draft_computed), size_t(n));
    c.num_cached = s.draft_computed;
    c.pages = s.draft_pages;
    c.rope_length = s.num_prompt;
    c.logits = complete ? LogitsWanted::kLast : LogitsWanted::kNone;
    chunks.push_back(c);
    chunk_seqs.push_back(&s);
    ++shape.num_seqs;
    shape.total_q += n;
    shape.num_logits += complete ? 1 : 0;
    shape.max_q_len = std::max(shape.max_q_len, n);
    shape.max_kv_len = std::max(shape.max_kv_len, s.draft_computed + n);
    if (complete) {
      sampled.push_back(&s);
      active.push_back(&s);
      want.push_back(k);
    }
  }
  if (chunks.empty()) return;
  // A failed draft step (it validates like any step) only costs this step's drafts.
  auto run = [&](const StepShape& sh, std::span<const SequenceChunk> cs) -> Result<Tensor> {
    StepWriter w = runner_.begin_step(sh);
    for (const SequenceChunk& c : cs) FG_RETURN_IF_ERROR(w.add(c));
    return runner_.forward(w.finish());
  };
  {
    Result<Tensor> logits = run(shape, chunks);
    if (!logits.is_ok()) {
      for (Sequence* s : chunk_seqs) release(*s);
      return;
    }
    for (size_t i = 0; i < chunks.size(); ++i) chunk_seqs[i]->draft_computed += int32_t(chunks[i].new_tokens.size());
    if (!sampled.empty()) draw(*logits, sampled);
  }
  // ---- steps 2..k: feed the newest draft, sample the next.
  for (int32_t j = 1;; ++j) {
    std::vector<Sequence*> next;
    for (size_t i = 0; i < active.size(); ++i)
      if (want[i] > j) next.push_back(active[i]);
    if (next.empty()) break;
    StepShape sh;
    sh.num_seqs = int(next.size());
    sh.total_q = sh.num_seqs;
    sh.num_logits = sh.num_seqs;
    sh.max_q_len = 1;
    for (Sequence* s : next) sh.max_kv_len = std::max(sh.max_kv_len, s->draft_computed + 1);
    std::vector<SequenceChunk> cs;
    for (Sequence* s : next) {
      SequenceChunk c;
      c.new_tokens = std::span<const int32_t>(&s->draft.back(), 1);
      c.num_cached = s->draft_computed;
      c.pages = s->draft_pages;
      c.rope_length = s->num_prompt;
      c.logits = LogitsWanted::kLast;
      cs.push_back(c);
    }
    Result<Tensor> logits = run(sh, cs);
    if (!logits.is_ok()) return;  // the drafts so far stand; their KV is written
    for (Sequence* s : next) ++s->draft_computed;
    draw(*logits, next);
  }
}

}  // namespace fg
