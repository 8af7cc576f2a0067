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
    return invalid_argument(path_ + ": field '" + prefix_ + key + "' must be " + what + ", got " + obj_.at(key).dump());
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

Status parse_rope(const Json& root, const std::string& path, ModelConfig& c) {
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
  if (rp.contains("full_attention") || rp.contains("sliding_attention"))
    return unsupported(path + ": per-layer-type '" + std::string(key) + "' is not supported");
  Fields f(rp, path, key ? std::string(key) + "." : "");

  std::string type = "default";
  if (f.has("rope_type"))
    FG_RETURN_IF_ERROR(f.get_string("rope_type", type, true));
  else if (f.has("type"))
    FG_RETURN_IF_ERROR(f.get_string("type", type, true));

  RopeConfig& r = c.rope;
  FG_RETURN_IF_ERROR(top.get_double("rope_theta", r.theta, false));
  FG_RETURN_IF_ERROR(f.get_double("rope_theta", r.theta, false));
  FG_RETURN_IF_ERROR(top.get_double("partial_rotary_factor", r.partial_rotary_factor, false));
  FG_RETURN_IF_ERROR(f.get_double("partial_rotary_factor", r.partial_rotary_factor, false));
  if (!(r.theta > 1.0)) return invalid_argument(path + ": rope_theta must be > 1");
  if (!(r.partial_rotary_factor > 0.0 && r.partial_rotary_factor <= 1.0))
    return invalid_argument(path + ": partial_rotary_factor must be in (0, 1]");

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
    r.original_max_position = c.max_position_embeddings;
    // A top-level value wins over the nested one, as in transformers.
    FG_RETURN_IF_ERROR(f.get_positive("original_max_position_embeddings", r.original_max_position, false));
    FG_RETURN_IF_ERROR(top.get_positive("original_max_position_embeddings", r.original_max_position, false));
    if (!(r.high_freq_factor > r.low_freq_factor))
      return invalid_argument(path + ": llama3 rope needs high_freq_factor > low_freq_factor");
    if (r.original_max_position <= 0)
      return invalid_argument(path + ": llama3 rope needs original_max_position_embeddings");
  } else {
    return unsupported(path + ": rope type '" + type +
                       "' is not supported (supported: default, linear, dynamic, llama3)");
  }
  if (!(r.factor > 0.0)) return invalid_argument(path + ": rope factor must be > 0");
  if (r.type == RopeScaling::kDynamic && r.factor < 1.0)
    return invalid_argument(path + ": dynamic rope factor must be >= 1");
  return Status::ok();
}

Status parse_sliding_window(const Json& root, const std::string& path, const ArchitectureSpec& arch, ModelConfig& c) {
  Fields f(root, path);
  c.layer_sliding_window.assign(size_t(c.num_layers), 0);
  int64_t window = 0;
  FG_RETURN_IF_ERROR(f.get_int("sliding_window", window, false));
  if (f.has("sliding_window") && window <= 0)
    return invalid_argument(path + ": field 'sliding_window' must be a positive integer or null");
  if (window > (1 << 30)) window = 0;  // larger than any context: the same as no window
  switch (arch.sliding) {
    case SlidingWindowRule::kNone: return Status::ok();
    case SlidingWindowRule::kAllLayers:
      std::fill(c.layer_sliding_window.begin(), c.layer_sliding_window.end(), int(window));
      return Status::ok();
    case SlidingWindowRule::kQwen: {
      bool use = false;
      FG_RETURN_IF_ERROR(f.get_bool("use_sliding_window", use));
      if (!use || window == 0) return Status::ok();
      if (f.has("layer_types")) {
        const Json& lt = root.at("layer_types");
        if (!lt.is_array() || lt.size() != size_t(c.num_layers))
          return invalid_argument(path + ": field 'layer_types' must list one entry per layer");
        for (int i = 0; i < c.num_layers; ++i) {
          const Json& t = lt[size_t(i)];
          if (t == "sliding_attention")
            c.layer_sliding_window[size_t(i)] = int(window);
          else if (t != "full_attention")
            return unsupported(path + ": layer type " + t.dump() + " is not supported");
        }
        return Status::ok();
      }
      int64_t max_window_layers = 28;  // transformers' default for both Qwen families
      FG_RETURN_IF_ERROR(f.get_int("max_window_layers", max_window_layers, false));
      for (int i = 0; i < c.num_layers; ++i)
        if (i >= max_window_layers) c.layer_sliding_window[size_t(i)] = int(window);
      return Status::ok();
    }
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
  }
  return "?";
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
  FG_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", c.tie_word_embeddings));

  std::string act = "silu";
  FG_RETURN_IF_ERROR(f.get_string("hidden_act", act, false));
  if (act != "silu") return unsupported(path + ": hidden_act '" + act + "' is not supported (only silu)");

  bool attention_bias = false, mlp_bias = false;
  FG_RETURN_IF_ERROR(f.get_bool("attention_bias", attention_bias));
  FG_RETURN_IF_ERROR(f.get_bool("mlp_bias", mlp_bias));
  c.options.qkv_bias = arch->qkv_bias_always || (arch->attention_bias_flag && attention_bias);
  c.options.o_bias = arch->attention_bias_flag && attention_bias;
  c.options.mlp_bias = arch->mlp_bias_flag && mlp_bias;
  c.options.qk_norm = arch->qk_norm;

  FG_RETURN_IF_ERROR(parse_rope(root, path, c));
  c.rotary_dim = int(double(c.head_dim) * c.rope.partial_rotary_factor);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return invalid_argument(path + ": rotary dimension " + std::to_string(c.rotary_dim) +
                            " (head_dim * partial_rotary_factor) must be even and in [2, head_dim]");
  FG_RETURN_IF_ERROR(parse_sliding_window(root, path, *arch, c));

  std::string dtype;
  FG_RETURN_IF_ERROR(f.get_string("torch_dtype", dtype, false));
  FG_RETURN_IF_ERROR(f.get_string("dtype", dtype, false));
  c.checkpoint_dtype = parse_dtype_name(dtype);

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
