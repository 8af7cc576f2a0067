// Weight naming, validation, fusion and upload (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/dequant.h"

namespace fg {
namespace {

constexpr size_t kAlign = 256;  // every tensor starts on a 256-byte boundary of the arena

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One destination tensor assembled from one or more checkpoint tensors (or slices of them, for a
// tensor-parallel shard), concatenated along dim 0, then zero rows up to `shape`.
struct Assembly {
  Tensor* target = nullptr;
  bool matrix = false;  // a GEMM weight or the embedding table: kept in the backend's weight dtype
  std::vector<int64_t> shape;
  std::vector<WeightTensor> parts;
  std::vector<WeightSlice> slices;  // per part
  int64_t pad_numel = 0;            // zero elements after the parts
  DType dtype = DType::kF32;        // what the target holds (set by upload)
  bool plus_one = false;            // store 1 + w (Gemma's RMSNorm weights)
  size_t arena_offset = 0;
};

// How add() transforms and shapes the assembly.
struct AddOptions {
  bool matrix = false;              // a GEMM weight or the embedding table (see Assembly)
  bool plus_one = false;            // see Assembly
  std::vector<int64_t> view_shape;  // the target's shape when not the concatenation's (same numel)
  int64_t rows = 0;                 // > 0: the target's rows, zero-padded past the parts' (a vocabulary shard)
};

// A checkpoint tensor the planner reads, whole or sliced.
struct PartSpec {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's expected shape
  WeightSlice slice = {};
};

int64_t sliced_numel(const WeightTensor& t, const WeightSlice& s) {
  if (s.dim < 0) return t.numel();
  return t.numel() / t.shape[size_t(s.dim)] * (s.end - s.begin);
}

// The slice's values as stored: a pointer into the whole tensor `host` (rows), or into `buf`
// (columns, gathered row by row). Reads only the slice's bytes.
const void* read_slice(const WeightTensor& t, const WeightSlice& s, const void* host, std::vector<uint8_t>& buf) {
  if (s.dim < 0) return host;
  const DType dt = *t.dtype;
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  if (s.dim == 0) return static_cast<const char*>(host) + dtype_bytes(dt, s.begin * cols);
  const size_t row = dtype_bytes(dt, cols), skip = dtype_bytes(dt, s.begin), take = dtype_bytes(dt, s.end - s.begin);
  buf.resize(size_t(t.shape[0]) * take);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    std::memcpy(buf.data() + size_t(r) * take, static_cast<const char*>(host) + size_t(r) * row + skip, take);
  return buf.data();
}

AddOptions matrix_options() {
  AddOptions o;
  o.matrix = true;
  return o;
}

size_t stored_bytes(const WeightTensor& t, const WeightSlice& s) {
  return dtype_bytes(*t.dtype, sliced_numel(t, s));
}

// The dtype an assembly is kept in on `backend`: Gemma's 1 + w norm weights in f32 (as
// transformers computes them), other norms and biases in the activation dtype; a
// matrix in the backend's weight dtype for its stored dtype, or for f32 (the parts' exact values)
// when its parts are stored in different dtypes.
DType target_dtype(const Assembly& a, const Backend& backend) {
  if (a.plus_one) return DType::kF32;  // 1 + w would lose w's low bits in bf16
  if (!a.matrix) return backend.act_dtype();
  const DType first = *a.parts.front().dtype;
  for (const WeightTensor& p : a.parts)
    if (*p.dtype != first) return backend.weight_dtype(DType::kF32);
  return backend.weight_dtype(first);
}

// Index of the first NaN or infinity among n values, or -1. Tests the exponent bits, so it reads
// each value once without converting it.
template <class Bits>
int64_t first_non_finite_bits(const void* data, int64_t n, Bits exponent_mask) {
  const auto* v = static_cast<const Bits*>(data);
  for (int64_t i = 0; i < n; ++i) {
    Bits x;
    std::memcpy(&x, v + i, sizeof(Bits));  // safetensors data need not be aligned
    if ((x & exponent_mask) == exponent_mask) return i;
  }
  return -1;
}

int64_t first_non_finite(const void* data, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32: return first_non_finite_bits<uint32_t>(data, n, 0x7f800000u);
    case DType::kF16: return first_non_finite_bits<uint16_t>(data, n, uint16_t(0x7c00));
    case DType::kBF16: return first_non_finite_bits<uint16_t>(data, n, uint16_t(0x7f80));
    default: return -1;
  }
}

class Planner {
 public:
  Planner(const WeightSource& source) : source_(source) {}

