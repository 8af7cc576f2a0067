// StepLayout, StepWriter (see batch.h).
#include "model/batch.h"

#include <algorithm>
#include <string>

namespace fg {

namespace {
int pages_for(int64_t tokens, int page_size) {
  return int((tokens + page_size - 1) / page_size);
}
}  // namespace

StepLayout StepLayout::make(int total_q, int num_seqs, int num_logits, int pages_per_seq, bool rope_bases) {
  StepLayout m;
  m.total_q = total_q;
  m.num_seqs = num_seqs;
  m.num_logits = num_logits;
  m.pages_per_seq = pages_per_seq;
  m.ids = 0;
  m.pos = m.ids + size_t(total_q);
  m.cu = m.pos + size_t(total_q);
  m.skv = m.cu + size_t(num_seqs) + 1;
  m.bt = m.skv + size_t(num_seqs);
  m.slot = m.bt + size_t(num_seqs) * size_t(pages_per_seq);
  m.lidx = m.slot + size_t(total_q);
  m.base = m.lidx + size_t(num_logits);
  m.words = m.base + (rope_bases ? size_t(total_q) : 0);
  return m;
}

StepShape step_shape(std::span<const SequenceChunk> chunks) {
  StepShape s;
  for (const SequenceChunk& c : chunks) {
    const int n = int(c.new_tokens.size());
    ++s.num_seqs;
    s.total_q += n;
    s.num_logits += c.logits == LogitsWanted::kAll ? n : c.logits == LogitsWanted::kLast ? 1 : 0;
    s.max_q_len = std::max(s.max_q_len, n);
    s.max_kv_len = std::max(s.max_kv_len, c.num_cached + n);
  }
  return s;
}

StepWriter::StepWriter(const StepLayout& layout, int32_t* words, int page_size) {
  FG_CHECK(words != nullptr && page_size > 0, "StepWriter: no block or a page size below 1");
  m_.layout = layout;
  m_.words = words;
  m_.page_size = page_size;
  m_.max_pages_per_seq = layout.pages_per_seq;
  words[layout.cu] = 0;
}

Status StepWriter::add(const SequenceChunk& c) {
  const StepLayout& L = m_.layout;
  const int n = int(c.new_tokens.size());
  const int s = seqs_;
  if (n <= 0) return invalid_argument("sequence " + std::to_string(s) + " of the batch has no new tokens");
  if (c.num_cached < 0) return invalid_argument("sequence " + std::to_string(s) + " has a negative cached length");
  const int64_t kv_len = int64_t(c.num_cached) + n;
  const int used = pages_for(kv_len, m_.page_size);
  if (int64_t(c.pages.size()) < used)
    return invalid_argument("sequence " + std::to_string(s) + " needs " + std::to_string(used) +
                            " KV pages but was given " + std::to_string(c.pages.size()));
  const int n_logits = c.logits == LogitsWanted::kAll ? n : c.logits == LogitsWanted::kLast ? 1 : 0;
  if (s + 1 > L.num_seqs || tokens_ + n > L.total_q || logits_ + n_logits > L.num_logits || used > L.pages_per_seq ||
      kv_len > INT32_MAX)
    return invalid_argument("sequence " + std::to_string(s) + " does not fit the step laid out for " +
                            std::to_string(L.num_seqs) + " sequences, " + std::to_string(L.total_q) + " tokens, " +
                            std::to_string(L.num_logits) + " logits rows and " + std::to_string(L.pages_per_seq) +
                            " pages per sequence");
  int32_t* w = m_.words;
  const int P = m_.page_size;
  const bool rope_words = L.words > L.base;
  for (int i = 0; i < n; ++i) {
    const int pos = c.num_cached + i;
    const int32_t tok = c.new_tokens[size_t(i)];
    w[L.ids + size_t(tokens_ + i)] = tok;
    w[L.pos + size_t(tokens_ + i)] = pos;
    w[L.slot + size_t(tokens_ + i)] = c.pages[size_t(pos / P)] * P + pos % P;
    if (rope_words)
      w[L.base + size_t(tokens_ + i)] = c.rope_length > 0 ? std::max(c.rope_length, pos + 1) : int32_t(kv_len);
    m_.min_token = tokens_ + i == 0 ? tok : std::min(m_.min_token, tok);
    m_.max_token = std::max(m_.max_token, tok);
  }
  int32_t* row = w + L.bt + size_t(s) * size_t(L.pages_per_seq);
  for (int p = 0; p < used; ++p) {
    row[p] = c.pages[size_t(p)];
    m_.min_page = (s == 0 && p == 0) ? row[p] : std::min(m_.min_page, row[p]);
    m_.max_page = std::max(m_.max_page, row[p]);
  }
  std::fill(row + used, row + L.pages_per_seq, 0);  // never read: kernels stop at seqlens_kv
  for (int i = n - n_logits; i < n; ++i) w[L.lidx + size_t(logits_++)] = tokens_ + i;
  tokens_ += n;
  w[L.cu + size_t(s) + 1] = tokens_;
  w[L.skv + size_t(s)] = int32_t(kv_len);
  m_.max_q_len = std::max(m_.max_q_len, n);
  m_.max_kv_len = std::max(m_.max_kv_len, int(kv_len));
  ++seqs_;
  return Status::ok();
}

Status StepWriter::add_logits_rows(int first_token, int count) {
  const StepLayout& L = m_.layout;
  if (count < 0 || first_token < 0 || first_token + count > tokens_ || logits_ + count > L.num_logits)
    return invalid_argument("logits rows [" + std::to_string(first_token) + ", +" + std::to_string(count) +
                            ") are outside the step's " + std::to_string(tokens_) + " tokens or its " +
                            std::to_string(L.num_logits) + " logits rows");
  for (int i = 0; i < count; ++i) m_.words[L.lidx + size_t(logits_++)] = first_token + i;
  return Status::ok();
}

namespace {

// m with its spans over m.words for a step of these sizes.
StepMetadata with_spans(StepMetadata m, int tokens, int seqs, int logits) {
  const StepLayout& L = m.layout;
  const int32_t* w = m.words;
  m.token_ids = {w + L.ids, size_t(tokens)};
  m.positions = {w + L.pos, size_t(tokens)};
  m.cu_seqlens_q = {w + L.cu, size_t(seqs) + 1};
  m.seqlens_kv = {w + L.skv, size_t(seqs)};
  m.block_table = {w + L.bt, size_t(seqs) * size_t(L.pages_per_seq)};
  m.slot_mapping = {w + L.slot, size_t(tokens)};
  m.logits_indices = {w + L.lidx, size_t(logits)};
  return m;
}

}  // namespace

StepMetadata StepWriter::finish() const {
  return with_spans(m_, tokens_, seqs_, logits_);
}

StepMetadata rebase_step(const StepMetadata& step, int32_t* words) {
  StepMetadata m = step;
  m.words = words;
  return with_spans(m, step.total_q(), step.num_seqs(), step.num_logits());
}

}  // namespace fg
