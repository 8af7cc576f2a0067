// The decode path of Model (model.h, "Decode graphs"): decode-only steps padded to a batch bucket,
// their metadata written into buffers allocated once, and the layer loop recorded once per
// (batch bucket, page bucket) as a backend graph and replayed. Must never allocate on the step
// path once enabled, and never let a padded row write the KV cache or reach the returned logits.
#include <algorithm>
#include <string>

#include "model/model.h"

namespace fg {

namespace {

constexpr int kMaxDecodeGraphBatch = 4096;

int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

int decode_graph_bucket(int num_seqs, int max_batch_size) {
  FG_CHECK(num_seqs >= 1 && num_seqs <= max_batch_size, "decode_graph_bucket: " + std::to_string(num_seqs) +
                                                            " sequences for a maximum of " +
                                                            std::to_string(max_batch_size));
  int bucket = 0;
  if (num_seqs <= 8) {
    bucket = next_pow2(num_seqs);
  } else if (num_seqs <= 32) {
    bucket = (num_seqs + 7) / 8 * 8;
  } else if (num_seqs <= 64) {
    bucket = (num_seqs + 15) / 16 * 16;
  } else {
    bucket = (num_seqs + 31) / 32 * 32;
  }
  return std::min(bucket, max_batch_size);
}

int decode_graph_pages(int pages_needed, int max_pages_per_seq) {
  FG_CHECK(pages_needed >= 1 && pages_needed <= max_pages_per_seq,
           "decode_graph_pages: " + std::to_string(pages_needed) + " pages for a maximum of " +
               std::to_string(max_pages_per_seq));
  return std::min(next_pow2(pages_needed), max_pages_per_seq);
}

Status Model::enable_decode_graphs(const DecodeGraphOptions& options) {
  if (options.max_batch_size < 1 || options.max_batch_size > kMaxDecodeGraphBatch)
    return invalid_argument("decode graphs: max batch size " + std::to_string(options.max_batch_size) +
                            " is outside [1, " + std::to_string(kMaxDecodeGraphBatch) + "]");
  if (options.max_pages_per_seq < 1)
    return invalid_argument("decode graphs: max pages per sequence must be positive, got " +
                            std::to_string(options.max_pages_per_seq));
  if (options.max_query_len < 1 || options.max_query_len > 64)
    return invalid_argument("decode graphs: max query length " + std::to_string(options.max_query_len) +
                            " is outside [1, 64]");
  if (options.capture && !backend_.supports_graphs())
    return unsupported("decode graphs: the " + backend_.name() + " backend cannot record graphs");
  const int64_t bt_words = int64_t(options.max_batch_size) * int64_t(options.max_pages_per_seq);
  if (bt_words > (int64_t(1) << 28))
    return invalid_argument("decode graphs: a block table of " + std::to_string(options.max_batch_size) + " x " +
                            std::to_string(options.max_pages_per_seq) + " pages is too large");
  disable_decode_graphs();
  auto state = std::make_unique<DecodeGraphState>();
  state->options = options;
  // The largest padded step: every array at max_batch_size rows, block table at the page cap.
  const int rows = options.max_batch_size * options.max_query_len;
  const StepLayout widest =
      StepLayout::make(rows, options.max_batch_size, rows, options.max_pages_per_seq, rope_bases());
  state->meta_host = backend_.alloc_host(widest.words * 4);
  state->meta_dev = backend_.alloc(widest.words * 4);
  if (!state->meta_host.data() || !state->meta_dev.data())
    return Status(ErrorCode::kResourceExhausted,
                  "decode graphs: cannot allocate " + std::to_string(widest.words * 4) + " bytes of step metadata");
  // The workspace the graphs record: sized now for the largest bucket, so that only a larger
  // eager step (a prefill) can move it, which drops the graphs (re-recorded on next use).
  reserve(rows, rows, 0);
  graphs_ = std::move(state);
  return Status::ok();
}

void Model::disable_decode_graphs() {
  if (!graphs_) return;
  drop_graphs();
  graphs_.reset();
}

DecodeGraphStats Model::decode_graph_stats() const {
  if (!graphs_) return {};
  DecodeGraphStats s = graphs_->stats;
  s.num_graphs = int(graphs_->graphs.size());
  return s;
}

void Model::drop_graphs() {
  if (!graphs_ || graphs_->graphs.empty()) return;
  backend_.synchronize();  // no replay still in flight when its graph is destroyed
  graphs_->graphs.clear();
}

int Model::pad_decode_rows(const StepMetadata& step, int32_t* words) const {
  const StepLayout& m = pending_.layout;
  const int S = step.num_seqs(), b = m.num_seqs, T = step.total_q(), L = step.num_logits();
  // Sequences [S, b): one token each, right after the step's rows, seeing one key on page 0.
  const int assigned = T + (b - S);
  for (int s = S; s < b; ++s) words[m.cu + size_t(s) + 1] = T + (s - S) + 1;
  std::fill(words + m.skv + S, words + m.skv + b, 1);
  std::fill(words + m.bt + size_t(S) * size_t(m.pages_per_seq), words + m.bt + size_t(b) * size_t(m.pages_per_seq), 0);
  // Rows [T, capacity): token 0 at position 0, written nowhere; rows past `assigned` belong to
  // no sequence, so attention neither reads nor writes them.
  std::fill(words + m.ids + T, words + m.ids + m.total_q, 0);
  std::fill(words + m.pos + T, words + m.pos + m.total_q, 0);
  std::fill(words + m.slot + T, words + m.slot + m.total_q, -1);                   // kv_write skips padded rows
  std::fill(words + m.lidx + L, words + m.lidx + m.num_logits, 0);                 // computed, never returned
  if (rope_bases()) std::fill(words + m.base + T, words + m.base + m.total_q, 1);  // a RoPE length of 1
  return assigned;
}

Result<Tensor> Model::forward_graph(const StepMetadata& step, KvCache& cache) {
  DecodeGraphState& g = *graphs_;
  const StepLayout& m = pending_.layout;
  const int b = m.num_seqs, pages = m.pages_per_seq, page_size = cache.page_size();
  const int width = pending_.width;
  FG_CHECK(cap_tokens_ >= m.total_q && cap_logits_ >= m.num_logits && plan_ != nullptr,
           "decode graphs: workspace below the bucket it was reserved for");
  FG_CHECK(step.num_seqs() <= b && step.max_q_len <= width && step.num_logits() <= m.num_logits,
           "decode graphs: the step does not fit its bucket");

  // ---- the padded step: the writer filled the real rows in place; pad, then one upload.
  const int assigned = pad_decode_rows(step, step.words);
  fill_rope_bases(m, b, step.words);
  backend_.copy_from_host(g.meta_dev.data(), step.words, m.words * 4);
  StepTensors t = step_tensors(m, g.meta_dev, step);
  t.attention.total_q = assigned;

  if (g.options.capture) {
    if (g.cache_k != cache.layer(0).k.data || g.cache_page_size != page_size) {
      drop_graphs();  // recorded against another KV cache
      g.cache_k = cache.layer(0).k.data;
      g.cache_page_size = page_size;
    }
    std::unique_ptr<Graph>& graph = g.graphs[{b, pages, width}];
    if (!graph) {
      // The first step of a bucket runs eagerly, which also makes every lazy host-side choice
      // (GEMM algorithms, kernel attributes) outside the recording; then the graph is recorded
      // for the next steps (recording enqueues nothing, so the step's results stand).
      backend_.plan_attention(*plan_, t.attention);
      run_layers(t, cache);
      GraphAttentionShape bounds;
      bounds.num_seqs = b;
      bounds.min_num_seqs = b;  // pad_decode_rows fills the bucket
      bounds.max_q_len = width;
      bounds.max_kv_len = int(std::min<int64_t>(int64_t(pages) * page_size, INT32_MAX));
      bounds.page_size = page_size;
      graph = backend_.capture_graph([&] { run_layers(t, cache); }, *plan_, bounds);
      ++g.stats.captures;
    } else {
      backend_.plan_attention(*plan_, t.attention);  // the replay reads this step's partition
      backend_.replay_graph(*graph);
      ++g.stats.replays;
    }
  } else {
    backend_.plan_attention(*plan_, t.attention);
    run_layers(t, cache);
  }
  ++g.stats.padded_steps;
  return Tensor::contiguous(logits_.data(), DType::kF32, backend_.device(), {step.num_logits(), config_.vocab_size});
}

}  // namespace fg
