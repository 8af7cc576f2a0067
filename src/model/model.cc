// The decoder's forward pass (see model.h).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/gguf_model.h"
#include "model/rope.h"

namespace fg {
namespace {

// [rows, heads, head_dim] view of columns [col0, col0 + heads * head_dim) of a contiguous 2D matrix.
Tensor head_view(const Tensor& m, int64_t col0, int heads, int head_dim) {
  Tensor t;
  t.data = static_cast<char*>(m.data) + col0 * int64_t(dtype_size(m.dtype));
  t.dtype = m.dtype;
  t.device = m.device;
  t.ndim = 3;
  t.shape = {m.shape[0], heads, head_dim, 0};
  t.stride = {m.stride[0], head_dim, 1, 0};
  return t;
}

Tensor view_at(const Buffer& b, size_t byte_offset, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::contiguous(static_cast<char*>(b.data()) + byte_offset, dtype, b.device(), shape);
  FG_CHECK(byte_offset + t.nbytes() <= b.bytes(), "view past the end of a workspace buffer");
  return t;
}

}  // namespace

Status check_backend_supports(const ModelConfig& c, const Backend& backend) {
  // The CUDA attention kernels are instantiated for a few head sizes only: refuse at load rather
  // than abort at the first step.
  if (Status st = backend.attention_supports(int(c.head_dim)); !st.is_ok())
    return unsupported(c.dir + " (" + c.architecture + "): " + st.message() + " on the " + backend.name() +
                       " backend; use --backend cpu");
  // The grouped expert GEMM moves rows in 16-byte chunks.
  if (backend.device() == Device::kCuda && c.moe.num_experts > 0 &&
      (c.hidden_size % 8 != 0 || c.moe.intermediate_size % 8 != 0))
    return unsupported(c.dir + ": hidden_size " + std::to_string(c.hidden_size) + " and moe_intermediate_size " +
                       std::to_string(c.moe.intermediate_size) +
                       " must be multiples of 8 for the CUDA backend's expert GEMM; use --backend cpu");
  return Status::ok();
}

Status Model::set_tensor_parallel(const TensorParallel& tp) {
  FG_ASSIGN_OR_RETURN(shard_, make_tp_shard(config_, tp.rank(), tp.size()));
  local_ = shard_config(config_, shard_);
  comm_ = tp.comm;
  return Status::ok();
}

Status Model::read_kv_scales(const WeightSource& source) {
  FG_ASSIGN_OR_RETURN(kv_scales_, read_checkpoint_kv_scales(config_, source));
  // Each rank's cache holds its local kv heads (replicated ones included): their scales.
  if (kv_scales_) kv_scales_ = kv_scales_for_heads(*kv_scales_, config_.num_kv_heads, shard_.kv_head0, shard_.kv_heads);
  return Status::ok();
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, Backend& backend, const TensorParallel& tp,
                                           const WeightLoadOptions& options) {
  // A .gguf file, or a folder holding one .gguf and no config.json (model/gguf_model.h).
  FG_ASSIGN_OR_RETURN(std::string gguf_path, find_gguf_model(dir));
  if (!gguf_path.empty()) {
    FG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf_path));
    FG_ASSIGN_OR_RETURN(ModelConfig config, gguf_model_config(*file));
    FG_RETURN_IF_ERROR(check_backend_supports(config, backend));
    std::unique_ptr<Model> m(new Model(backend, std::move(config)));
    FG_RETURN_IF_ERROR(m->set_tensor_parallel(tp));
    const std::unique_ptr<WeightSource> source = gguf_weight_source(*file, m->config_);
    FG_ASSIGN_OR_RETURN(m->weights_, load_model_weights(m->config_, *source, backend, m->shard_, options));
    FG_RETURN_IF_ERROR(m->read_kv_scales(*source));
    m->upload_rope_table();
    return m;
  }
  FG_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  FG_RETURN_IF_ERROR(check_backend_supports(config, backend));
  FG_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(dir));
  std::unique_ptr<Model> m(new Model(backend, std::move(config)));
  FG_RETURN_IF_ERROR(m->set_tensor_parallel(tp));
  const SafetensorsWeightSource source(ckpt, m->config_.quant);
  FG_ASSIGN_OR_RETURN(m->weights_, load_model_weights(m->config_, source, backend, m->shard_, options));
  FG_RETURN_IF_ERROR(m->read_kv_scales(source));

  m->upload_rope_table();
  return m;
}

