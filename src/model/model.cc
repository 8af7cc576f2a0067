// The decoder's forward pass (see model.h).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, Backend& backend) {
  // A .gguf file, or a folder holding one .gguf and no config.json (model/gguf_model.h).
  FG_ASSIGN_OR_RETURN(std::string gguf_path, find_gguf_model(dir));
  if (!gguf_path.empty()) {
    FG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf_path));
    FG_ASSIGN_OR_RETURN(ModelConfig config, gguf_model_config(*file));
    std::unique_ptr<Model> m(new Model(backend, std::move(config)));
    FG_ASSIGN_OR_RETURN(m->weights_, load_model_weights(m->config_, *gguf_weight_source(*file, m->config_), backend));
    m->upload_rope_table();
    return m;
  }
  FG_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  FG_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(dir));
  std::unique_ptr<Model> m(new Model(backend, std::move(config)));
  FG_ASSIGN_OR_RETURN(m->weights_, load_model_weights(m->config_, ckpt, backend));

  m->upload_rope_table();
  return m;
}

void Model::upload_rope_table() {
  std::vector<float> inv = rope_inv_freq(config_.rope, config_.rotary_dim);
  inv_freq_ = backend_.alloc(inv.size() * sizeof(float));
  Buffer staging = backend_.alloc_host(inv.size() * sizeof(float));
  std::memcpy(staging.data(), inv.data(), inv.size() * sizeof(float));
  backend_.copy_from_host(inv_freq_.data(), staging.data(), inv.size() * sizeof(float));
  backend_.synchronize();
}

bool Model::reserve(int total_q, int num_logits, size_t meta_bytes) {
  const ModelConfig& c = config_;
  const size_t act = dtype_size(backend_.act_dtype());
  bool moved = false;
  if (total_q > cap_tokens_) {
    const size_t t = size_t(total_q);
    residual_ = backend_.alloc(t * size_t(c.hidden_size) * act);
    normed_ = backend_.alloc(t * size_t(c.hidden_size) * act);
    delta_ = backend_.alloc(t * size_t(c.hidden_size) * act);
    wide_ = backend_.alloc(t * size_t(std::max(c.qkv_dim(), 2 * c.intermediate_size)) * act);
    narrow_ = backend_.alloc(t * size_t(std::max(c.q_dim(), c.intermediate_size)) * act);
    cap_tokens_ = total_q;
    moved = true;
  }
  if (num_logits > cap_logits_) {
    const size_t n = size_t(num_logits);
    sel_ = backend_.alloc(3 * n * size_t(c.hidden_size) * act);
    logits_ = backend_.alloc(n * size_t(c.vocab_size) * sizeof(float));
    cap_logits_ = num_logits;
    moved = true;
  }
  if (meta_bytes > cap_meta_) {  // the eager path's metadata: graphs never read these
    meta_host_ = backend_.alloc_host(meta_bytes);
    meta_dev_ = backend_.alloc(meta_bytes);
    cap_meta_ = meta_bytes;
  }
  return moved;
}

Status Model::validate(const BatchView& spec, const KvCache& cache) const {
  const int T = spec.total_q(), S = spec.num_seqs(), P = spec.max_pages_per_seq;
  if (cache.num_layers() != config_.num_layers || cache.layer(0).k.dtype != backend_.act_dtype() ||
      cache.layer(0).k.size(2) != config_.num_kv_heads || cache.layer(0).k.size(3) != config_.head_dim)
    return invalid_argument("the KV cache was not made for this model and backend");
  if (T <= 0 || S <= 0) return invalid_argument("batch is empty");
  if (int(spec.positions.size()) != T || int(spec.slot_mapping.size()) != T || int(spec.cu_seqlens_q.size()) != S + 1 ||
      P <= 0 || spec.block_table.size() != size_t(S) * size_t(P))
    return invalid_argument("batch metadata arrays have inconsistent sizes");
  if (spec.cu_seqlens_q[0] != 0 || spec.cu_seqlens_q[size_t(S)] != T)
    return invalid_argument("cu_seqlens_q must start at 0 and end at the number of tokens");
  const int64_t page_size = cache.page_size();
  for (int s = 0; s < S; ++s) {
    int q_len = spec.cu_seqlens_q[size_t(s) + 1] - spec.cu_seqlens_q[size_t(s)];
    int kv_len = spec.seqlens_kv[size_t(s)];
    if (q_len <= 0) return invalid_argument("sequence " + std::to_string(s) + " has no new tokens");
    if (kv_len < q_len) return invalid_argument("sequence " + std::to_string(s) + ": kv length below its new tokens");
    if (int64_t(kv_len) > int64_t(P) * page_size)
      return invalid_argument("sequence " + std::to_string(s) + ": kv length exceeds its block table");
    for (int p = 0; p < kv_pages_for(kv_len, int(page_size)); ++p) {
      int32_t page = spec.block_table[size_t(s) * size_t(P) + size_t(p)];
      if (page < 0 || page >= cache.num_pages())
        return invalid_argument("sequence " + std::to_string(s) + ": page id " + std::to_string(page) +
                                " outside the KV cache of " + std::to_string(cache.num_pages()) + " pages");
    }
  }
  const int64_t num_slots = int64_t(cache.num_pages()) * page_size;
  for (int i = 0; i < T; ++i) {
    int32_t id = spec.token_ids[size_t(i)];
    if (id < 0 || id >= config_.vocab_size)
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(config_.vocab_size) + " (" + config_.dir + "/config.json)");
    if (spec.positions[size_t(i)] < 0) return invalid_argument("negative position in batch");
    if (spec.slot_mapping[size_t(i)] >= num_slots)
      return invalid_argument("slot " + std::to_string(spec.slot_mapping[size_t(i)]) + " outside the KV cache");
  }
  for (int32_t r : spec.logits_indices)
    if (r < 0 || r >= T) return invalid_argument("logits row " + std::to_string(r) + " outside the batch");
  return Status::ok();
}

