// Model: the one decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3, Mixtral, Qwen3-MoE
// and their per-family options from the registry) running a ragged batch over a paged KV cache
// through the Backend interface.
//
// One step: the caller asks for the step's metadata block (begin_step: the model's own pinned
// staging, laid out for the step), writes the sequences into it once with the returned StepWriter,
// and calls forward(), which validates the step in O(1) from the writer's summaries, uploads the
// block with ONE copy, plans attention once into the model's own AttentionPlan, runs every layer
// on those same buffers and returns logits [num_logits, vocab] f32 on the device. Nothing in the
// layer loop creates metadata.
//
// Per layer: h = rms_norm(x); qkv = h @ Wqkv^T (+b); [q/k per-head rms_norm]; rope(q, k) (Gemma 3's
// sliding layers with their own table); kv_write; attention (scale, window, soft-cap per layer);
// a = o_proj [then rms_norm(a) for Gemma]; x += a; h = rms_norm(x); m = down(act(gate) * up), or
// for a mixture-of-experts layer: route h, one grouped GEMM for every expert's gate/up over the
// token copies sorted by expert, act, one for down, and the weighted sum back per token
// [then rms_norm(m) for Gemma]; x += m. Embeddings may be scaled (Gemma) and the final logits
// soft-capped (Gemma 2). The model never knows which backend runs it and never allocates KV pages.
//
// Decode graphs (enable_decode_graphs): a decode-only step (one new token per sequence) of b
// sequences, or a verification step (at most max_query_len new tokens per sequence), is padded up
// to a bucket (decode_graph_bucket; width 1 or max_query_len tokens per sequence) and its
// metadata written into fixed-capacity buffers allocated once, so the layer loop sees the same pointers and shapes at
// every step of that bucket and can be recorded once as a backend graph (a CUDA graph) and
// replayed. Padded rows are harmless: token 0 at position 0, KV slot -1 (kv_write skips it), a
// one-key sequence on page 0 for attention (padded sequences), or rows of no sequence at all
// (the tail of a verification step's rows: attention neither reads nor writes them), and their
// logits rows are never returned. The
// attention partition is planned on the host before every replay (the kernels read it from
// memory). Eager and graph steps give the same logits up to GEMM rounding of a different row count.
//
// Tensor parallelism (model/tensor_parallel.h): a model loaded with a communicator is one rank's
// shard. It holds the rank's slices of the weights and runs its local heads and MLP columns; the
// communicator's all-reduce follows the embedding lookup, o_proj and down_proj, and an all-gather
// assembles the full logits after the LM head. Every rank runs the same step (the caller gives
// each rank's begin_step/forward the same shape and metadata) and the collectives are ops on the
// backend's stream, so decode graphs record them. Without a communicator: the plain path.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace fg {

struct DecodeGraphOptions {
  int max_batch_size = 256;   // decode steps of up to this many sequences take the fixed buffers
  int max_pages_per_seq = 0;  // ... when no sequence needs more KV pages than this (> 0)
  int max_query_len = 1;      // > 1: steps whose sequences each add at most this many tokens
                              // (speculative verification, 1 + k) take them too, laid out at
                              // this width per sequence
  bool capture = true;        // record one graph per (batch bucket, page bucket, width) and
                              // replay it (needs Backend::supports_graphs); false runs the same
                              // padded ops eagerly, which is how the CPU tests check the padding
};

struct DecodeGraphStats {
  int64_t padded_steps = 0;  // decode steps run through the fixed buffers
  int64_t replays = 0;       // ... of which replayed a recorded graph
  int64_t captures = 0;      // ... of which ran eagerly, then recorded their bucket's graph (again
                             // after the workspace grew or the KV cache changed)
  int num_graphs = 0;        // graphs held now
};

// The batch size a decode step of `num_seqs` sequences is padded to: 1, 2, 4, 8, 16, 24, 32, 48,
// 64, then multiples of 32, and never above max_batch_size (itself the last bucket).
// Precondition: 1 <= num_seqs <= max_batch_size.
int decode_graph_bucket(int num_seqs, int max_batch_size);
// The block-table width a decode step whose longest sequence needs `pages_needed` pages is laid
// out at: the next power of two, capped at max_pages_per_seq. Precondition: 1 <= pages_needed <=
// max_pages_per_seq.
int decode_graph_pages(int pages_needed, int max_pages_per_seq);