void Model::upload_rope_table() {
  auto upload = [&](const std::vector<float>& table) {
    Buffer dev = backend_.alloc(table.size() * sizeof(float));
    Buffer staging = backend_.alloc_host(table.size() * sizeof(float));
    std::memcpy(staging.data(), table.data(), table.size() * sizeof(float));
    backend_.copy_from_host(dev.data(), staging.data(), table.size() * sizeof(float));
    backend_.synchronize();
    return dev;
  };
  std::vector<float> inv = rope_inv_freq(config_.rope, config_.rotary_dim);
  if (config_.rope.type == RopeScaling::kLongRope) {
    std::vector<float> long_table = rope_long_inv_freq(config_.rope, config_.rotary_dim);
    inv.insert(inv.end(), long_table.begin(), long_table.end());
  }
  inv_freq_ = upload(inv);
  if (config_.local_rope) local_inv_freq_ = upload(rope_inv_freq(*config_.local_rope, config_.rotary_dim));
}

void Model::linear(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& bias, Tensor& out) {
  if (w.dtype != DType::kF8E4M3) {
    backend_.gemm(x, w, bias.defined() ? &bias : nullptr, out);
    return;
  }
  FG_CHECK(!bias.defined() && w_scale.defined(), "FP8 codes are kept only with scales and without a bias");
  // Per-token scales for per-channel weights; per token and 128 columns for 128-block weights, on
  // the rows rounded up to kFp8BlockRowMultiple (fp8_rows): x and out are views at the start of
  // step buffers that hold that many (reserve); the extra rows' results are never read.
  const int64_t m = fp8_rows(x.shape[0], w_scale), k = x.shape[1];
  Tensor x_rows = x, out_rows = out;
  x_rows.shape[0] = out_rows.shape[0] = m;
  Tensor codes, scales;
  fp8_input(m, k, w_scale, codes, scales);
  backend_.quantize_rows_fp8(x_rows, codes, scales);
  backend_.gemm_fp8(codes, scales, w, w_scale, out_rows);
}

int64_t Model::fp8_rows(int64_t rows, const Tensor& w_scale) {
  if (w_scale.ndim == 1) return rows;
  return (rows + kFp8BlockRowMultiple - 1) / kFp8BlockRowMultiple * kFp8BlockRowMultiple;
}

void Model::fp8_input(int64_t m, int64_t k, const Tensor& w_scale, Tensor& codes, Tensor& scales) {
  codes = view_at(fp8_x_, 0, DType::kF8E4M3, {m, k});
  scales = w_scale.ndim == 1 ? view_at(fp8_scales_, 0, DType::kF32, {m})
                             : view_at(fp8_scales_, 0, DType::kF32, {(k + kFp8Block - 1) / kFp8Block, m});
}

void Model::add_norm_linear(Tensor& residual, const Tensor& delta, const Tensor& norm, float eps, Tensor& normed,
                            const Tensor& w, const Tensor& w_scale, const Tensor& bias, Tensor& out) {
  if (w.dtype != DType::kF8E4M3) {
    backend_.add_rms_norm(residual, delta, norm, eps, normed);
    linear(normed, w, w_scale, bias, out);
    return;
  }
  // As linear(): the rows padded for 128-block weights, in buffers that hold them (the residual's
  // too: its extra rows are updated from the delta's and never read).
  const int64_t m = fp8_rows(normed.shape[0], w_scale), k = normed.shape[1];
  Tensor r = residual, d = delta, x = normed, o = out;
  r.shape[0] = d.shape[0] = x.shape[0] = o.shape[0] = m;
  Tensor codes, scales;
  fp8_input(m, k, w_scale, codes, scales);
  backend_.add_rms_norm_fp8(r, d, norm, eps, x, codes, scales);
  backend_.gemm_fp8(codes, scales, w, w_scale, o);
}

