// GGUF metadata -> ModelConfig, and GGUF tensors -> the weight loader (see gguf_model.h).
#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dequant.h"
#include "model/registry.h"

namespace fg {
namespace {

struct ArchMapping {
  const char* gguf;  // general.architecture
  const char* hf;    // the registry's architecture name
  bool permuted_qk;  // llama.cpp permuted the q/k rows for its interleaved RoPE
};

constexpr ArchMapping kArchs[] = {
    {"llama", "LlamaForCausalLM", true},
    {"mistral", "MistralForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},
};

const ArchMapping* find_arch(std::string_view gguf_arch) {
  for (const ArchMapping& a : kArchs)
    if (gguf_arch == a.gguf) return &a;
  return nullptr;
}

std::string supported_gguf_archs() {
  std::string s;
  for (const ArchMapping& a : kArchs) s += std::string(s.empty() ? "" : ", ") + a.gguf;
  return s;
}

// Per-layer tensor names: Hugging Face suffix after "model.layers.N." -> GGUF suffix after "blk.N.".
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},          {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},          {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},          {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},     {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.weight", "ffn_up.weight"},           {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.weight", "ffn_down.weight"},       {"mlp.down_proj.bias", "ffn_down.bias"},
};

// An optional metadata number: absent leaves `out` as is; present with the wrong type is an error.
Status read_int(const GgufFile& f, const std::string& key, int64_t& out) {
  if (!f.has(key)) return Status::ok();
  FG_ASSIGN_OR_RETURN(out, f.get_int(key));
  return Status::ok();
}

Status read_float(const GgufFile& f, const std::string& key, double& out) {
  if (!f.has(key)) return Status::ok();
  FG_ASSIGN_OR_RETURN(out, f.get_float(key));
  if (!std::isfinite(out)) return invalid_argument(f.path() + ": metadata '" + key + "' is not a finite number");
  return Status::ok();
}

// head_count_kv may be one number or one per layer (all equal for the architectures we run).
Status read_head_count(const GgufFile& f, const std::string& key, int64_t& out) {
  const GgufValue* v = f.find(key);
  if (!v) return Status::ok();
  if (v->type != GgufValueType::kArray) return read_int(f, key, out);
  FG_ASSIGN_OR_RETURN(std::vector<int64_t> per_layer, f.get_int_array(key));
  if (per_layer.empty() ||
      std::any_of(per_layer.begin(), per_layer.end(), [&](int64_t x) { return x != per_layer[0]; }))
    return unsupported(f.path() + ": metadata '" + key + "' differs between layers, which flashgen does not run");
  out = per_layer[0];
  return Status::ok();
}

Status parse_rope_scaling(const GgufFile& f, const std::string& p, ModelConfig& c) {
  RopeConfig& r = c.rope;
  std::string type = "none";
  if (f.has(p + "rope.scaling.type")) {
    FG_ASSIGN_OR_RETURN(std::string_view t, f.get_string(p + "rope.scaling.type"));
    type = std::string(t);
  }
  double linear = 0.0;
  FG_RETURN_IF_ERROR(read_float(f, p + "rope.scale_linear", linear));  // older files
  if (type == "none" && linear > 0.0 && linear != 1.0) {
    type = "linear";
    r.factor = linear;
  }
  if (type == "none") {
    r.type = RopeScaling::kDefault;
  } else if (type == "linear") {
    r.type = RopeScaling::kLinear;
    FG_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.factor", r.factor));
    if (!(r.factor > 0.0)) return invalid_argument(f.path() + ": metadata '" + p + "rope.scaling.factor' must be > 0");
  } else {
    return unsupported(f.path() + ": rope scaling '" + type + "' (" + p +
                       "rope.scaling.type) is not supported (supported: none, linear)");
  }

  // Llama 3.1-style scaling: llama.cpp stores the per-frequency divisors as a tensor.
  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    if (t->type != GgmlType::kF32 || t->ne.size() != 1 || t->ne[0] != c.rotary_dim / 2)
      return invalid_argument(f.path() + ": tensor 'rope_freqs.weight' must be F32 [" +
                              std::to_string(c.rotary_dim / 2) + "], got " + t->type_info->name + " " +
                              t->shape_string());
    r.freq_divisors.resize(size_t(t->ne[0]));
    std::memcpy(r.freq_divisors.data(), t->data, t->nbytes);
    for (float x : r.freq_divisors)
      if (!(x > 0.0f) || !std::isfinite(x))
        return invalid_argument(f.path() + ": tensor 'rope_freqs.weight' holds a value that is not a positive number");
  }
  return Status::ok();
}