// Unsupported when `backend` cannot run this config (Backend::attention_supports refuses its
// head_dim: on CUDA other than 64, 128 and 256; or expert widths that are not multiples of 8),
// with a message naming the model and the limit.
// Model::load and load_dummy call it.
Status check_backend_supports(const ModelConfig& config, const Backend& backend);

class Model {
 public:
  // Reads DIR/config.json (+ generation_config.json), validates and uploads the safetensors
  // weights to `backend` (matrices in its weight dtype, the rest in its act dtype: weights.h).
  // `dir` may instead be a .gguf file, or a folder holding one .gguf and no config.json: config
  // and weights then come from that file (model/gguf_model.h). `backend` must outlive the model.
  // With tp.comm: only rank tp.rank()'s shard is read and uploaded (the communicator must outlive
  // the model); errors name what tp.size() cannot split. `options`: quantization at load
  // (`--quantization fp8`: weights.h, WeightLoadOptions), applied to the shard.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, Backend& backend, const TensorParallel& tp = {},
                                             const WeightLoadOptions& options = {});
  static Result<std::unique_ptr<Model>> load(const std::string& dir, Backend& backend,
                                             const WeightLoadOptions& options) {
    return load(dir, backend, TensorParallel{}, options);
  }
  // Reads DIR/config.json (or a GGUF file's metadata) only and fills every weight with seeded random values on the
  // device (Backend::fill_uniform), for performance work at real shapes without a checkpoint (model/dummy_weights.h;
  // defined in dummy_weights.cc).
  static Result<std::unique_ptr<Model>> load_dummy(const std::string& dir, Backend& backend, uint64_t seed,
                                                   const TensorParallel& tp = {},
                                                   const WeightLoadOptions& options = {});
  static Result<std::unique_ptr<Model>> load_dummy(const std::string& dir, Backend& backend, uint64_t seed,
                                                   const WeightLoadOptions& options) {
    return load_dummy(dir, backend, seed, TensorParallel{}, options);
  }

  // The whole model's config (vocab_size is the full vocabulary: logits rows are full rows).
  const ModelConfig& config() const { return config_; }
  // This rank's shapes (shard_config): the local heads, intermediate rows and vocabulary shard.
  const ModelConfig& local_config() const { return local_; }
  const TpShard& shard() const { return shard_; }
  Backend& backend() const { return backend_; }
  // The weights as loaded (the dtype each matrix is kept in depends on the backend: weights.h).
  const ModelWeights& weights() const { return weights_; }

  // The block the next step's metadata goes into, laid out for `shape` (at its decode-graph bucket
  // when the step takes the graph path), as a writer over the model's pinned staging. Grows the
  // workspace when the step needs more. Precondition: the results of the previous forward have
  // been consumed (copy_to_host + synchronize), because the staging block is rewritten.
  StepWriter begin_step(const StepShape& shape, int page_size);
  // Runs the step written into begin_step's block and returns logits [step.num_logits(), vocab]
  // f32 on the device, valid until the next forward. The step is validated against the model and
  // the cache (token ids in the vocabulary, pages inside the cache); errors are InvalidArgument
  // and leave the cache untouched.
  Result<Tensor> forward(const StepMetadata& step, KvCache& cache);
  // begin_step + one StepWriter::add per chunk + forward (tests and the reference loop).
  Result<Tensor> forward(std::span<const SequenceChunk> chunks, KvCache& cache);

  // Allocates the step workspace for steps of up to `max_tokens` new tokens and `max_logits`
  // logits rows now (it otherwise grows at the first such step), so that a KV cache sized from
  // the memory left afterwards leaves room for it: mixture-of-experts layers need buffers of
  // max_tokens * top_k rows.
  void reserve_step_workspace(int max_tokens, int max_logits) { reserve(max_tokens, max_logits, 0); }

  // Sends later decode-only steps that fit `options` through the fixed buffers (and graphs when
  // options.capture). Allocates those buffers and the workspace for max_batch_size rows now, so
  // call it before sizing the KV cache from free memory. Errors: bad sizes, capture on a backend
  // without graphs. Calling it again replaces the previous setting (and drops recorded graphs).
  Status enable_decode_graphs(const DecodeGraphOptions& options);
  void disable_decode_graphs();
  bool decode_graphs_enabled() const { return graphs_ != nullptr; }
  DecodeGraphStats decode_graph_stats() const;

  // A KV cache for this model with `num_pages` pages of `page_size` tokens (the rank's kv heads),
  // in the act dtype or kF8E4M3 (an fp8 cache, scaled by the checkpoint's K/V scales of the rank's
  // kv heads when it has them: kv_cache.h).
  Result<KvCache> make_kv_cache(int num_pages, int page_size) const {
    return KvCache::create(backend_, local_, num_pages, page_size);
  }
  Result<KvCache> make_kv_cache(int num_pages, int page_size, DType dtype) const {
    return KvCache::create(backend_, local_, num_pages, page_size, dtype, kv_scales_);
  }
  // The checkpoint's calibrated K/V scales (read_checkpoint_kv_scales) of the rank's kv heads,
  // [num_layers][local num_kv_heads], or nullopt.
  const std::optional<KvScales>& checkpoint_kv_scales() const { return kv_scales_; }

 private:
  // Device views of one step's metadata, shared by every layer.
  struct StepTensors {
    int total_q = 0;
    int num_logits = 0;
    Tensor ids;    // [total_q] i32
    Tensor slots;  // [total_q] i32
    Tensor lidx;   // [num_logits] i32
    AttentionBatch attention;
    RopeArgs rope;
    RopeArgs rope_local;  // Gemma 3's sliding layers (same positions, their own table)
  };
  // The fixed buffers and recorded graphs of the decode path.
  struct DecodeGraphState {
    DecodeGraphOptions options;
    Buffer meta_host;  // staging of the largest padded step (pinned on cuda)
    Buffer meta_dev;   // the same bytes on the device; never reallocated while graphs exist
    std::map<std::tuple<int, int, int>, std::unique_ptr<Graph>> graphs;  // (batch, pages, width) -> graph
    const void* cache_k = nullptr;  // the KV cache the graphs were recorded against
    int cache_page_size = 0;
    DecodeGraphStats stats;
  };
  // The step begin_step handed out: where its block is and which path runs it.
  struct PendingStep {
    bool open = false;
    bool graph = false;  // laid out at a decode-graph bucket, in graphs_->meta_host
    int width = 1;       // ... of this many token rows per sequence
    StepLayout layout;
    int32_t* words = nullptr;
  };

  Model(Backend& backend, ModelConfig config) : backend_(backend), config_(std::move(config)), local_(config_) {}
  // Sets the split (tp.comm null: the whole model). Errors from make_tp_shard.
  Status set_tensor_parallel(const TensorParallel& tp);
  // kv_scales_ from the checkpoint, sliced to the rank's kv heads (after set_tensor_parallel).
  Status read_kv_scales(const WeightSource& source);
  // The LM head's output in `logits` [L, vocab] f32: one GEMM, or the rank's shard then the
  // all-gather and the strided copy into full rows.
  void lm_head(const Tensor& normed, Tensor& logits);
  // Computes the RoPE inverse frequencies of config_ and uploads them to inv_freq_ (both loaders).
  void upload_rope_table();
  Status validate(const StepMetadata& step, const KvCache& cache) const;
  // Grows the workspace and the attention plan (dropping recorded graphs, which read them).
  void reserve(int total_q, int num_logits, size_t meta_bytes);
  // The step block carries one rope word per token: a dynamic-NTK base (f32) or a LongRoPE table
  // index (i32), written by fill_rope_bases.
  bool rope_bases() const {
    return config_.rope.type == RopeScaling::kDynamic || config_.rope.type == RopeScaling::kLongRope;
  }
  StepTensors step_tensors(const StepLayout& m, const Buffer& dev, const StepMetadata& step) const;
  void fill_rope_bases(const StepLayout& m, int num_seqs, int32_t* words) const;
  // Pads a graph step to its bucket in place (see "Decode graphs"); returns the rows that belong
  // to a sequence (the step's and one per padded sequence).
  int pad_decode_rows(const StepMetadata& step, int32_t* words) const;
  // The decoder stack over one step's metadata: embedding .. logits (logits_ rows [0, num_logits)).
  void run_layers(const StepTensors& t, KvCache& cache);
  // A mixture-of-experts MLP over normed [T, hidden] into out [T, hidden].
  void run_moe(const LayerWeights& w, const Tensor& normed, Tensor& out);
  // act(gate) * up with the family's activation.
  void gated_act(const Tensor& gate_up, Tensor& out);
  // out = x @ w^T (+ bias) for a linear layer: Backend::gemm, or for e4m3 codes (w_scale: [n] or
  // 128-block f32 scales) the quantization of x (per token, or per token and 128 columns for
  // 128-block weights) into fp8_x_ / fp8_scales_ and Backend::gemm_fp8.
  void linear(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& bias, Tensor& out);
  // residual += delta; normed = rms_norm(residual) * norm; out = linear(normed): with e4m3 codes
  // the norm and the input's quantization in one op (Backend::add_rms_norm_fp8; normed may then
  // stay unwritten).
  void add_norm_linear(Tensor& residual, const Tensor& delta, const Tensor& norm, float eps, Tensor& normed,
                       const Tensor& w, const Tensor& w_scale, const Tensor& bias, Tensor& out);
  // act_out = gated_act(gate_up); out = linear(act_out) (the down projection): with e4m3 codes the
  // activation and the input's quantization in one op (Backend::act_mul_fp8; act_out may then stay
  // unwritten).
  void act_linear(const Tensor& gate_up, Tensor& act_out, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                  Tensor& out);
  // The rows an FP8 product of `rows` runs on (padded for 128-block weights), and the views of
  // fp8_x_ / fp8_scales_ its input is quantized into.
  static int64_t fp8_rows(int64_t rows, const Tensor& w_scale);
  void fp8_input(int64_t m, int64_t k, const Tensor& w_scale, Tensor& codes, Tensor& scales);
  Result<Tensor> forward_graph(const StepMetadata& step, KvCache& cache);
  void drop_graphs();

  Backend& backend_;
  ModelConfig config_;
  ModelConfig local_;  // == config_ but for a tensor-parallel shard
  TpShard shard_;
  Communicator* comm_ = nullptr;  // null: no collectives
  ModelWeights weights_;
  std::optional<KvScales> kv_scales_;  // the checkpoint's, of the rank's kv heads (fp8 KV caches)
  Buffer inv_freq_;                    // [rotary_dim / 2] f32, device; LongRoPE: [2, rotary_dim / 2] (short, long)
  Buffer local_inv_freq_;              // [rotary_dim / 2] f32, device: Gemma 3's sliding layers (else empty)

  // Workspace, grown on demand (capacities in rows).
  int cap_tokens_ = 0;
  int cap_logits_ = 0;
  Buffer residual_;  // [cap_tokens, hidden] act
  Buffer normed_;    // [cap_tokens, hidden] act
  Buffer delta_;     // [cap_tokens, hidden] act
  Buffer wide_;      // [cap_tokens, max(qkv_dim, 2 * inter)] act: qkv, then gate|up
  Buffer narrow_;    // [cap_tokens, max(q_dim, inter)] act: attention out, then silu*up
  Buffer sel_;       // [3, cap_logits, hidden] act: gathered residual, delta, normed
  // Mixture-of-experts workspace (A = cap_tokens * top_k assignments); empty for dense models.
  Buffer moe_wide_;      // [A, max(2 * moe_inter, hidden)] act: the experts' gate|up sorted by expert,
                         // then their down projections
  Buffer moe_narrow_;    // [A, moe_inter] act: act(gate) * up
  Buffer moe_meta_;      // router logits [cap_tokens, E] f32 | topk weights [cap_tokens, k] f32 | topk ids
                         // [cap_tokens, k] i32 | offsets [E + 1] i32 | sorted [A] i32 | assign_row [A] i32
  Buffer fp8_x_;         // [cap_tokens, max(hidden, q_dim, inter)] f8_e4m3: a linear layer's input codes
  Buffer fp8_scales_;    // [cap_tokens * ceil(max K / 128)] f32: their scales (both only with FP8 weights)
  Buffer logits_;        // [cap_logits, vocab] f32
  Buffer shard_logits_;  // tensor parallel: [cap_logits, vocab_rows] f32, then [size, cap_logits, vocab_rows] gathered
  std::unique_ptr<AttentionPlan> plan_;  // the attention partition of the running step
  size_t cap_meta_ = 0;
  Buffer meta_host_;                          // staging of an eager step's metadata (pinned on cuda)
  Buffer meta_dev_;                           // the same bytes on the device
  std::unique_ptr<DecodeGraphState> graphs_;  // null: every step runs eagerly
  PendingStep pending_;
};

}  // namespace fg
