// Weight naming, validation, fusion and upload (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <array>

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

// One destination tensor assembled from one or more checkpoint tensors, concatenated along dim 0.
struct Assembly {
  Tensor* target = nullptr;
  std::vector<int64_t> shape;
  std::vector<WeightTensor> parts;
  size_t arena_offset = 0;
  bool plus_one = false;  // store 1 + w (Gemma's RMSNorm weights)
};

// How add() transforms and shapes the assembly.
struct AddOptions {
  bool plus_one = false;
  std::vector<int64_t> view_shape;  // the target's shape when not the concatenation's (same numel)
};

// t's values as f32 (t.host_dtype is f32, f16 or bf16).
std::vector<float> host_values_f32(const WeightTensor& t, const void* data) {
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (*t.host_dtype) {
      case DType::kF32: out[i] = static_cast<const float*>(data)[i]; break;
      case DType::kF16: out[i] = f16_to_f32(static_cast<const uint16_t*>(data)[i]); break;
      case DType::kBF16: out[i] = bf16_to_f32(static_cast<const uint16_t*>(data)[i]); break;
      default: FG_CHECK(false, "weights: tensor '" + t.name + "' has no float host dtype");
    }
  }
  return out;
}

size_t host_bytes(const WeightTensor& t) {
  return size_t(t.numel()) * dtype_size(*t.host_dtype);
}

class Planner {
 public:
  Planner(const WeightSource& source) : source_(source) {}