void Model::act_linear(const Tensor& gate_up, Tensor& act_out, const Tensor& w, const Tensor& w_scale,
                       const Tensor& bias, Tensor& out) {
  if (w.dtype != DType::kF8E4M3) {
    gated_act(gate_up, act_out);
    linear(act_out, w, w_scale, bias, out);
    return;
  }
  // As add_norm_linear(): the rows padded for 128-block weights, in buffers that hold them.
  const int64_t m = fp8_rows(act_out.shape[0], w_scale), k = act_out.shape[1];
  Tensor g = gate_up, a = act_out, o = out;
  g.shape[0] = a.shape[0] = o.shape[0] = m;
  Tensor codes, scales;
  fp8_input(m, k, w_scale, codes, scales);
  backend_.act_mul_fp8(g, config_.options.activation == Activation::kGeluTanh, a, codes, scales);
  backend_.gemm_fp8(codes, scales, w, w_scale, o);
}

void Model::reserve(int total_q, int num_logits, size_t meta_bytes) {
  const ModelConfig& c = local_;  // the rank's heads and MLP rows; logits rows are full (config_)
  const size_t act = dtype_size(backend_.act_dtype());
  // Recorded graphs read the buffers (and the plan) that are about to move: drop them first.
  if (total_q > cap_tokens_ || num_logits > cap_logits_) drop_graphs();
  if (total_q > cap_tokens_) {
    const size_t t = size_t(total_q);
    // A linear layer's input and output buffers (and the residual stream, which add_norm_linear
    // updates with its input) hold the step's rows rounded up to kFp8BlockRowMultiple (128-block
    // FP8 products run on that many).
    const size_t tp = (t + kFp8BlockRowMultiple - 1) / kFp8BlockRowMultiple * kFp8BlockRowMultiple;
    // The dense MLP's width, when some layer has one.
    int64_t inter = 0;
    for (int l = 0; l < c.num_layers; ++l)
      if (!c.is_moe_layer(l)) inter = c.intermediate_size;
    residual_ = backend_.alloc(tp * size_t(c.hidden_size) * act);
    normed_ = backend_.alloc(tp * size_t(c.hidden_size) * act);
    delta_ = backend_.alloc(tp * size_t(c.hidden_size) * act);
    wide_ = backend_.alloc(tp * size_t(std::max(c.qkv_dim(), 2 * inter)) * act);
    narrow_ = backend_.alloc(tp * size_t(std::max(c.q_dim(), inter)) * act);
    if (c.moe.num_experts > 0) {
      const size_t a = t * size_t(c.moe.top_k), mi = size_t(c.moe.intermediate_size);
      const size_t E = size_t(c.moe.num_experts), k = size_t(c.moe.top_k);
      moe_wide_ = backend_.alloc(a * std::max(2 * mi, size_t(c.hidden_size)) * act);
      moe_narrow_ = backend_.alloc(a * mi * act);
      moe_meta_ = backend_.alloc(4 * (t * E + 2 * t * k + E + 1 + 2 * a));
    }
    bool fp8 = false;
    for (const LayerWeights& L : weights_.layers)
      for (const Tensor* w : {&L.qkv, &L.o, &L.gate_up, &L.down}) fp8 = fp8 || w->dtype == DType::kF8E4M3;
    if (fp8) {  // the e4m3 codes of a linear layer's input and their scales: K is hidden, q_dim or inter
      const int64_t max_k = std::max({c.hidden_size, c.q_dim(), inter});
      fp8_x_ = backend_.alloc(tp * size_t(max_k));
      fp8_scales_ = backend_.alloc(tp * size_t((max_k + kFp8Block - 1) / kFp8Block) * sizeof(float));
    }
    // A step has at most one sequence per token; graphs recorded with the old plan go with it.
    plan_.reset();
    AttentionPlanShape shape;
    shape.num_q_heads = c.num_q_heads;
    shape.num_kv_heads = c.num_kv_heads;
    shape.head_dim = c.head_dim;
    shape.max_total_q = total_q;
    shape.max_num_seqs = total_q;
    plan_ = make_attention_plan(backend_, shape);
    cap_tokens_ = total_q;
  }
  if (num_logits > cap_logits_) {
    const size_t n = size_t(num_logits);
    sel_ = backend_.alloc(3 * n * size_t(c.hidden_size) * act);
    logits_ = backend_.alloc(n * size_t(config_.vocab_size) * sizeof(float));
    if (comm_)
      shard_logits_ = backend_.alloc(size_t(1 + comm_->size()) * n * size_t(shard_.vocab_rows) * sizeof(float));
    cap_logits_ = num_logits;
  }
  if (meta_bytes > cap_meta_) {  // the eager path's metadata: graphs never read these
    meta_host_ = backend_.alloc_host(meta_bytes);
    meta_dev_ = backend_.alloc(meta_bytes);
    cap_meta_ = meta_bytes;
  }
}

