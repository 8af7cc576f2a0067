// build_batch_spec (see batch.h).
#include "model/batch.h"

#include <algorithm>
#include <string>

namespace fg {

Result<BatchSpec> build_batch_spec(std::span<const SequenceChunk> chunks, int page_size) {
  if (page_size <= 0) return invalid_argument("page size must be positive, got " + std::to_string(page_size));
  if (chunks.empty()) return invalid_argument("a batch needs at least one sequence");
  BatchSpec b;
  int max_pages = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    if (c.new_tokens.empty())
      return invalid_argument("sequence " + std::to_string(s) + " of the batch has no new tokens");
    if (c.num_cached < 0) return invalid_argument("sequence " + std::to_string(s) + " has a negative cached length");
    int64_t kv_len = int64_t(c.num_cached) + int64_t(c.new_tokens.size());
    int64_t pages_needed = (kv_len + page_size - 1) / page_size;
    if (int64_t(c.pages.size()) < pages_needed)
      return invalid_argument("sequence " + std::to_string(s) + " needs " + std::to_string(pages_needed) +
                              " KV pages but was given " + std::to_string(c.pages.size()));
    max_pages = std::max(max_pages, int(pages_needed));
  }
  b.max_pages_per_seq = std::max(max_pages, 1);
  b.cu_seqlens_q.push_back(0);
  b.block_table.assign(chunks.size() * size_t(b.max_pages_per_seq), 0);
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    int row0 = b.total_q();
    int n = int(c.new_tokens.size());
    int kv_len = c.num_cached + n;
    int pages_needed = (kv_len + page_size - 1) / page_size;
    for (int i = 0; i < n; ++i) {
      int pos = c.num_cached + i;
      b.token_ids.push_back(c.new_tokens[size_t(i)]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(c.pages[size_t(pos / page_size)] * page_size + pos % page_size);
    }
    b.cu_seqlens_q.push_back(row0 + n);
    b.seqlens_kv.push_back(kv_len);
    std::copy_n(c.pages.begin(), pages_needed, b.block_table.begin() + std::ptrdiff_t(s) * b.max_pages_per_seq);
    if (c.logits == LogitsWanted::kAll)
      for (int i = 0; i < n; ++i) b.logits_indices.push_back(row0 + i);
    else if (c.logits == LogitsWanted::kLast)
      b.logits_indices.push_back(row0 + n - 1);
  }
  return b;
}

}  // namespace fg