  // Requires each named tensor with its expected shape; the target gets the row concatenation of
  // their slices.
  Status add(Tensor* target, const std::vector<PartSpec>& parts, const AddOptions& options = {}) {
    Assembly a;
    a.target = target;
    a.matrix = options.matrix;
    a.plus_one = options.plus_one;
    for (const auto& [name, shape, slice] : parts) {
      FG_ASSIGN_OR_RETURN(WeightTensor t, source_.find(name));
      if (!t.dtype)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has dtype " + t.dtype_name + ", expected " +
                                source_.loadable_types());
      if (t.shape != shape)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has shape " + t.shape_string() + ", expected " +
                                shape_str(shape) + " for this " + source_.config_name());
      FG_CHECK(t.shape.back() % dtype_block_size(*t.dtype) == 0,
               "weight source gave " + t.name + " rows that are not whole blocks");
      std::vector<int64_t> part_shape = shape;
      if (slice.dim >= 0) {
        FG_CHECK(slice.dim < int(shape.size()) && slice.begin >= 0 && slice.begin <= slice.end &&
                     slice.end <= shape[size_t(slice.dim)],
                 "weight slice outside " + t.name);
        const int64_t block = dtype_block_size(*t.dtype);
        if (slice.dim == 1 && (slice.begin % block != 0 || slice.end % block != 0))
          return invalid_argument(
              t.file + ": tensor '" + t.name + "' (" + t.dtype_name + ") cannot be split at column " +
              std::to_string(slice.begin % block ? slice.begin : slice.end) + ": its quantized blocks hold " +
              std::to_string(block) + " columns; use a smaller --tensor-parallel-size");
        part_shape[size_t(slice.dim)] = slice.end - slice.begin;
      }
      a.parts.push_back(std::move(t));
      a.slices.push_back(slice);
      if (a.shape.empty())
        a.shape = part_shape;
      else
        a.shape[0] += part_shape[0];
    }
    if (options.rows > 0) {
      FG_CHECK(options.rows >= a.shape[0], "padded weight rows below its parts'");
      a.pad_numel = (options.rows - a.shape[0]) * (a.shape.size() > 1 ? a.shape[1] : 1);
      a.shape[0] = options.rows;
    }
    if (!options.view_shape.empty()) a.shape = options.view_shape;
    assemblies_.push_back(std::move(a));
    return Status::ok();
  }

  // Bytes read out of the source's tensors (the slices) by upload.
  int64_t bytes_read() const { return bytes_read_; }

