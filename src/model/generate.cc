// generate / prompt_logits (see generate.h).
#include "model/generate.h"

#include <algorithm>
#include <numeric>

namespace fg {
namespace {

// A private cache big enough for `tokens` tokens, pages 0..n-1 in order.
struct SequentialCache {
  KvCache cache;
  std::vector<int32_t> pages;
};

Result<SequentialCache> make_sequential_cache(Model& model, int64_t tokens, int page_size,
                                              std::optional<DType> kv_dtype) {
  if (page_size <= 0) return invalid_argument("page size must be positive, got " + std::to_string(page_size));
  int n = std::max(1, kv_pages_for(tokens, page_size));
  FG_ASSIGN_OR_RETURN(KvCache cache, model.make_kv_cache(n, page_size, kv_dtype.value_or(model.backend().act_dtype())));
  SequentialCache s{std::move(cache), std::vector<int32_t>(size_t(n))};
  std::iota(s.pages.begin(), s.pages.end(), 0);
  return s;
}

// Runs tokens [begin, end) of `tokens` with `begin` already cached; returns the logits view.
Result<Tensor> run_chunk(Model& model, SequentialCache& sc, std::span<const int32_t> tokens, int begin, int end,
                         LogitsWanted wanted) {
  SequenceChunk chunk;
  chunk.new_tokens = tokens.subspan(size_t(begin), size_t(end - begin));
  chunk.num_cached = begin;
  chunk.pages = sc.pages;
  chunk.logits = wanted;
  return model.forward(std::span<const SequenceChunk>(&chunk, 1), sc.cache);
}

}  // namespace

Result<std::vector<int32_t>> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& o) {
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  if (o.max_new_tokens < 0) return invalid_argument("max_new_tokens must be >= 0");
  std::vector<int32_t> out;
  if (o.max_new_tokens == 0) return out;
  Backend& backend = model.backend();
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  FG_ASSIGN_OR_RETURN(SequentialCache sc,
                      make_sequential_cache(model, int64_t(seq.size()) + o.max_new_tokens, o.page_size, o.kv_dtype));
  Buffer token_dev = backend.alloc(sizeof(int32_t));
  Tensor token = Tensor::contiguous(token_dev.data(), DType::kI32, backend.device(), {1});
  int cached = 0;
  const int chunk = o.prefill_chunk > 0 ? o.prefill_chunk : int(seq.size());
  for (int step = 0; step < o.max_new_tokens; ++step) {
    Tensor logits;
    while (cached < int(seq.size())) {
      int end = std::min<int>(int(seq.size()), cached + chunk);
      bool last = end == int(seq.size());
      FG_ASSIGN_OR_RETURN(logits,
                          run_chunk(model, sc, seq, cached, end, last ? LogitsWanted::kLast : LogitsWanted::kNone));
      if (!last) backend.synchronize();  // the next forward rewrites the staging buffer
      cached = end;
    }
    SamplingRow row = o.sampling;
    row.counter = uint64_t(step);
    backend.sample(logits, std::span<const SamplingRow>(&row, 1), token);
    int32_t next = 0;
    backend.copy_to_host(&next, token.data, sizeof(int32_t));
    backend.synchronize();
    out.push_back(next);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), int64_t(next)) != o.stop_ids.end()) break;
    seq.push_back(next);
  }
  return out;
}

Result<std::vector<float>> prompt_logits(Model& model, std::span<const int32_t> prompt, int page_size,
                                         int prefill_chunk, std::optional<DType> kv_dtype) {
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  const int n = int(prompt.size());
  const int64_t vocab = model.config().vocab_size;
  FG_ASSIGN_OR_RETURN(SequentialCache sc, make_sequential_cache(model, n, page_size, kv_dtype));
  std::vector<float> out(size_t(n) * size_t(vocab));
  const int chunk = prefill_chunk > 0 ? prefill_chunk : n;
  for (int begin = 0; begin < n; begin += chunk) {
    int end = std::min(n, begin + chunk);
    FG_ASSIGN_OR_RETURN(Tensor logits, run_chunk(model, sc, prompt, begin, end, LogitsWanted::kAll));
    model.backend().copy_to_host(out.data() + size_t(begin) * size_t(vocab), logits.data,
                                 size_t(end - begin) * size_t(vocab) * sizeof(float));
    model.backend().synchronize();
  }
  return out;
}

}  // namespace fg