// Rows of a q or k projection back from llama.cpp's order: within each head, llama.cpp stores the
// row pairs (2j, 2j+1) of Hugging Face's halves (j, j + d/2) next to each other. Per head, row
// (i * half + j) of the result is row (2 * j + i) of the file. `row_bytes` is the size of one row
// (one element for a bias).
void unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int heads, size_t row_bytes) {
  const int64_t per_head = rows / heads, half = per_head / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t out_row = h * per_head + i * half + j;
        const int64_t in_row = h * per_head + 2 * j + i;
        std::memcpy(dst + size_t(out_row) * row_bytes, src + size_t(in_row) * row_bytes, row_bytes);
      }
}

class GgufWeightSource : public WeightSource {
 public:
  GgufWeightSource(const GgufFile& file, const ModelConfig& config, bool permuted_qk)
      : file_(file), config_(config), permuted_qk_(permuted_qk) {}

  Result<WeightTensor> find(const std::string& hf_name) const override {
    const std::string name = gguf_tensor_name(hf_name);
    const GgufTensorInfo* t = name.empty() ? nullptr : file_.find_tensor(name);
    if (!t)
      return not_found(file_.path() + ": tensor '" + (name.empty() ? hf_name : name) +
                       "' is missing (the model needs " + hf_name + ")");
    WeightTensor w;
    w.name = t->name;
    w.file = file_.path();
    w.dtype_name = t->type_info->name;
    w.shape = t->shape();
    w.handle = t;
    // As stored; a quantized vector (never written by llama.cpp's converters, which keep 1-d
    // tensors in F32) as its f32 values, so its elements can be permuted like any other.
    if (t->type_info->loadable) w.dtype = dequantized_vector(*t) ? DType::kF32 : t->type_info->dtype;
    return w;
  }

  const void* read(const WeightTensor& w, std::vector<uint8_t>& scratch) const override {
    const auto* t = static_cast<const GgufTensorInfo*>(w.handle);
    const int heads = permute_heads(t->name);
    const bool dequantized = dequantized_vector(*t);
    if (!dequantized && heads == 0) return t->data;
    const size_t bytes = dtype_bytes(*w.dtype, t->numel());
    scratch.resize(heads > 0 ? 2 * bytes : bytes);
    uint8_t* values = scratch.data() + (heads > 0 ? bytes : 0);
    if (dequantized)
      dequantize(t->type_info->dtype, t->data, reinterpret_cast<float*>(values), t->numel());
    else
      std::memcpy(values, t->data, bytes);
    if (heads == 0) return values;
    // Rows are whole blocks (GgufFile::open checks), so quantized rows move as bytes.
    const int64_t rows = w.shape[0];
    unpermute_rows(values, scratch.data(), rows, heads, bytes / size_t(rows));
    return scratch.data();
  }

  std::string loadable_types() const override { return ggml_loadable_types(); }
  std::string config_name() const override { return "file's metadata"; }

 private:
  static bool dequantized_vector(const GgufTensorInfo& t) {
    return t.ne.size() == 1 && t.type_info->loadable && dtype_is_blocked(t.type_info->dtype);
  }

  // The head count a tensor's rows are permuted over, or 0 when they are not.
  int permute_heads(const std::string& name) const {
    if (!permuted_qk_) return 0;
    if (name.find(".attn_q.") != std::string::npos) return config_.num_q_heads;
    if (name.find(".attn_k.") != std::string::npos) return config_.num_kv_heads;
    return 0;
  }