  Status upload(Backend& backend, Buffer& arena) {
    size_t total = 0, staging_bytes = 0, f32_values = 0, zero_bytes = 0;
    for (Assembly& a : assemblies_) {
      a.dtype = target_dtype(a, backend);
      a.arena_offset = total;
      int64_t numel = 1;
      for (int64_t d : a.shape) numel *= d;
      total += align_up(dtype_bytes(a.dtype, numel));
      for (size_t i = 0; i < a.parts.size(); ++i) {
        const WeightTensor& p = a.parts[i];
        if (*p.dtype == a.dtype && !a.plus_one) continue;
        const size_t numel = size_t(sliced_numel(p, a.slices[i]));
        // Converted on the device from the stored form, or from f32 values made on the host.
        if (dtype_is_blocked(*p.dtype) || a.plus_one) {
          f32_values = std::max(f32_values, numel);
          if (a.dtype != DType::kF32) staging_bytes = std::max(staging_bytes, numel * 4);
        } else {
          staging_bytes = std::max(staging_bytes, stored_bytes(p, a.slices[i]));
        }
      }
      zero_bytes = std::max(zero_bytes, dtype_bytes(a.dtype, a.pad_numel));
    }
    arena = backend.alloc(std::max<size_t>(total, kAlign));
    if (!arena.data() && total > 0)
      return Status(ErrorCode::kResourceExhausted,
                    "cannot allocate " + std::to_string(total) + " bytes for the weights on " + backend.name());
    Buffer staging;
    if (staging_bytes > 0) staging = backend.alloc(staging_bytes);
    std::vector<uint8_t> scratch;           // tensors the source reorders on the host (GGUF q/k rows)
    std::vector<float> values(f32_values);  // blocks dequantized (or 1 + w) on the host
    std::vector<uint8_t> columns;           // a column slice gathered from the source's rows
    const std::vector<uint8_t> zeros(zero_bytes);
    char* base = static_cast<char*>(arena.data());
    for (Assembly& a : assemblies_) {
      char* dst = base + a.arena_offset;
      for (size_t part = 0; part < a.parts.size(); ++part) {
        const WeightTensor& p = a.parts[part];
        const int64_t numel = sliced_numel(p, a.slices[part]);
        const DType stored = *p.dtype;
        const void* whole = source_.read(p, scratch);
        const void* host = read_slice(p, a.slices[part], whole, columns);
        bytes_read_ += int64_t(dtype_bytes(stored, numel));
        // A NaN or infinity in a weight poisons every activation it touches; refuse the file.
        if (const int64_t bad = first_non_finite(host, stored, numel); bad >= 0) {
          backend.synchronize();  // copies already queued still read the staging buffer
          return invalid_argument(p.file + ": tensor '" + p.name + "' holds a NaN or infinite value at element " +
                                  std::to_string(bad) + " (of " + std::to_string(numel) +
                                  "); the checkpoint is corrupt");
        }
        if (stored == a.dtype && !a.plus_one) {
          backend.copy_from_host(dst, host, dtype_bytes(stored, numel));
        } else {
          DType from = stored;
          if (dtype_is_blocked(stored) || a.plus_one) {
            dequantize(stored, host, values.data(), numel);
            // 1 + w in f32, as transformers computes (1.0 + weight.float())
            if (a.plus_one)
              for (int64_t i = 0; i < numel; ++i) values[size_t(i)] += 1.0f;
            host = values.data();
            from = DType::kF32;
          }
          if (from == a.dtype) {
            backend.copy_from_host(dst, host, size_t(numel) * 4);
          } else {
            backend.copy_from_host(staging.data(), host, dtype_bytes(from, numel));
            Tensor src = Tensor::contiguous(staging.data(), from, backend.device(), {numel});
            Tensor out = Tensor::contiguous(dst, a.dtype, backend.device(), {numel});
            backend.convert(src, out);
          }
        }
        // Copies are asynchronous: the host buffers are rewritten by the next part.
        if (whole == scratch.data() || host == columns.data() || host == values.data()) backend.synchronize();
        dst += dtype_bytes(a.dtype, numel);
      }
      if (a.pad_numel > 0) {  // a vocabulary shard's padding rows: zero bytes are zero values in every dtype
        backend.copy_from_host(dst, zeros.data(), dtype_bytes(a.dtype, a.pad_numel));
      }
      Tensor& t = *a.target;
      t = Tensor{};
      t.data = base + a.arena_offset;
      t.dtype = a.dtype;
      t.device = backend.device();
      t.ndim = int(a.shape.size());
      int64_t stride = 1;
      for (int d = t.ndim - 1; d >= 0; --d) {
        t.shape[size_t(d)] = a.shape[size_t(d)];
        t.stride[size_t(d)] = stride;
        stride *= a.shape[size_t(d)];
      }
    }
    backend.synchronize();  // the staging buffer and the file mapping may go after this
    return Status::ok();
  }

 private:
  const WeightSource& source_;
  std::vector<Assembly> assemblies_;
  int64_t bytes_read_ = 0;
};

}  // namespace

std::string weight_name_layer(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string WeightTensor::shape_string() const {
  return shape_str(shape);
}

Result<WeightTensor> SafetensorsWeightSource::find(const std::string& hf_name) const {
  FG_ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_.get(hf_name));
  WeightTensor w;
  w.name = t->name;
  w.file = t->file;
  w.dtype_name = t->dtype_name;
  w.shape = t->shape;
  if (t->dtype && (*t->dtype == DType::kF32 || *t->dtype == DType::kF16 || *t->dtype == DType::kBF16))
    w.dtype = *t->dtype;
  w.handle = t;
  return w;
}

const void* SafetensorsWeightSource::read(const WeightTensor& t, std::vector<uint8_t>&) const {
  return static_cast<const SafetensorsTensor*>(t.handle)->data;
}

int64_t weight_bytes(const ModelWeights& w) {
  int64_t total = int64_t(w.embed.nbytes() + w.final_norm.nbytes());
  if (w.lm_head.data != w.embed.data) total += int64_t(w.lm_head.nbytes());
  for (const LayerWeights& L : w.layers)
    for (const Tensor* t : {&L.input_norm, &L.qkv, &L.qkv_bias, &L.q_norm, &L.k_norm, &L.o, &L.o_bias, &L.post_norm,
                            &L.gate_up, &L.gate_up_bias, &L.down, &L.down_bias, &L.attn_out_norm, &L.mlp_out_norm,
                            &L.router, &L.expert_gate_up, &L.expert_down})
      if (t->data != nullptr) total += int64_t(t->nbytes());
  return total;
}

