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

Status Model::enable_decode_graphs(const DecodeGraphOptions& options) {
  if (options.max_batch_size < 1 || options.max_batch_size > kMaxDecodeGraphBatch)
    return invalid_argument("decode graphs: max batch size " + std::to_string(options.max_batch_size) +
                            " is outside [1, " + std::to_string(kMaxDecodeGraphBatch) + "]");
  if (options.max_pages_per_seq < 1)
    return invalid_argument("decode graphs: max pages per sequence must be positive, got " +
                            std::to_string(options.max_pages_per_seq));
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
  const MetaLayout widest =
      meta_layout(options.max_batch_size, options.max_batch_size, options.max_batch_size, options.max_pages_per_seq);
  state->meta_host = backend_.alloc_host(widest.words * 4);
  state->meta_dev = backend_.alloc(widest.words * 4);
  if (!state->meta_host.data() || !state->meta_dev.data())
    return Status(ErrorCode::kResourceExhausted,
                  "decode graphs: cannot allocate " + std::to_string(widest.words * 4) + " bytes of step metadata");
  // The workspace the graphs record: sized now for the largest bucket, so that only a larger
  // eager step (a prefill) can move it, which drops the graphs (re-recorded on next use).
  reserve(options.max_batch_size, options.max_batch_size, 0);
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

Result<Tensor> Model::forward_decode_fixed(const BatchView& spec, KvCache& cache, int pages_needed) {
  DecodeGraphState& g = *graphs_;
  const int S = spec.num_seqs(), L = spec.num_logits(), P_in = spec.max_pages_per_seq;
  const int page_size = cache.page_size();
  const int b = decode_graph_bucket(S, g.options.max_batch_size);
  const int pages = std::min(next_pow2(std::max(pages_needed, 1)), g.options.max_pages_per_seq);
  FG_CHECK(cap_tokens_ >= b && cap_logits_ >= b, "decode graphs: workspace below the bucket it was reserved for");

  // ---- the padded step, written once into the fixed staging block and uploaded with one copy.
  const MetaLayout m = meta_layout(b, b, b, pages);
  auto* words = static_cast<int32_t*>(g.meta_host.data());
  int max_kv = 0;
  for (int s = 0; s < S; ++s) max_kv = std::max(max_kv, spec.seqlens_kv[size_t(s)]);
  std::copy(spec.token_ids.begin(), spec.token_ids.end(), words + m.ids);
  std::fill(words + m.ids + S, words + m.ids + b, 0);
  std::copy(spec.positions.begin(), spec.positions.end(), words + m.pos);
  std::fill(words + m.pos + S, words + m.pos + b, 0);
  for (int s = 0; s <= b; ++s) words[m.cu + size_t(s)] = s;  // one new token per sequence
  std::copy(spec.seqlens_kv.begin(), spec.seqlens_kv.end(), words + m.skv);
  std::fill(words + m.skv + S, words + m.skv + b, 1);  // padded: one key, on page 0
  const int copy_pages = std::min(P_in, pages);        // pages past pages_needed are never read
  for (int s = 0; s < b; ++s) {
    int32_t* row = words + m.bt + size_t(s) * size_t(pages);
    int n = 0;
    if (s < S) {
      const int32_t* src = spec.block_table.data() + size_t(s) * size_t(P_in);
      std::copy(src, src + copy_pages, row);
      n = copy_pages;
    }
    std::fill(row + n, row + pages, 0);
  }
  std::copy(spec.slot_mapping.begin(), spec.slot_mapping.end(), words + m.slot);
  std::fill(words + m.slot + S, words + m.slot + b, -1);  // kv_write skips padded rows
  std::copy(spec.logits_indices.begin(), spec.logits_indices.end(), words + m.lidx);
  std::fill(words + m.lidx + L, words + m.lidx + b, 0);  // computed, never returned
  fill_rope_bases(m, words);
  backend_.copy_from_host(g.meta_dev.data(), g.meta_host.data(), m.words * 4);
  const StepTensors t = step_tensors(m, g.meta_dev, words, 1, max_kv, page_size);

  if (g.options.capture) {
    if (g.cache_k != cache.layer(0).k.data || g.cache_page_size != page_size) {
      drop_graphs();  // recorded against another KV cache
      g.cache_k = cache.layer(0).k.data;
      g.cache_page_size = page_size;
    }
    std::unique_ptr<Graph>& graph = g.graphs[{b, pages}];
    if (!graph) {
      // The first step of a bucket runs eagerly, which also makes every lazy host-side choice
      // (GEMM algorithms, kernel attributes) outside the recording; then the graph is recorded
      // for the next steps (recording enqueues nothing, so the step's results stand).
      plan(t);
      run_layers(t, cache);
      GraphAttentionShape shape;
      shape.num_seqs = b;
      shape.max_q_len = 1;  // decode: one new token per sequence
      shape.max_kv_len = int(std::min<int64_t>(int64_t(pages) * page_size, INT32_MAX));
      shape.page_size = page_size;
      shape.num_q_heads = config_.num_q_heads;
      shape.num_kv_heads = config_.num_kv_heads;
      shape.head_dim = config_.head_dim;
      graph = backend_.capture_graph([&] { run_layers(t, cache); }, shape);
      ++g.stats.captures;
    } else {
      plan(t);  // the replay reads this step's partition from the backend's plan buffers
      backend_.replay_graph(*graph);
      ++g.stats.replays;
    }
  } else {
    plan(t);
    run_layers(t, cache);
  }
  ++g.stats.padded_steps;
  return Tensor::contiguous(logits_.data(), DType::kF32, backend_.device(), {L, config_.vocab_size});
}

}  // namespace fg