Status Model::validate(const StepMetadata& step, const KvCache& cache) const {
  const DType kv_dtype = cache.layer(0).k.dtype;
  const bool kv_dtype_ok = kv_cache_dtype_ok(kv_dtype, backend_.act_dtype());
  if (cache.num_layers() != config_.num_layers || !kv_dtype_ok || cache.layer(0).k.size(2) != local_.num_kv_heads ||
      cache.layer(0).k.size(3) != config_.head_dim)
    return invalid_argument("the KV cache was not made for this model and backend");
  if (step.total_q() <= 0 || step.num_seqs() <= 0) return invalid_argument("batch is empty");
  if (step.page_size != cache.page_size())
    return invalid_argument("the step was laid out for pages of " + std::to_string(step.page_size) +
                            " tokens, the KV cache has " + std::to_string(cache.page_size()));
  if (step.min_page < 0 || step.max_page >= cache.num_pages())
    return invalid_argument("page ids " + std::to_string(step.min_page) + ".." + std::to_string(step.max_page) +
                            " are outside the KV cache of " + std::to_string(cache.num_pages()) + " pages");
  if (step.min_token < 0 || step.max_token >= config_.vocab_size)
    return invalid_argument("token id " + std::to_string(step.min_token < 0 ? step.min_token : step.max_token) +
                            " is outside the vocabulary of " + std::to_string(config_.vocab_size) + " (" + config_.dir +
                            "/config.json)");
  return Status::ok();
}

void Model::fill_rope_bases(const StepLayout& m, int num_seqs, int32_t* words) const {
  const ModelConfig& c = config_;
  if (!rope_bases()) return;
  if (c.rope.type == RopeScaling::kLongRope) {
    // Every row holds its RoPE length (the writer's, or 1 for padding): the long table past the
    // pretraining length.
    for (int i = 0; i < m.total_q; ++i)
      words[m.base + size_t(i)] = words[m.base + size_t(i)] > c.rope.original_max_position ? 1 : 0;
    return;
  }
  auto* bases = reinterpret_cast<float*>(words + m.base);
  for (int s = 0; s < num_seqs; ++s) {
    const float base =
        float(rope_dynamic_base(c.rope, c.rotary_dim, c.max_position_embeddings, words[m.skv + size_t(s)]));
    for (int i = words[m.cu + size_t(s)]; i < words[m.cu + size_t(s) + 1]; ++i) bases[i] = base;
  }
}

