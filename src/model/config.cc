// config.json / generation_config.json -> ModelConfig (see config.h). Every error is one line that
// names the file and the field.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/registry.h"

namespace fg {
namespace {

using Json = nlohmann::json;

// Typed field access with messages of the form "<path>: field 'x' must be ...".
class Fields {
 public:
  Fields(const Json& obj, const std::string& path, std::string prefix = "")
      : obj_(obj), path_(path), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  Status get_int(const char* key, int64_t& out, bool required) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    const Json& v = obj_.at(key);
    if (v.is_number_integer()) {
      out = v.get<int64_t>();
      return Status::ok();
    }
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        out = int64_t(d);
        return Status::ok();
      }
    }
    return bad(key, "an integer");
  }

  Status get_positive(const char* key, int64_t& out, bool required) const {
    FG_RETURN_IF_ERROR(get_int(key, out, required));
    if (has(key) && out <= 0) return bad(key, "a positive integer");
    return Status::ok();
  }

  Status get_double(const char* key, double& out, bool required) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    const Json& v = obj_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) return bad(key, "a number");
    out = v.get<double>();
    return Status::ok();
  }

  Status get_bool(const char* key, bool& out) const {
    if (!has(key)) return Status::ok();
    const Json& v = obj_.at(key);
    if (!v.is_boolean()) return bad(key, "true or false");
    out = v.get<bool>();
    return Status::ok();
  }

  Status get_string(const char* key, std::string& out, bool required) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    const Json& v = obj_.at(key);
    if (!v.is_string()) return bad(key, "a string");
    out = v.get<std::string>();
    return Status::ok();
  }

  // An int, a list of ints, or null; appended to `out`.
  Status get_id_list(const char* key, std::vector<int64_t>& out) const {
    if (!has(key)) return Status::ok();
    const Json& v = obj_.at(key);
    if (v.is_number_integer()) {
      out.push_back(v.get<int64_t>());
      return Status::ok();
    }
    if (v.is_array()) {
      for (const Json& e : v) {
        if (!e.is_number_integer()) return bad(key, "an integer or a list of integers");
        out.push_back(e.get<int64_t>());
      }
      return Status::ok();
    }
    return bad(key, "an integer or a list of integers");
  }

  Status missing(const char* key) const {
    return invalid_argument(path_ + ": missing required field '" + prefix_ + key + "'");
  }
  Status bad(const char* key, const char* what) const {
    return invalid_argument(path_ + ": field '" + prefix_ + key + "' must be " + what + ", got " +
                            obj_.at(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

 private:
  const Json& obj_;
  const std::string& path_;
  std::string prefix_;
};

DType parse_dtype_name(const std::string& s) {
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  return DType::kF32;
}

// The rope types one parameter object may name, for messages.
constexpr const char* kRopeTypes = "default, linear, dynamic, llama3, longrope";

// Reads one RoPE parameter object into `r`: the flat `rope_parameters` / `rope_scaling` of most
// families, or one per-layer-type entry of Gemma 3's nested form (`prefix` names it in messages).
// `r` arrives holding the theta and partial_rotary_factor of the top level (or the family's default).
Status parse_rope_object(const Json& root, const Json& rp, const std::string& path, const std::string& prefix,
                         const ArchitectureSpec& arch, const ModelConfig& c, RopeConfig& r) {
  Fields top(root, path);
  Fields f(rp, path, prefix);
  std::string type = "default";
  if (f.has("rope_type"))
    FG_RETURN_IF_ERROR(f.get_string("rope_type", type, true));
  else if (f.has("type"))
    FG_RETURN_IF_ERROR(f.get_string("type", type, true));
  // Phi-3 checkpoints written before transformers named it call LongRoPE "su" (and some "yarn").
  if (arch.dialect == ConfigDialect::kPhi3 && (type == "su" || type == "yarn")) type = "longrope";

  FG_RETURN_IF_ERROR(f.get_double("rope_theta", r.theta, false));
  FG_RETURN_IF_ERROR(f.get_double("partial_rotary_factor", r.partial_rotary_factor, false));
  if (!(r.theta > 1.0)) return invalid_argument(path + ": " + prefix + "rope_theta must be > 1");
  if (!(r.partial_rotary_factor > 0.0 && r.partial_rotary_factor <= 1.0))
    return invalid_argument(path + ": partial_rotary_factor must be in (0, 1]");

  // The length the model was pretrained at: a top-level value wins over the nested one, as in
  // transformers; Phi-3's config class defaults it to 4096.
  auto original_max = [&](int64_t fallback) -> Status {
    r.original_max_position = fallback;
    FG_RETURN_IF_ERROR(f.get_positive("original_max_position_embeddings", r.original_max_position, false));
    FG_RETURN_IF_ERROR(top.get_positive("original_max_position_embeddings", r.original_max_position, false));
    return Status::ok();
  };

  if (type == "default") {
    r.type = RopeScaling::kDefault;
  } else if (type == "linear" || type == "dynamic") {
    r.type = type == "linear" ? RopeScaling::kLinear : RopeScaling::kDynamic;
    FG_RETURN_IF_ERROR(f.get_double("factor", r.factor, true));
  } else if (type == "llama3") {
    r.type = RopeScaling::kLlama3;
    FG_RETURN_IF_ERROR(f.get_double("factor", r.factor, true));
    FG_RETURN_IF_ERROR(f.get_double("low_freq_factor", r.low_freq_factor, true));
    FG_RETURN_IF_ERROR(f.get_double("high_freq_factor", r.high_freq_factor, true));
    FG_RETURN_IF_ERROR(original_max(c.max_position_embeddings));
    if (!(r.high_freq_factor > r.low_freq_factor))
      return invalid_argument(path + ": llama3 rope needs high_freq_factor > low_freq_factor");
  } else if (type == "longrope") {
    r.type = RopeScaling::kLongRope;
    FG_RETURN_IF_ERROR(original_max(arch.dialect == ConfigDialect::kPhi3 ? 4096 : c.max_position_embeddings));
    for (const char* key : {"short_factor", "long_factor"}) {
      if (!f.has(key)) return f.missing(key);
      const Json& v = rp.at(key);
      std::vector<double>& out = std::string(key) == "short_factor" ? r.short_factor : r.long_factor;
      if (!v.is_array()) return f.bad(key, "a list of numbers");
      for (const Json& e : v) {
        if (!e.is_number() || !(e.get<double>() > 0.0)) return f.bad(key, "a list of positive numbers");
        out.push_back(e.get<double>());
      }
    }
    // transformers: factor defaults to max_position_embeddings / original; the attention factor
    // to sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1).
    r.factor = double(c.max_position_embeddings) / double(r.original_max_position);
    FG_RETURN_IF_ERROR(f.get_double("factor", r.factor, false));
    r.attention_factor =
        r.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(r.factor) / std::log(double(r.original_max_position)));
    FG_RETURN_IF_ERROR(f.get_double("attention_factor", r.attention_factor, false));
    if (!(r.attention_factor > 0.0)) return invalid_argument(path + ": " + prefix + "attention_factor must be > 0");
  } else {
    return unsupported(path + ": rope type '" + type + "' is not supported (supported: " + kRopeTypes + ")");
  }
  if (!(r.factor > 0.0)) return invalid_argument(path + ": rope factor must be > 0");
  if (r.type == RopeScaling::kDynamic && r.factor < 1.0)
    return invalid_argument(path + ": dynamic rope factor must be >= 1");
  return Status::ok();
}

Status parse_rope(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields top(root, path);
  // transformers 5 writes rope_parameters; older checkpoints rope_scaling (+ top-level rope_theta).
  const char* key = nullptr;
  if (top.has("rope_parameters"))
    key = "rope_parameters";
  else if (top.has("rope_scaling"))
    key = "rope_scaling";
  Json empty = Json::object();
  const Json& rp = key ? root.at(key) : empty;
  if (!rp.is_object()) return invalid_argument(path + ": field '" + key + "' must be an object");
  const bool nested = rp.contains("full_attention") || rp.contains("sliding_attention");

  RopeConfig base;  // the top level's theta and partial rotary factor, or the family's defaults
  const bool gemma3 = arch.dialect == ConfigDialect::kGemma3;
  if (gemma3) base.theta = 1000000.0;  // Gemma 3's global default
  FG_RETURN_IF_ERROR(top.get_double("rope_theta", base.theta, false));
  FG_RETURN_IF_ERROR(top.get_double("partial_rotary_factor", base.partial_rotary_factor, false));

  if (!gemma3) {
    if (nested)
      return unsupported(path + ": per-layer-type '" + std::string(key) + "' is not supported for " +
                         std::string(arch.name));
    c.rope = base;
    return parse_rope_object(root, rp, path, key ? std::string(key) + "." : "", arch, c, c.rope);
  }
  // Gemma 3: global (full attention) layers and local (sliding) layers have their own RoPE.
  // Classic: rope_theta + rope_scaling for the global layers, rope_local_base_freq for the local
  // ones; transformers 5: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}.
  RopeConfig local = base;
  local.theta = 10000.0;
  FG_RETURN_IF_ERROR(top.get_double("rope_local_base_freq", local.theta, false));
  c.rope = base;
  if (key != nullptr && std::string(key) == "rope_parameters") {
    if (!nested)
      return invalid_argument(path +
                              ": Gemma 3's rope_parameters must be per layer type "
                              "{\"full_attention\": {...}, \"sliding_attention\": {...}}");
    for (const auto& [name, value] : rp.items()) {
      if (name != "full_attention" && name != "sliding_attention")
        return unsupported(path + ": rope_parameters for layer type '" + name + "' is not supported");
      if (value.is_null()) continue;
      if (!value.is_object())
        return invalid_argument(path + ": field 'rope_parameters." + name + "' must be an object");
      RopeConfig& r = name == "full_attention" ? c.rope : local;
      FG_RETURN_IF_ERROR(parse_rope_object(root, value, path, "rope_parameters." + name + ".", arch, c, r));
    }
  } else {
    if (nested) return unsupported(path + ": per-layer-type 'rope_scaling' is not supported");
    FG_RETURN_IF_ERROR(parse_rope_object(root, rp, path, key ? std::string(key) + "." : "", arch, c, c.rope));
    FG_RETURN_IF_ERROR(parse_rope_object(root, empty, path, "", arch, c, local));
  }
  if (local.partial_rotary_factor != c.rope.partial_rotary_factor)
    return unsupported(path + ": different partial_rotary_factor for local and global layers is not supported");
  if (local.type == RopeScaling::kDynamic || local.type == RopeScaling::kLongRope ||
      c.rope.type == RopeScaling::kDynamic || c.rope.type == RopeScaling::kLongRope)
    return unsupported(path + ": Gemma 3 with rope type '" +
                       std::string(rope_scaling_name(local.type == RopeScaling::kDefault ? c.rope.type : local.type)) +
                       "' is not supported (supported: default, linear, llama3)");
  c.local_rope = local;
  return Status::ok();
}

// Reads a layer_types list (one "sliding_attention" or "full_attention" per layer) into `sliding`.
Status parse_layer_types(const Json& root, const std::string& path, int num_layers, std::vector<bool>& sliding) {
  const Json& lt = root.at("layer_types");
  if (!lt.is_array() || lt.size() != size_t(num_layers))
    return invalid_argument(path + ": field 'layer_types' must list one entry per layer");
  sliding.assign(size_t(num_layers), false);
  for (int i = 0; i < num_layers; ++i) {
    const Json& t = lt[size_t(i)];
    if (t == "sliding_attention")
      sliding[size_t(i)] = true;
    else if (t != "full_attention")
      return unsupported(path + ": layer type " + t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                         " is not supported");
  }
  return Status::ok();
}

Status parse_sliding_window(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields f(root, path);
  c.layer_sliding_window.assign(size_t(c.num_layers), 0);
  int64_t window = arch.sliding == SlidingWindowRule::kLayerTypes && !root.contains("sliding_window") ? 4096 : 0;
  FG_RETURN_IF_ERROR(f.get_int("sliding_window", window, false));
  if (f.has("sliding_window") && window <= 0)
    return invalid_argument(path + ": field 'sliding_window' must be a positive integer or null");
  if (window > (1 << 30)) window = 0;  // larger than any context: the same as no window
  std::vector<bool> sliding;
  switch (arch.sliding) {
    case SlidingWindowRule::kNone: return Status::ok();
    case SlidingWindowRule::kAllLayers:
      std::fill(c.layer_sliding_window.begin(), c.layer_sliding_window.end(), int(window));
      return Status::ok();
    case SlidingWindowRule::kFlagged: {
      bool use = false;
      FG_RETURN_IF_ERROR(f.get_bool("use_sliding_window", use));
      if (use) std::fill(c.layer_sliding_window.begin(), c.layer_sliding_window.end(), int(window));
      return Status::ok();
    }
    case SlidingWindowRule::kLayerTypes: {
      // The sliding layers also take Gemma 3's local RoPE, so they must have a window.
      if (window == 0) return invalid_argument(path + ": field 'sliding_window' must be a positive integer");
      if (f.has("layer_types")) {
        FG_RETURN_IF_ERROR(parse_layer_types(root, path, c.num_layers, sliding));
      } else {
        int64_t pattern = arch.default_sliding_pattern;
        if (arch.dialect == ConfigDialect::kGemma3)
          FG_RETURN_IF_ERROR(f.get_positive("sliding_window_pattern", pattern, false));
        sliding.assign(size_t(c.num_layers), false);
        for (int i = 0; i < c.num_layers; ++i) sliding[size_t(i)] = (i + 1) % pattern != 0;
      }
      break;
    }
    case SlidingWindowRule::kQwen: {
      bool use = false;
      FG_RETURN_IF_ERROR(f.get_bool("use_sliding_window", use));
      if (!use || window == 0) return Status::ok();
      if (f.has("layer_types")) {
        FG_RETURN_IF_ERROR(parse_layer_types(root, path, c.num_layers, sliding));
        break;
      }
      int64_t max_window_layers = 28;  // transformers' default for both Qwen families
      FG_RETURN_IF_ERROR(f.get_int("max_window_layers", max_window_layers, false));
      for (int i = 0; i < c.num_layers; ++i)
        if (i >= max_window_layers) c.layer_sliding_window[size_t(i)] = int(window);
      return Status::ok();
    }
  }
  for (int i = 0; i < c.num_layers; ++i)
    if (sliding[size_t(i)]) c.layer_sliding_window[size_t(i)] = int(window);
  return Status::ok();
}

// hidden_act (hidden_activation for Gemma) -> Activation.
Status parse_activation(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields f(root, path);
  const bool gemma = arch.dialect == ConfigDialect::kGemma2 || arch.dialect == ConfigDialect::kGemma3;
  const char* key = gemma ? "hidden_activation" : "hidden_act";
  std::string act = gemma ? "gelu_pytorch_tanh" : "silu";
  FG_RETURN_IF_ERROR(f.get_string(key, act, false));
  if (act == "silu" || act == "swish") {
    c.options.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_python_tanh" || act == "gelu_new") {
    c.options.activation = Activation::kGeluTanh;
  } else {
    return unsupported(path + ": " + key + " '" + act + "' is not supported (supported: silu, gelu_pytorch_tanh)");
  }
  return Status::ok();
}

// A number or null; `value` keeps the family's default when the key is absent, 0 when null.
Status get_optional_cap(const Json& root, const std::string& path, const char* key, double& value) {
  Fields f(root, path);
  if (root.contains(key) && root.at(key).is_null()) {
    value = 0.0;
    return Status::ok();
  }
  FG_RETURN_IF_ERROR(f.get_double(key, value, false));
  if (value < 0.0) return invalid_argument(path + ": field '" + key + "' must be positive or null");
  return Status::ok();
}

// The Gemma specifics: scaled embeddings, (1 + weight) norms around both sublayers,
// query_pre_attn_scalar, soft-capping.
Status parse_gemma(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields f(root, path);
  c.options.norm_plus_one = true;
  c.options.sandwich_norms = true;
  c.embedding_scale = std::sqrt(double(c.hidden_size));
  double scalar = 256.0;
  FG_RETURN_IF_ERROR(f.get_double("query_pre_attn_scalar", scalar, false));
  if (!(scalar > 0.0)) return invalid_argument(path + ": field 'query_pre_attn_scalar' must be positive");
  c.attention_scale = std::pow(scalar, -0.5);
  bool bidirectional = false;
  FG_RETURN_IF_ERROR(f.get_bool("use_bidirectional_attention", bidirectional));
  if (bidirectional) return unsupported(path + ": use_bidirectional_attention is not supported (causal decoding only)");
  if (arch.dialect == ConfigDialect::kGemma2) {
    c.attn_softcap = 50.0;
    c.final_softcap = 30.0;
    FG_RETURN_IF_ERROR(get_optional_cap(root, path, "attn_logit_softcapping", c.attn_softcap));
    FG_RETURN_IF_ERROR(get_optional_cap(root, path, "final_logit_softcapping", c.final_softcap));
  } else {
    FG_RETURN_IF_ERROR(get_optional_cap(root, path, "final_logit_softcapping", c.final_softcap));
    double attn_cap = 0.0;
    FG_RETURN_IF_ERROR(get_optional_cap(root, path, "attn_logit_softcapping", attn_cap));
    // transformers' Gemma 3 keeps the field but never applies it: refuse rather than guess.
    if (attn_cap != 0.0)
      return unsupported(path +
                         ": attn_logit_softcapping is not supported for Gemma3ForCausalLM "
                         "(transformers does not apply it either)");
  }
  return Status::ok();
}

// Mixture-of-experts fields (Mixtral, Qwen3-MoE) and which layers have experts.
Status parse_moe(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields f(root, path);
  c.layer_moe.assign(size_t(c.num_layers), 0);
  if (arch.dialect != ConfigDialect::kMixtral && arch.dialect != ConfigDialect::kQwen3Moe) return Status::ok();
  const bool mixtral = arch.dialect == ConfigDialect::kMixtral;
  int64_t experts = mixtral ? 8 : 128, top_k = mixtral ? 2 : 8, inter = mixtral ? c.intermediate_size : 768;
  // transformers treats num_experts and num_local_experts as one field (and writes either).
  int64_t local_experts = 0;
  FG_RETURN_IF_ERROR(f.get_positive("num_experts", experts, false));
  FG_RETURN_IF_ERROR(f.get_positive("num_local_experts", local_experts, false));
  if (local_experts > 0) {
    if (f.has("num_experts") && experts != local_experts)
      return invalid_argument(path + ": num_experts and num_local_experts differ");
    experts = local_experts;
  }
  FG_RETURN_IF_ERROR(f.get_positive("num_experts_per_tok", top_k, false));
  if (!mixtral) FG_RETURN_IF_ERROR(f.get_positive("moe_intermediate_size", inter, false));
  if (experts > kMaxExperts)
    return unsupported(path + ": " + std::to_string(experts) + " experts is more than flashgen supports (" +
                       std::to_string(kMaxExperts) + ")");
  if (top_k > experts || top_k > kMaxExpertsPerToken)
    return invalid_argument(path + ": num_experts_per_tok (" + std::to_string(top_k) + ") must be at most " +
                            "the number of experts and " + std::to_string(kMaxExpertsPerToken));
  if (inter > (1 << 22)) return invalid_argument(path + ": model dimensions are implausibly large");
  c.moe.num_experts = int(experts);
  c.moe.top_k = int(top_k);
  c.moe.intermediate_size = inter;
  c.moe.renormalize = true;
  if (mixtral) {
    std::fill(c.layer_moe.begin(), c.layer_moe.end(), 1);
    return Status::ok();
  }
  c.moe.renormalize = false;
  FG_RETURN_IF_ERROR(f.get_bool("norm_topk_prob", c.moe.renormalize));
  int64_t step = 1;
  FG_RETURN_IF_ERROR(f.get_positive("decoder_sparse_step", step, false));
  std::vector<int64_t> dense_layers;
  FG_RETURN_IF_ERROR(f.get_id_list("mlp_only_layers", dense_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    const bool dense = std::find(dense_layers.begin(), dense_layers.end(), int64_t(i)) != dense_layers.end();
    c.layer_moe[size_t(i)] = !dense && (i + 1) % step == 0 ? 1 : 0;
  }
  return Status::ok();
}

void dedupe(std::vector<int64_t>& v) {
  std::vector<int64_t> out;
  for (int64_t x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  v = std::move(out);
}

}  // namespace

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::kDefault: return "default";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kDynamic: return "dynamic";
    case RopeScaling::kLlama3: return "llama3";
    case RopeScaling::kLongRope: return "longrope";
  }
  return "?";
}