  // Requires each named tensor with its expected shape; the target gets their row concatenation.
  Status add(Tensor* target, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts,
             const AddOptions& options = {}) {
    Assembly a;
    a.target = target;
    a.plus_one = options.plus_one;
    for (const auto& [name, shape] : parts) {
      FG_ASSIGN_OR_RETURN(WeightTensor t, source_.find(name));
      if (!t.host_dtype)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has dtype " + t.dtype_name + ", expected " +
                                source_.loadable_types());
      if (t.shape != shape)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has shape " + t.shape_string() + ", expected " +
                                shape_str(shape) + " for this " + source_.config_name());
      a.parts.push_back(std::move(t));
      if (a.shape.empty())
        a.shape = shape;
      else
        a.shape[0] += shape[0];
    }
    if (!options.view_shape.empty()) a.shape = options.view_shape;
    assemblies_.push_back(std::move(a));
    return Status::ok();
  }

  Status upload(Backend& backend, Buffer& arena) {
    const DType act = backend.act_dtype();
    const size_t esize = dtype_size(act);
    size_t total = 0, staging_bytes = 0;
    for (Assembly& a : assemblies_) {
      a.arena_offset = total;
      int64_t numel = 1;
      for (int64_t d : a.shape) numel *= d;
      total += align_up(size_t(numel) * esize);
      for (const WeightTensor& p : a.parts)
        if (*p.host_dtype != act || a.plus_one)
          staging_bytes = std::max(staging_bytes, size_t(p.numel()) * std::max<size_t>(4, dtype_size(*p.host_dtype)));
    }
    arena = backend.alloc(std::max<size_t>(total, kAlign));
    if (!arena.data() && total > 0)
      return Status(ErrorCode::kResourceExhausted,
                    "cannot allocate " + std::to_string(total) + " bytes for the weights on " + backend.name());
    Buffer staging;
    if (staging_bytes > 0) staging = backend.alloc(staging_bytes);
    std::vector<uint8_t> scratch;  // tensors the source converts on the host (dequantized GGUF blocks)
    char* base = static_cast<char*>(arena.data());
    for (Assembly& a : assemblies_) {
      char* dst = base + a.arena_offset;
      for (const WeightTensor& p : a.parts) {
        const int64_t numel = p.numel();
        const void* host = source_.read(p, scratch);
        DType host_dtype = *p.host_dtype;
        size_t bytes = host_bytes(p);
        std::vector<float> shifted;
        if (a.plus_one) {  // 1 + w in f32, as transformers computes (1.0 + weight.float())
          shifted = host_values_f32(p, host);
          for (float& v : shifted) v = 1.0f + v;
          host = shifted.data();
          host_dtype = DType::kF32;
          bytes = shifted.size() * sizeof(float);
        }
        if (host_dtype == act) {
          backend.copy_from_host(dst, host, bytes);
        } else {
          backend.copy_from_host(staging.data(), host, bytes);
          Tensor src = Tensor::contiguous(staging.data(), host_dtype, backend.device(), {numel});
          Tensor out = Tensor::contiguous(dst, act, backend.device(), {numel});
          backend.convert(src, out);
        }
        // Copies are asynchronous: the scratch buffer (or the shifted values) is rewritten next.
        if ((!scratch.empty() && host == scratch.data()) || !shifted.empty()) backend.synchronize();
        dst += size_t(numel) * esize;
      }
      Tensor& t = *a.target;
      t = Tensor{};
      t.data = base + a.arena_offset;
      t.dtype = act;
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
    w.host_dtype = *t->dtype;
  w.handle = t;
  return w;
}

const void* SafetensorsWeightSource::read(const WeightTensor& t, std::vector<uint8_t>&) const {
  return static_cast<const SafetensorsTensor*>(t.handle)->data;
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
  ModelWeights w;
  w.layers.resize(size_t(c.num_layers));
  Planner plan(source);
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), head_dim = c.head_dim;
  AddOptions norm;
  norm.plus_one = c.options.norm_plus_one;

  FG_RETURN_IF_ERROR(plan.add(&w.embed, {{"model.embed_tokens.weight", {c.vocab_size, hidden}}}));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    auto n = [l](const char* s) { return weight_name_layer(l, s); };
    FG_RETURN_IF_ERROR(plan.add(&L.input_norm, {{n("input_layernorm.weight"), {hidden}}}, norm));
    if (c.options.fused_checkpoint) {
      FG_RETURN_IF_ERROR(plan.add(&L.qkv, {{n("self_attn.qkv_proj.weight"), {c.qkv_dim(), hidden}}}));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.qkv, {{n("self_attn.q_proj.weight"), {q_dim, hidden}},
                                           {n("self_attn.k_proj.weight"), {kv_dim, hidden}},
                                           {n("self_attn.v_proj.weight"), {kv_dim, hidden}}}));
    }
    if (c.options.qkv_bias)
      FG_RETURN_IF_ERROR(plan.add(&L.qkv_bias, {{n("self_attn.q_proj.bias"), {q_dim}},
                                                {n("self_attn.k_proj.bias"), {kv_dim}},
                                                {n("self_attn.v_proj.bias"), {kv_dim}}}));
    if (c.options.qk_norm) {
      FG_RETURN_IF_ERROR(plan.add(&L.q_norm, {{n("self_attn.q_norm.weight"), {head_dim}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.k_norm, {{n("self_attn.k_norm.weight"), {head_dim}}}, norm));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.o, {{n("self_attn.o_proj.weight"), {hidden, q_dim}}}));
    if (c.options.o_bias) FG_RETURN_IF_ERROR(plan.add(&L.o_bias, {{n("self_attn.o_proj.bias"), {hidden}}}));
    if (c.options.sandwich_norms) {
      FG_RETURN_IF_ERROR(plan.add(&L.attn_out_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("pre_feedforward_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.mlp_out_norm, {{n("post_feedforward_layernorm.weight"), {hidden}}}, norm));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
    }
    if (c.is_moe_layer(l)) {
      const int64_t E = c.moe.num_experts, mi = c.moe.intermediate_size;
      FG_RETURN_IF_ERROR(plan.add(&L.router, {{router_name(c, l), {E, hidden}}}));
      std::vector<std::pair<std::string, std::vector<int64_t>>> gate_up, down;
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
      FG_RETURN_IF_ERROR(plan.add(&L.gate_up, {{n("mlp.gate_up_proj.weight"), {2 * inter, hidden}}}));
    } else {
      FG_RETURN_IF_ERROR(plan.add(
          &L.gate_up, {{n("mlp.gate_proj.weight"), {inter, hidden}}, {n("mlp.up_proj.weight"), {inter, hidden}}}));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.down, {{n("mlp.down_proj.weight"), {hidden, inter}}}));
    if (c.options.mlp_bias) {
      FG_RETURN_IF_ERROR(
          plan.add(&L.gate_up_bias, {{n("mlp.gate_proj.bias"), {inter}}, {n("mlp.up_proj.bias"), {inter}}}));
      FG_RETURN_IF_ERROR(plan.add(&L.down_bias, {{n("mlp.down_proj.bias"), {hidden}}}));
    }
  }
  FG_RETURN_IF_ERROR(plan.add(&w.final_norm, {{"model.norm.weight", {hidden}}}, norm));
  if (!c.tie_word_embeddings) FG_RETURN_IF_ERROR(plan.add(&w.lm_head, {{"lm_head.weight", {c.vocab_size, hidden}}}));

  FG_RETURN_IF_ERROR(plan.upload(backend, w.arena));
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

}  // namespace fg