Model::StepTensors Model::step_tensors(const StepLayout& m, const Buffer& dev, const StepMetadata& step) const {
  const ModelConfig& c = config_;
  auto meta = [&](size_t off, DType dt, std::initializer_list<int64_t> shape) {
    return view_at(dev, off * 4, dt, shape);
  };
  // Every array at the layout's capacity: an eager step fills it exactly, a graph step is padded.
  const int T = m.total_q, S = m.num_seqs, L = m.num_logits, P = m.pages_per_seq;
  StepTensors t;
  t.total_q = T;
  t.num_logits = L;
  t.ids = meta(m.ids, DType::kI32, {T});
  t.slots = meta(m.slot, DType::kI32, {T});
  t.lidx = meta(m.lidx, DType::kI32, {L});
  AttentionBatch& ab = t.attention;
  ab.cu_seqlens_q = meta(m.cu, DType::kI32, {S + 1});
  ab.seqlens_kv = meta(m.skv, DType::kI32, {S});
  ab.block_table = meta(m.bt, DType::kI32, {S, P});
  ab.num_seqs = S;
  ab.total_q = T;
  ab.max_q_len = step.max_q_len;
  ab.max_kv_len = step.max_kv_len;
  ab.page_size = step.page_size;
  ab.host_cu_seqlens_q = {step.words + m.cu, size_t(S) + 1};
  ab.host_seqlens_kv = {step.words + m.skv, size_t(S)};
  RopeArgs& rope = t.rope;
  rope.positions = meta(m.pos, DType::kI32, {T});
  rope.inv_freq = Tensor::contiguous(inv_freq_.data(), DType::kF32, backend_.device(), {c.rotary_dim / 2});
  if (c.rope.type == RopeScaling::kDynamic) rope.per_token_base = meta(m.base, DType::kF32, {T});
  rope.rotary_dim = c.rotary_dim;
  rope.neox = true;
  rope.attention_scaling = rope_attention_scaling(c.rope);
  if (c.rope.type == RopeScaling::kLongRope) {  // [short; long] tables, one choice per token
    rope.inv_freq = Tensor::contiguous(inv_freq_.data(), DType::kF32, backend_.device(), {2, c.rotary_dim / 2});
    rope.per_token_table = meta(m.base, DType::kI32, {T});
    rope.per_token_base = Tensor{};
  }
  if (c.local_rope) {
    t.rope_local = rope;
    t.rope_local.inv_freq =
        Tensor::contiguous(local_inv_freq_.data(), DType::kF32, backend_.device(), {c.rotary_dim / 2});
    t.rope_local.attention_scaling = rope_attention_scaling(*c.local_rope);
  }
  return t;
}

StepWriter Model::begin_step(const StepShape& shape, int page_size) {
  FG_CHECK(shape.num_seqs > 0 && shape.total_q >= shape.num_seqs && page_size > 0,
           "begin_step: a step needs sequences, a token per sequence and a page size");
  pending_ = PendingStep{};
  pending_.open = true;
  const int pages_needed = std::max(1, kv_pages_for(shape.max_kv_len, page_size));
  const int width = shape.max_q_len <= 1 ? 1 : graphs_ ? graphs_->options.max_query_len : 0;
  if (graphs_ && shape.max_q_len >= 1 && shape.max_q_len <= width &&
      shape.num_seqs <= graphs_->options.max_batch_size && pages_needed <= graphs_->options.max_pages_per_seq) {
    const int b = decode_graph_bucket(shape.num_seqs, graphs_->options.max_batch_size);
    const int pages = decode_graph_pages(pages_needed, graphs_->options.max_pages_per_seq);
    pending_.graph = true;
    pending_.width = width;
    pending_.layout = StepLayout::make(b * width, b, b * width, pages, rope_bases());
    pending_.words = static_cast<int32_t*>(graphs_->meta_host.data());
  } else {
    pending_.layout = StepLayout::make(shape.total_q, shape.num_seqs, shape.num_logits, pages_needed, rope_bases());
    reserve(shape.total_q, shape.num_logits, pending_.layout.words * 4);
    pending_.words = static_cast<int32_t*>(meta_host_.data());
  }
  return StepWriter(pending_.layout, pending_.words, page_size);
}