int ModelConfig::every_layer_window() const {
  int widest = 0;
  for (int w : layer_sliding_window) {
    if (w <= 0) return 0;
    widest = std::max(widest, w);
  }
  return widest;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(ErrorCode::kIo, path + ": read error");
  return ss.str();
}

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& path) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    // nlohmann's messages start with "[json.exception.parse_error.101] "; keep what follows.
    std::string what = e.what();
    auto p = what.find("] ");
    return invalid_argument(path + ": invalid JSON (" + (p == std::string::npos ? what : what.substr(p + 2)) + ")");
  }
  if (!root.is_object()) return invalid_argument(path + ": expected a JSON object at the top level");

  ModelConfig c;
  Fields f(root, path);
  if (!f.has("architectures")) return f.missing("architectures");
  const Json& archs = root.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    return invalid_argument(path + ": field 'architectures' must be a non-empty list of names");
  c.architecture = archs[0].get<std::string>();
  const ArchitectureSpec* arch = find_architecture(c.architecture);
  if (!arch)
    return unsupported(path + ": unsupported architecture '" + c.architecture +
                       "' (supported: " + supported_architectures() + ")");
  FG_RETURN_IF_ERROR(f.get_string("model_type", c.model_type, false));

  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  FG_RETURN_IF_ERROR(f.get_positive("hidden_size", c.hidden_size, true));
  FG_RETURN_IF_ERROR(f.get_positive("intermediate_size", c.intermediate_size, true));
  FG_RETURN_IF_ERROR(f.get_positive("num_hidden_layers", layers, true));
  FG_RETURN_IF_ERROR(f.get_positive("num_attention_heads", heads, true));
  FG_RETURN_IF_ERROR(f.get_positive("vocab_size", c.vocab_size, true));
  kv_heads = heads;
  FG_RETURN_IF_ERROR(f.get_positive("num_key_value_heads", kv_heads, false));
  if (f.has("head_dim")) {
    FG_RETURN_IF_ERROR(f.get_positive("head_dim", head_dim, true));
  } else if (arch->default_head_dim > 0) {
    head_dim = arch->default_head_dim;
  } else {
    if (c.hidden_size % heads != 0)
      return invalid_argument(path + ": hidden_size is not a multiple of num_attention_heads and no head_dim is given");
    head_dim = c.hidden_size / heads;
  }
  if (layers > 4096 || heads > 4096 || head_dim > 1024 || c.hidden_size > (1 << 20) ||
      c.intermediate_size > (1 << 22) || c.vocab_size > (1 << 24))
    return invalid_argument(path + ": model dimensions are implausibly large");
  if (heads % kv_heads != 0)
    return invalid_argument(path + ": num_attention_heads (" + std::to_string(heads) +
                            ") is not a multiple of num_key_value_heads (" + std::to_string(kv_heads) + ")");
  c.num_layers = int(layers);
  c.num_q_heads = int(heads);
  c.num_kv_heads = int(kv_heads);
  c.head_dim = int(head_dim);

  c.max_position_embeddings = 4096;
  FG_RETURN_IF_ERROR(f.get_positive("max_position_embeddings", c.max_position_embeddings, false));
  if (c.max_position_embeddings > kMaxPositions)
    return invalid_argument(path + ": max_position_embeddings " + std::to_string(c.max_position_embeddings) +
                            " is implausibly large (at most " + std::to_string(kMaxPositions) + ")");
  FG_RETURN_IF_ERROR(f.get_double("rms_norm_eps", c.rms_norm_eps, false));
  if (!(c.rms_norm_eps > 0.0)) return invalid_argument(path + ": rms_norm_eps must be > 0");
  c.tie_word_embeddings = arch->default_tied;
  FG_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", c.tie_word_embeddings));
  FG_RETURN_IF_ERROR(parse_activation(root, path, *arch, c));

  bool attention_bias = false, mlp_bias = false;
  FG_RETURN_IF_ERROR(f.get_bool("attention_bias", attention_bias));
  FG_RETURN_IF_ERROR(f.get_bool("mlp_bias", mlp_bias));
  c.options.qkv_bias = arch->qkv_bias_always || (arch->attention_bias_flag && attention_bias);
  c.options.o_bias = arch->attention_bias_flag && attention_bias;
  c.options.mlp_bias = arch->mlp_bias_flag && mlp_bias;
  c.options.qk_norm = arch->qk_norm;
  c.options.fused_checkpoint = arch->dialect == ConfigDialect::kPhi3;
  c.attention_scale = 1.0 / std::sqrt(double(c.head_dim));
  if (arch->dialect == ConfigDialect::kGemma2 || arch->dialect == ConfigDialect::kGemma3)
    FG_RETURN_IF_ERROR(parse_gemma(root, path, *arch, c));
  FG_RETURN_IF_ERROR(parse_moe(root, path, *arch, c));

  FG_RETURN_IF_ERROR(parse_rope(root, path, *arch, c));
  c.rotary_dim = int(double(c.head_dim) * c.rope.partial_rotary_factor);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return invalid_argument(path + ": rotary dimension " + std::to_string(c.rotary_dim) +
                            " (head_dim * partial_rotary_factor) must be even and in [2, head_dim]");
  for (const RopeConfig* r : {&c.rope, c.local_rope ? &*c.local_rope : nullptr}) {
    if (r == nullptr || r->type != RopeScaling::kLongRope) continue;
    const size_t half = size_t(c.rotary_dim / 2);
    if (r->short_factor.size() != half || r->long_factor.size() != half)
      return invalid_argument(
          path + ": longrope short_factor and long_factor must have rotary_dim / 2 = " + std::to_string(half) +
          " entries, got " + std::to_string(r->short_factor.size()) + " and " + std::to_string(r->long_factor.size()));
  }
  FG_RETURN_IF_ERROR(parse_sliding_window(root, path, *arch, c));

  std::string dtype;
  FG_RETURN_IF_ERROR(f.get_string("torch_dtype", dtype, false));
  FG_RETURN_IF_ERROR(f.get_string("dtype", dtype, false));
  c.checkpoint_dtype = parse_dtype_name(dtype);
  if (f.has("quantization_config")) {
    FG_ASSIGN_OR_RETURN(c.quant, parse_quant_config(root.at("quantization_config").dump(), path));
  }

  FG_RETURN_IF_ERROR(f.get_int("bos_token_id", c.bos_token_id, false));
  FG_RETURN_IF_ERROR(f.get_id_list("eos_token_id", c.eos_token_ids));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& dir) {
  std::string path = dir + "/config.json";
  FG_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  FG_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(text, path));
  c.dir = dir;

  std::string gen_path = dir + "/generation_config.json";
  auto gen_text = read_text_file(gen_path);
  if (gen_text.is_ok()) {
    Json gen = Json::parse(gen_text.value(), nullptr, false);
    if (gen.is_discarded() || !gen.is_object()) return invalid_argument(gen_path + ": invalid JSON");
    FG_RETURN_IF_ERROR(Fields(gen, gen_path).get_id_list("eos_token_id", c.eos_token_ids));
  }
  dedupe(c.eos_token_ids);
  return c;
}

}  // namespace fg