Model::MetaLayout Model::meta_layout(int total_q, int num_seqs, int num_logits, int pages_per_seq) const {
  MetaLayout m;
  m.total_q = total_q;
  m.num_seqs = num_seqs;
  m.num_logits = num_logits;
  m.pages_per_seq = pages_per_seq;
  const bool dynamic = config_.rope.type == RopeScaling::kDynamic;
  m.ids = 0;
  m.pos = m.ids + size_t(total_q);
  m.cu = m.pos + size_t(total_q);
  m.skv = m.cu + size_t(num_seqs) + 1;
  m.bt = m.skv + size_t(num_seqs);
  m.slot = m.bt + size_t(num_seqs) * size_t(pages_per_seq);
  m.lidx = m.slot + size_t(total_q);
  m.base = m.lidx + size_t(num_logits);
  m.words = m.base + (dynamic ? size_t(total_q) : 0);
  return m;
}

void Model::fill_rope_bases(const MetaLayout& m, int32_t* words) const {
  const ModelConfig& c = config_;
  if (c.rope.type != RopeScaling::kDynamic) return;
  auto* bases = reinterpret_cast<float*>(words + m.base);
  for (int s = 0; s < m.num_seqs; ++s) {
    const float base =
        float(rope_dynamic_base(c.rope, c.rotary_dim, c.max_position_embeddings, words[m.skv + size_t(s)]));
    for (int i = words[m.cu + size_t(s)]; i < words[m.cu + size_t(s) + 1]; ++i) bases[i] = base;
  }
}

Model::StepTensors Model::step_tensors(const MetaLayout& m, const Buffer& dev, const int32_t* host, int max_q_len,
                                       int max_kv_len, int page_size) const {
  const ModelConfig& c = config_;
  auto meta = [&](size_t off, DType dt, std::initializer_list<int64_t> shape) {
    return view_at(dev, off * 4, dt, shape);
  };
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
  ab.max_q_len = max_q_len;
  ab.max_kv_len = max_kv_len;
  ab.page_size = page_size;
  ab.host_cu_seqlens_q = {host + m.cu, size_t(S) + 1};
  ab.host_seqlens_kv = {host + m.skv, size_t(S)};
  RopeArgs& rope = t.rope;
  rope.positions = meta(m.pos, DType::kI32, {T});
  rope.inv_freq = Tensor::contiguous(inv_freq_.data(), DType::kF32, backend_.device(), {c.rotary_dim / 2});
  if (c.rope.type == RopeScaling::kDynamic) rope.per_token_base = meta(m.base, DType::kF32, {T});
  rope.rotary_dim = c.rotary_dim;
  rope.neox = true;
  return t;
}

void Model::plan(const StepTensors& t) {
  backend_.plan_attention(t.attention, config_.num_q_heads, config_.num_kv_heads, config_.head_dim);
}