Result<ModelWeights> load_model_weights(const ModelConfig& c, const SafetensorsCheckpoint& ckpt, Backend& backend) {
  return load_model_weights(c, SafetensorsWeightSource(ckpt), backend);
}

namespace {

// The checkpoint names of expert e's gate, up and down projections in layer l.
std::array<std::string, 3> expert_names(const ModelConfig& c, int l, int e) {
  const std::string E = std::to_string(e);
  if (c.architecture == "MixtralForCausalLM") {
    const std::string p = "block_sparse_moe.experts." + E + ".";
    return {weight_name_layer(l, (p + "w1.weight").c_str()), weight_name_layer(l, (p + "w3.weight").c_str()),
            weight_name_layer(l, (p + "w2.weight").c_str())};
  }
  const std::string p = "mlp.experts." + E + ".";
  return {weight_name_layer(l, (p + "gate_proj.weight").c_str()), weight_name_layer(l, (p + "up_proj.weight").c_str()),
          weight_name_layer(l, (p + "down_proj.weight").c_str())};
}

std::string router_name(const ModelConfig& c, int l) {
  return weight_name_layer(l,
                           c.architecture == "MixtralForCausalLM" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

}  // namespace

Result<ModelWeights> load_model_weights(const ModelConfig& c, const WeightSource& source, Backend& backend) {
  FG_ASSIGN_OR_RETURN(TpShard whole, make_tp_shard(c, 0, 1));
  return load_model_weights(c, source, backend, whole);
}

Result<ModelWeights> load_model_weights(const ModelConfig& c, const WeightSource& source, Backend& backend,
                                        const TpShard& tp) {
  ModelWeights w;
  w.layers.resize(size_t(c.num_layers));
  Planner plan(source);
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), head_dim = c.head_dim;
  const AddOptions matrix = matrix_options();
  AddOptions norm;
  norm.plus_one = c.options.norm_plus_one;
  // The rank's slices (tensor_parallel.h): whole tensors when tp.size == 1.
  const bool split = tp.size > 1;
  auto rows = [&](int64_t begin, int64_t count) {
    return split ? WeightSlice{0, begin, begin + count} : WeightSlice{};
  };
  auto cols = [&](int64_t begin, int64_t count) {
    return split ? WeightSlice{1, begin, begin + count} : WeightSlice{};
  };
  const WeightSlice q_rows = rows(tp.q_head0 * head_dim, tp.q_heads * head_dim);
  const WeightSlice kv_rows = rows(tp.kv_head0 * head_dim, tp.kv_heads * head_dim);
  const WeightSlice o_cols = cols(tp.q_head0 * head_dim, tp.q_heads * head_dim);
  const WeightSlice inter_rows = rows(tp.inter0, tp.inter), inter_cols = cols(tp.inter0, tp.inter);
  // Rows of fused checkpoint tensors (Phi-3): the same slices at each part's offset.
  auto shifted = [](WeightSlice s, int64_t offset, int64_t count) {
    return s.dim < 0 ? WeightSlice{0, offset, offset + count} : WeightSlice{0, s.begin + offset, s.end + offset};
  };
  const bool bias_here = tp.rank == 0;  // row-parallel biases: added once, before the all-reduce
  AddOptions vocab = matrix;
  vocab.rows = split ? tp.vocab_rows : 0;
  const WeightSlice vocab_rows = rows(tp.vocab0, tp.vocab_valid);

  FG_RETURN_IF_ERROR(plan.add(&w.embed, {{"model.embed_tokens.weight", {c.vocab_size, hidden}, vocab_rows}}, vocab));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    auto n = [l](const char* s) { return weight_name_layer(l, s); };
    FG_RETURN_IF_ERROR(plan.add(&L.input_norm, {{n("input_layernorm.weight"), {hidden}}}, norm));
    if (c.options.fused_checkpoint) {
      const std::string qkv = n("self_attn.qkv_proj.weight");
      const std::vector<int64_t> shape = {c.qkv_dim(), hidden};
      FG_RETURN_IF_ERROR(plan.add(&L.qkv,
                                  {{qkv, shape, shifted(q_rows, 0, q_dim)},
                                   {qkv, shape, shifted(kv_rows, q_dim, kv_dim)},
                                   {qkv, shape, shifted(kv_rows, q_dim + kv_dim, kv_dim)}},
                                  matrix));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.qkv,
                                  {{n("self_attn.q_proj.weight"), {q_dim, hidden}, q_rows},
                                   {n("self_attn.k_proj.weight"), {kv_dim, hidden}, kv_rows},
                                   {n("self_attn.v_proj.weight"), {kv_dim, hidden}, kv_rows}},
                                  matrix));
    }
    if (c.options.qkv_bias)
      FG_RETURN_IF_ERROR(plan.add(&L.qkv_bias, {{n("self_attn.q_proj.bias"), {q_dim}, q_rows},
                                                {n("self_attn.k_proj.bias"), {kv_dim}, kv_rows},
                                                {n("self_attn.v_proj.bias"), {kv_dim}, kv_rows}}));
    if (c.options.qk_norm) {
      FG_RETURN_IF_ERROR(plan.add(&L.q_norm, {{n("self_attn.q_norm.weight"), {head_dim}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.k_norm, {{n("self_attn.k_norm.weight"), {head_dim}}}, norm));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.o, {{n("self_attn.o_proj.weight"), {hidden, q_dim}, o_cols}}, matrix));
    if (c.options.o_bias && bias_here)
      FG_RETURN_IF_ERROR(plan.add(&L.o_bias, {{n("self_attn.o_proj.bias"), {hidden}}}));
    if (c.options.sandwich_norms) {
      FG_RETURN_IF_ERROR(plan.add(&L.attn_out_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("pre_feedforward_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.mlp_out_norm, {{n("post_feedforward_layernorm.weight"), {hidden}}}, norm));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
    }
    if (c.is_moe_layer(l)) {
      FG_CHECK(!split, "tensor parallelism over experts (refused by make_tp_shard)");
      // The router and the stacked experts stay in the activation dtype: the MoE ops read them so.
      const int64_t E = c.moe.num_experts, mi = c.moe.intermediate_size;
      FG_RETURN_IF_ERROR(plan.add(&L.router, {{router_name(c, l), {E, hidden}}}));
      std::vector<PartSpec> gate_up, down;
      for (int e = 0; e < E; ++e) {
        auto [gate_name, up_name, down_name] = expert_names(c, l, e);
        gate_up.push_back({gate_name, {mi, hidden}});
        gate_up.push_back({up_name, {mi, hidden}});
        down.push_back({down_name, {hidden, mi}});
      }
      AddOptions stacked_gate_up, stacked_down;
      stacked_gate_up.view_shape = {E, 2 * mi, hidden};
      stacked_down.view_shape = {E, hidden, mi};
      FG_RETURN_IF_ERROR(plan.add(&L.expert_gate_up, gate_up, stacked_gate_up));
      FG_RETURN_IF_ERROR(plan.add(&L.expert_down, down, stacked_down));
      continue;
    }
    if (c.options.fused_checkpoint) {
      const std::string gate_up = n("mlp.gate_up_proj.weight");
      const std::vector<int64_t> shape = {2 * inter, hidden};
      FG_RETURN_IF_ERROR(plan.add(
          &L.gate_up,
          {{gate_up, shape, shifted(inter_rows, 0, inter)}, {gate_up, shape, shifted(inter_rows, inter, inter)}},
          matrix));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.gate_up,
                                  {{n("mlp.gate_proj.weight"), {inter, hidden}, inter_rows},
                                   {n("mlp.up_proj.weight"), {inter, hidden}, inter_rows}},
                                  matrix));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.down, {{n("mlp.down_proj.weight"), {hidden, inter}, inter_cols}}, matrix));
    if (c.options.mlp_bias) {
      FG_RETURN_IF_ERROR(plan.add(&L.gate_up_bias, {{n("mlp.gate_proj.bias"), {inter}, inter_rows},
                                                    {n("mlp.up_proj.bias"), {inter}, inter_rows}}));
      if (bias_here) FG_RETURN_IF_ERROR(plan.add(&L.down_bias, {{n("mlp.down_proj.bias"), {hidden}}}));
    }
  }
  FG_RETURN_IF_ERROR(plan.add(&w.final_norm, {{"model.norm.weight", {hidden}}}, norm));
  if (!c.tie_word_embeddings)
    FG_RETURN_IF_ERROR(plan.add(&w.lm_head, {{"lm_head.weight", {c.vocab_size, hidden}, vocab_rows}}, vocab));

  FG_RETURN_IF_ERROR(plan.upload(backend, w.arena));
  w.source_bytes = plan.bytes_read();
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

}  // namespace fg