Result<Tensor> Model::forward(std::span<const SequenceChunk> chunks, KvCache& cache) {
  if (chunks.empty()) return invalid_argument("a batch needs at least one sequence");
  StepShape shape = step_shape(chunks);
  if (shape.total_q < shape.num_seqs) return invalid_argument("a sequence of the batch has no new tokens");
  StepWriter w = begin_step(shape, cache.page_size());
  for (const SequenceChunk& c : chunks) FG_RETURN_IF_ERROR(w.add(c));
  return forward(w.finish(), cache);
}

Result<Tensor> Model::forward(const StepMetadata& step, KvCache& cache) {
  FG_CHECK(pending_.open && step.words == pending_.words && step.layout.words == pending_.layout.words,
           "Model::forward: the step was not written into the block of this model's begin_step");
  pending_.open = false;
  FG_RETURN_IF_ERROR(validate(step, cache));
  if (pending_.graph) return forward_graph(step, cache);
  // Eager: the block holds exactly the step; one upload, views shared by every layer.
  const StepLayout& m = pending_.layout;
  FG_CHECK(step.num_seqs() == m.num_seqs && step.total_q() == m.total_q && step.num_logits() == m.num_logits,
           "Model::forward: the step does not fill the shape given to begin_step");
  fill_rope_bases(m, m.num_seqs, step.words);
  backend_.copy_from_host(meta_dev_.data(), step.words, m.words * 4);
  const StepTensors t = step_tensors(m, meta_dev_, step);
  backend_.plan_attention(*plan_, t.attention);
  run_layers(t, cache);
  return view_at(logits_, 0, DType::kF32, {m.num_logits, config_.vocab_size});
}

void Model::gated_act(const Tensor& gate_up, Tensor& out) {
  if (config_.options.activation == Activation::kGeluTanh)
    backend_.gelu_tanh_mul(gate_up, out);
  else
    backend_.silu_mul(gate_up, out);
}

void Model::run_moe(const LayerWeights& w, const Tensor& normed, Tensor& out) {
  const ModelConfig& c = config_;
  const DType act = backend_.act_dtype();
  const int T = int(normed.shape[0]), E = c.moe.num_experts, K = c.moe.top_k;
  const int64_t A = int64_t(T) * K, mi = c.moe.intermediate_size;
  // moe_meta_ holds the routing at this step's sizes, packed (see model.h).
  size_t off = 0;
  auto take = [&](DType dt, std::initializer_list<int64_t> shape) {
    Tensor v = view_at(moe_meta_, off, dt, shape);
    off += v.nbytes();
    return v;
  };
  Tensor router_logits = take(DType::kF32, {T, E});
  MoeRouting r;
  r.num_tokens = T;
  r.num_experts = E;
  r.top_k = K;
  r.topk_weights = take(DType::kF32, {T, K});
  r.topk_ids = take(DType::kI32, {T, K});
  r.expert_offsets = take(DType::kI32, {E + 1});
  r.sorted_assign = take(DType::kI32, {A});
  r.assign_row = take(DType::kI32, {A});
  Tensor gate_up = view_at(moe_wide_, 0, act, {A, 2 * mi});
  Tensor expert_act = view_at(moe_narrow_, 0, act, {A, mi});
  Tensor expert_out = view_at(moe_wide_, 0, act, {A, c.hidden_size});

  backend_.gemm(normed, w.router, nullptr, router_logits);
  backend_.moe_route(router_logits, c.moe.renormalize, r);
  backend_.moe_gemm(normed, w.expert_gate_up, r, /*gather=*/true, gate_up);
  gated_act(gate_up, expert_act);
  backend_.moe_gemm(expert_act, w.expert_down, r, /*gather=*/false, expert_out);
  backend_.moe_combine(expert_out, r, out);
}