Result<Tensor> Model::forward(const BatchView& spec, KvCache& cache) {
  FG_RETURN_IF_ERROR(validate(spec, cache));
  const int T = spec.total_q(), S = spec.num_seqs(), L = spec.num_logits(), P = spec.max_pages_per_seq;
  int max_q = 0, max_kv = 0;
  for (int s = 0; s < S; ++s) {
    max_q = std::max(max_q, spec.cu_seqlens_q[size_t(s) + 1] - spec.cu_seqlens_q[size_t(s)]);
    max_kv = std::max(max_kv, spec.seqlens_kv[size_t(s)]);
  }
  if (graphs_ && max_q == 1 && S <= graphs_->options.max_batch_size) {
    const int pages_needed = kv_pages_for(max_kv, cache.page_size());
    if (pages_needed <= graphs_->options.max_pages_per_seq) return forward_decode_fixed(spec, cache, pages_needed);
  }

  // ---- metadata: one host staging buffer, one upload, views shared by every layer
  const MetaLayout m = meta_layout(T, S, L, P);
  if (reserve(T, L, m.words * 4) && graphs_ && !graphs_->graphs.empty()) drop_graphs();
  auto* words = static_cast<int32_t*>(meta_host_.data());
  std::copy(spec.token_ids.begin(), spec.token_ids.end(), words + m.ids);
  std::copy(spec.positions.begin(), spec.positions.end(), words + m.pos);
  std::copy(spec.cu_seqlens_q.begin(), spec.cu_seqlens_q.end(), words + m.cu);
  std::copy(spec.seqlens_kv.begin(), spec.seqlens_kv.end(), words + m.skv);
  std::copy(spec.block_table.begin(), spec.block_table.end(), words + m.bt);
  std::copy(spec.slot_mapping.begin(), spec.slot_mapping.end(), words + m.slot);
  std::copy(spec.logits_indices.begin(), spec.logits_indices.end(), words + m.lidx);
  fill_rope_bases(m, words);
  backend_.copy_from_host(meta_dev_.data(), meta_host_.data(), m.words * 4);
  const StepTensors t = step_tensors(m, meta_dev_, words, max_q, max_kv, cache.page_size());
  plan(t);
  run_layers(t, cache);
  return view_at(logits_, 0, DType::kF32, {L, config_.vocab_size});
}

void Model::run_layers(const StepTensors& t, KvCache& cache) {
  const ModelConfig& c = config_;
  const DType act = backend_.act_dtype();
  const int T = t.total_q, L = t.num_logits;

  // ---- workspace views
  Tensor residual = view_at(residual_, 0, act, {T, c.hidden_size});
  Tensor normed = view_at(normed_, 0, act, {T, c.hidden_size});
  Tensor delta = view_at(delta_, 0, act, {T, c.hidden_size});
  Tensor qkv = view_at(wide_, 0, act, {T, c.qkv_dim()});
  Tensor gate_up = view_at(wide_, 0, act, {T, 2 * c.intermediate_size});
  Tensor attn_out = view_at(narrow_, 0, act, {T, c.num_q_heads, c.head_dim});
  Tensor attn_out_2d = view_at(narrow_, 0, act, {T, c.q_dim()});
  Tensor mlp_act = view_at(narrow_, 0, act, {T, c.intermediate_size});
  Tensor q = head_view(qkv, 0, c.num_q_heads, c.head_dim);
  Tensor k = head_view(qkv, c.q_dim(), c.num_kv_heads, c.head_dim);
  Tensor v = head_view(qkv, c.q_dim() + c.kv_dim(), c.num_kv_heads, c.head_dim);
  const float eps = float(c.rms_norm_eps);

  backend_.embedding(t.ids, weights_.embed, residual);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[size_t(l)];
    if (l == 0)
      backend_.rms_norm(residual, w.input_norm, eps, normed);
    else
      backend_.add_rms_norm(residual, delta, w.input_norm, eps, normed);

    backend_.gemm(normed, w.qkv, w.qkv_bias.defined() ? &w.qkv_bias : nullptr, qkv);
    if (c.options.qk_norm) {
      backend_.rms_norm(q, w.q_norm, eps, q);
      backend_.rms_norm(k, w.k_norm, eps, k);
    }
    backend_.rope_kv_write(q, k, v, t.rope, t.slots, cache.layer(l));
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(float(c.head_dim));
    params.causal = true;
    params.sliding_window = c.layer_sliding_window[size_t(l)];
    backend_.attention(q, cache.layer(l), t.attention, params, attn_out, nullptr);
    backend_.gemm(attn_out_2d, w.o, w.o_bias.defined() ? &w.o_bias : nullptr, delta);

    backend_.add_rms_norm(residual, delta, w.post_norm, eps, normed);
    backend_.gemm(normed, w.gate_up, w.gate_up_bias.defined() ? &w.gate_up_bias : nullptr, gate_up);
    backend_.silu_mul(gate_up, mlp_act);
    backend_.gemm(mlp_act, w.down, w.down_bias.defined() ? &w.down_bias : nullptr, delta);
  }

  if (L == 0) return;
  // Only the wanted rows go through the final norm and the vocabulary projection.
  Tensor logits = view_at(logits_, 0, DType::kF32, {L, c.vocab_size});
  const size_t sel_bytes = size_t(cap_logits_) * size_t(c.hidden_size) * dtype_size(act);
  Tensor sel_res = view_at(sel_, 0, act, {L, c.hidden_size});
  Tensor sel_delta = view_at(sel_, sel_bytes, act, {L, c.hidden_size});
  Tensor sel_normed = view_at(sel_, 2 * sel_bytes, act, {L, c.hidden_size});
  backend_.gather_rows(residual, t.lidx, sel_res);
  backend_.gather_rows(delta, t.lidx, sel_delta);
  backend_.add_rms_norm(sel_res, sel_delta, weights_.final_norm, eps, sel_normed);
  backend_.gemm(sel_normed, weights_.lm_head, nullptr, logits);
}

}  // namespace fg