  const GgufFile& file_;
  const ModelConfig& config_;
  bool permuted_qk_;
};

}  // namespace

std::string gguf_tensor_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf_name.compare(0, prefix.size(), prefix) != 0) return "";
  const size_t dot = hf_name.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
  const std::string suffix = hf_name.substr(dot + 1);
  for (const auto& [hf, gguf] : kLayerNames)
    if (suffix == hf) return "blk." + layer + "." + gguf;
  return "";
}

Result<ModelConfig> gguf_model_config(const GgufFile& f) {
  const std::string& path = f.path();
  FG_ASSIGN_OR_RETURN(std::string_view arch_name, f.get_string("general.architecture"));
  const ArchMapping* arch = find_arch(arch_name);
  if (!arch)
    return unsupported(path + ": GGUF architecture '" + std::string(arch_name) +
                       "' is not supported (supported: " + supported_gguf_archs() + ")");
  const ArchitectureSpec* spec = find_architecture(arch->hf);
  FG_CHECK(spec != nullptr, "GGUF architecture table names an architecture the registry lacks");
  const std::string p = std::string(arch_name) + ".";

  ModelConfig c;
  c.dir = path;
  c.architecture = arch->hf;
  c.model_type = std::string(arch_name);
  int64_t layers = 0, hidden = 0, inter = 0, heads = 0;
  FG_ASSIGN_OR_RETURN(layers, f.get_int(p + "block_count"));
  FG_ASSIGN_OR_RETURN(hidden, f.get_int(p + "embedding_length"));
  FG_ASSIGN_OR_RETURN(inter, f.get_int(p + "feed_forward_length"));
  FG_RETURN_IF_ERROR(read_head_count(f, p + "attention.head_count", heads));
  if (heads == 0) return not_found(path + ": metadata '" + p + "attention.head_count' is missing");
  int64_t kv_heads = heads;
  FG_RETURN_IF_ERROR(read_head_count(f, p + "attention.head_count_kv", kv_heads));
  if (layers <= 0 || hidden <= 0 || inter <= 0 || heads <= 0 || kv_heads <= 0)
    return invalid_argument(path +
                            ": block_count, embedding_length, feed_forward_length and head counts must be positive");

  int64_t head_dim = 0, rope_dim = 0;
  FG_RETURN_IF_ERROR(read_int(f, p + "attention.key_length", head_dim));
  FG_RETURN_IF_ERROR(read_int(f, p + "rope.dimension_count", rope_dim));
  if (f.has(p + "attention.value_length")) {
    FG_ASSIGN_OR_RETURN(int64_t value_dim, f.get_int(p + "attention.value_length"));
    if (head_dim > 0 && value_dim != head_dim)
      return unsupported(path +
                         ": attention.key_length and attention.value_length differ, which flashgen does not run");
  }
  if (head_dim <= 0) {
    if (arch->permuted_qk && rope_dim > 0) {
      head_dim = rope_dim;  // llama: the rotary dimension is the head dimension
    } else {
      if (hidden % heads != 0)
        return invalid_argument(path +
                                ": embedding_length is not a multiple of attention.head_count and no "
                                "attention.key_length is given");
      head_dim = hidden / heads;
    }
  }
  if (layers > 4096 || heads > 4096 || head_dim > 1024 || hidden > (1 << 20) || inter > (1 << 22))
    return invalid_argument(path + ": model dimensions are implausibly large");
  if (heads % kv_heads != 0)
    return invalid_argument(path + ": attention.head_count (" + std::to_string(heads) +
                            ") is not a multiple of attention.head_count_kv (" + std::to_string(kv_heads) + ")");
  c.num_layers = int(layers);
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_q_heads = int(heads);
  c.num_kv_heads = int(kv_heads);
  c.head_dim = int(head_dim);

  const GgufTensorInfo* embed = f.find_tensor("token_embd.weight");
  if (!embed) return not_found(path + ": tensor 'token_embd.weight' is missing");
  if (embed->ne.size() != 2 || embed->ne[0] != hidden)
    return invalid_argument(path + ": tensor 'token_embd.weight' has shape " + embed->shape_string() +
                            ", expected [vocab, " + std::to_string(hidden) + "]");
  c.vocab_size = embed->ne[1];
  if (c.vocab_size > (1 << 24)) return invalid_argument(path + ": model dimensions are implausibly large");
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;

  c.max_position_embeddings = 4096;
  FG_RETURN_IF_ERROR(read_int(f, p + "context_length", c.max_position_embeddings));
  if (c.max_position_embeddings <= 0 || c.max_position_embeddings > kMaxPositions)
    return invalid_argument(path + ": metadata '" + p + "context_length' must be in [1, " +
                            std::to_string(kMaxPositions) + "]");
  FG_RETURN_IF_ERROR(read_float(f, p + "attention.layer_norm_rms_epsilon", c.rms_norm_eps));
  if (!(c.rms_norm_eps > 0.0)) return invalid_argument(path + ": attention.layer_norm_rms_epsilon must be > 0");

  // Biases: Qwen2 always has q/k/v biases; otherwise a bias exists when its tensor does.
  c.options.qkv_bias = spec->qkv_bias_always || (spec->attention_bias_flag && f.find_tensor("blk.0.attn_q.bias"));
  c.options.o_bias = spec->attention_bias_flag && f.find_tensor("blk.0.attn_output.bias");
  c.options.mlp_bias = spec->mlp_bias_flag && f.find_tensor("blk.0.ffn_gate.bias");
  c.options.qk_norm = spec->qk_norm;

  c.rope.theta = 10000.0;
  FG_RETURN_IF_ERROR(read_float(f, p + "rope.freq_base", c.rope.theta));
  if (!(c.rope.theta > 1.0)) return invalid_argument(path + ": metadata '" + p + "rope.freq_base' must be > 1");
  if (rope_dim > 0 && rope_dim < head_dim) c.rope.partial_rotary_factor = double(rope_dim) / double(head_dim);
  c.rotary_dim = int(double(c.head_dim) * c.rope.partial_rotary_factor);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return invalid_argument(path + ": rotary dimension " + std::to_string(c.rotary_dim) +
                            " must be even and in [2, head_dim]");
  FG_RETURN_IF_ERROR(parse_rope_scaling(f, p, c));

  c.layer_sliding_window.assign(size_t(c.num_layers), 0);
  if (spec->sliding == SlidingWindowRule::kAllLayers) {
    int64_t window = 0;
    FG_RETURN_IF_ERROR(read_int(f, p + "attention.sliding_window", window));
    if (window < 0) return invalid_argument(path + ": metadata '" + p + "attention.sliding_window' must be >= 0");
    if (window > 0 && window <= (1 << 30))
      std::fill(c.layer_sliding_window.begin(), c.layer_sliding_window.end(), int(window));
  }

  c.checkpoint_dtype = DType::kF32;  // informational: quantized files hold several types
  FG_RETURN_IF_ERROR(read_int(f, "tokenizer.ggml.bos_token_id", c.bos_token_id));
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int64_t id = -1;
    FG_RETURN_IF_ERROR(read_int(f, key, id));
    if (id >= 0 && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);
  }
  return c;
}

std::unique_ptr<WeightSource> gguf_weight_source(const GgufFile& file, const ModelConfig& config) {
  const ArchMapping* arch = find_arch(config.model_type);
  return std::make_unique<GgufWeightSource>(file, config, arch && arch->permuted_qk);
}

Result<ModelConfig> load_any_model_config(const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::string gguf, find_gguf_model(path));
  if (gguf.empty()) return load_model_config(path);
  FG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf));
  return gguf_model_config(*file);
}

}  // namespace fg