void Model::lm_head(const Tensor& normed, Tensor& logits) {
  if (!comm_) {
    backend_.gemm(normed, weights_.lm_head, nullptr, logits);
    return;
  }
  // The rank's vocabulary shard [L, Vr], gathered as [size, L, Vr], then each rank's valid
  // columns copied into the full rows [L, V].
  const int64_t L = normed.shape[0], Vr = shard_.vocab_rows, V = config_.vocab_size;
  const int N = comm_->size();
  const size_t shard_bytes = size_t(cap_logits_) * size_t(Vr) * sizeof(float);
  Tensor local = view_at(shard_logits_, 0, DType::kF32, {L, Vr});
  Tensor gathered = view_at(shard_logits_, shard_bytes, DType::kF32, {N * L * Vr});
  backend_.gemm(normed, weights_.lm_head, nullptr, local);
  comm_->all_gather(local.reshape({L * Vr}), gathered);
  for (int r = 0; r < N; ++r) {
    const int64_t valid = std::clamp<int64_t>(V - r * Vr, 0, Vr);
    backend_.copy_rows(logits.ptr<float>() + r * Vr, size_t(V) * sizeof(float),
                       gathered.ptr<float>() + int64_t(r) * L * Vr, size_t(Vr) * sizeof(float),
                       size_t(valid) * sizeof(float), size_t(L));
  }
}

void Model::run_layers(const StepTensors& t, KvCache& cache) {
  const ModelConfig& c = local_;  // the rank's heads and MLP rows (all of them without tensor parallelism)
  const DType act = backend_.act_dtype();
  const int T = t.total_q, L = t.num_logits;

  // ---- workspace views
  Tensor residual = view_at(residual_, 0, act, {T, c.hidden_size});
  Tensor normed = view_at(normed_, 0, act, {T, c.hidden_size});
  Tensor delta = view_at(delta_, 0, act, {T, c.hidden_size});
  Tensor qkv = view_at(wide_, 0, act, {T, c.qkv_dim()});
  // Attention sees the rows that belong to a sequence (all of them but in a padded graph step).
  const int A = t.attention.total_q;
  Tensor attn_out = view_at(narrow_, 0, act, {A, c.num_q_heads, c.head_dim});
  Tensor attn_out_2d = view_at(narrow_, 0, act, {T, c.q_dim()});
  Tensor q = head_view(qkv, 0, c.num_q_heads, c.head_dim);
  Tensor q_attn = q;
  q_attn.shape[0] = A;
  Tensor k = head_view(qkv, c.q_dim(), c.num_kv_heads, c.head_dim);
  Tensor v = head_view(qkv, c.q_dim() + c.kv_dim(), c.num_kv_heads, c.head_dim);
  const float eps = float(c.rms_norm_eps);
  const float attention_scale =
      c.attention_scale > 0.0 ? float(c.attention_scale) : 1.0f / std::sqrt(float(c.head_dim));

  if (comm_) {  // each rank looks up its vocabulary shard (zeros elsewhere); the sum is the full row
    backend_.embedding_shard(t.ids, weights_.embed, shard_.vocab0, residual);
    comm_->all_reduce_sum(residual);
  } else {
    backend_.embedding(t.ids, weights_.embed, residual);
  }
  if (c.embedding_scale != 1.0) {
    // As transformers: the scale in the weights' dtype (bf16 on cuda), then the product rounded.
    float scale = float(c.embedding_scale);
    if (act == DType::kBF16) scale = bf16_to_f32(f32_to_bf16(scale));
    if (act == DType::kF16) scale = f16_to_f32(f32_to_f16(scale));
    backend_.scale(residual, scale);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[size_t(l)];
    const int window = c.layer_sliding_window[size_t(l)];
    const RopeArgs& rope = c.local_rope && window > 0 ? t.rope_local : t.rope;
    if (w.qkv.dtype != DType::kF8E4M3 && !c.options.qk_norm) {  // the projection, RoPE and the KV write together
      if (l == 0)
        backend_.rms_norm(residual, w.input_norm, eps, normed);
      else
        backend_.add_rms_norm(residual, delta, w.input_norm, eps, normed);
      backend_.qkv_rope_kv_write(normed, w.qkv, w.qkv_bias.defined() ? &w.qkv_bias : nullptr, c.num_q_heads,
                                 c.num_kv_heads, rope, t.slots, cache.layer(l), qkv);
    } else {
      if (l == 0) {
        backend_.rms_norm(residual, w.input_norm, eps, normed);
        linear(normed, w.qkv, w.qkv_scale, w.qkv_bias, qkv);
      } else {
        add_norm_linear(residual, delta, w.input_norm, eps, normed, w.qkv, w.qkv_scale, w.qkv_bias, qkv);
      }
      if (c.options.qk_norm)
        backend_.qk_norm_rope_kv_write(q, k, v, w.q_norm, w.k_norm, eps, rope, t.slots, cache.layer(l));
      else
        backend_.rope_kv_write(q, k, v, rope, t.slots, cache.layer(l));
    }
    AttentionParams params;
    params.scale = attention_scale;
    params.causal = true;
    params.sliding_window = window;
    params.softcap = float(c.attn_softcap);
    backend_.attention(*plan_, q_attn, cache.layer(l), t.attention, params, attn_out, nullptr);
    linear(attn_out_2d, w.o, w.o_scale, w.o_bias, delta);
    if (comm_) comm_->all_reduce_sum(delta);  // row-parallel o_proj: the ranks' partial sums
    if (c.options.sandwich_norms) backend_.rms_norm(delta, w.attn_out_norm, eps, delta);

    if (c.is_moe_layer(l)) {
      backend_.add_rms_norm(residual, delta, w.post_norm, eps, normed);
      run_moe(w, normed, delta);
    } else {
      Tensor gate_up = view_at(wide_, 0, act, {T, 2 * c.intermediate_size});
      Tensor mlp_act = view_at(narrow_, 0, act, {T, c.intermediate_size});
      add_norm_linear(residual, delta, w.post_norm, eps, normed, w.gate_up, w.gate_up_scale, w.gate_up_bias, gate_up);
      act_linear(gate_up, mlp_act, w.down, w.down_scale, w.down_bias, delta);
      if (comm_) comm_->all_reduce_sum(delta);  // row-parallel down_proj
    }
    if (c.options.sandwich_norms) backend_.rms_norm(delta, w.mlp_out_norm, eps, delta);
  }

  if (L == 0) return;
  // Only the wanted rows go through the final norm and the vocabulary projection.
  Tensor logits = view_at(logits_, 0, DType::kF32, {L, config_.vocab_size});
  const size_t sel_bytes = size_t(cap_logits_) * size_t(c.hidden_size) * dtype_size(act);
  Tensor sel_res = view_at(sel_, 0, act, {L, c.hidden_size});
  Tensor sel_delta = view_at(sel_, sel_bytes, act, {L, c.hidden_size});
  Tensor sel_normed = view_at(sel_, 2 * sel_bytes, act, {L, c.hidden_size});
  backend_.gather_rows(residual, t.lidx, sel_res);
  backend_.gather_rows(delta, t.lidx, sel_delta);
  backend_.add_rms_norm(sel_res, sel_delta, weights_.final_norm, eps, sel_normed);
  lm_head(sel_normed, logits);
  if (c.final_softcap > 0.0) backend_.softcap(logits, float(c.final_softcap));
}

}  // namespace fg
