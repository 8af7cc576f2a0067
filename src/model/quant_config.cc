// quantization_config -> QuantConfig (see quant_config.h). Every error is one line naming
// config.json and the field.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/quant_config.h"

#include <pcre2.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace fg {
namespace {

using Json = nlohmann::json;

// The block size FP8 checkpoints ship with and the CUDA GEMMs are built for.
constexpr int64_t kFp8Block = 128;

// A module-name pattern of a quantization_config, compiled with PCRE2 (Python's re syntax, which
// both formats' patterns are written in). config.json is untrusted: matching runs under a match
// limit, so a pattern that backtracks without end cannot hang the loader.
class NamePattern {
 public:
  // Null when `regex` does not compile.
  static std::unique_ptr<NamePattern> compile(const std::string& regex) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(), 0, &err, &offset, nullptr);
    if (code == nullptr) return nullptr;
    return std::unique_ptr<NamePattern>(new NamePattern(code));
  }
  ~NamePattern() { pcre2_code_free(code_); }
  NamePattern(const NamePattern&) = delete;
  NamePattern& operator=(const NamePattern&) = delete;

  // Whether the pattern matches at the start of `name` (Python's re.match); false too when the
  // match limit is reached.
  bool matches_start(const std::string& name) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(ctx, 100000);
    pcre2_set_depth_limit(ctx, 1000);
    const int rc =
        pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, PCRE2_ANCHORED, md, ctx);
    pcre2_match_context_free(ctx);
    pcre2_match_data_free(md);
    return rc >= 0;
  }

 private:
  explicit NamePattern(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

std::string show(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

class QuantFields {
 public:
  QuantFields(const Json& obj, const std::string& path, std::string prefix)
      : obj_(obj), path_(path), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const Json& at(const char* key) const { return obj_.at(key); }

  // Refuses keys outside `known`, naming the first one.
  Status only(std::initializer_list<const char*> known) const {
    for (const auto& [key, value] : obj_.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (!ok)
        return unsupported(path_ + ": " + prefix_ + key + " = " + show(value) +
                           " is not supported in an FP8 quantization_config");
    }
    return Status::ok();
  }
  // A string field that must equal `want` when present (absent: `required` decides).
  Status expect_string(const char* key, const char* want, bool required) const {
    if (!has(key)) return required ? invalid_argument(path_ + ": missing " + prefix_ + key) : Status::ok();
    if (!at(key).is_string() || at(key).get<std::string>() != want) return refuse(key, want);
    return Status::ok();
  }
  Status expect_value(const char* key, const Json& want) const {
    if (obj_.contains(key) && obj_.at(key) != want) return refuse(key, show(want).c_str());
    return Status::ok();
  }
  Status string_list(const char* key, std::vector<std::string>& out) const {
    if (!has(key)) return Status::ok();
    if (!at(key).is_array()) return invalid_argument(path_ + ": " + prefix_ + key + " must be a list of names");
    for (const Json& e : at(key)) {
      if (!e.is_string()) return invalid_argument(path_ + ": " + prefix_ + key + " must be a list of names");
      out.push_back(e.get<std::string>());
    }
    return Status::ok();
  }
  Status refuse(const char* key, const char* supported) const {
    if (!obj_.contains(key))
      return unsupported(path_ + ": " + prefix_ + key + " is missing (flashgen reads " + supported + ")");
    return unsupported(path_ + ": " + prefix_ + key + " = " + show(at(key)) + " is not supported (flashgen reads " +
                       supported + ")");
  }

 private:
  const Json& obj_;
  const std::string& path_;
  std::string prefix_;
};

// transformers' fine-grained FP8 (FineGrainedFP8Config).
Result<QuantConfig> parse_finegrained(const Json& q, const std::string& path) {
  QuantFields f(q, path, "quantization_config.");
  FG_RETURN_IF_ERROR(
      f.only({"quant_method", "activation_scheme", "weight_block_size", "modules_to_not_convert", "ignored_layers",
              "modules_to_convert", "fmt", "dequantize", "scale_fmt", "expert_dtype"}));
  FG_RETURN_IF_ERROR(f.expect_string("activation_scheme", "dynamic", false));
  FG_RETURN_IF_ERROR(f.expect_string("fmt", "e4m3", false));
  FG_RETURN_IF_ERROR(f.expect_string("scale_fmt", "float", false));
  FG_RETURN_IF_ERROR(f.expect_string("expert_dtype", "fp8", false));
  FG_RETURN_IF_ERROR(f.expect_value("modules_to_convert", nullptr));
  if (f.has("dequantize") && !f.at("dequantize").is_boolean())
    return invalid_argument(path + ": quantization_config.dequantize must be true or false");
  QuantConfig c;
  c.method = WeightQuantization::kFp8Block;
  c.quant_method = "fp8";
  c.block_rows = c.block_cols = kFp8Block;  // transformers' default
  if (f.has("weight_block_size")) {
    const Json& b = f.at("weight_block_size");
    if (!(b.is_array() && b.size() == 2 && b[0] == kFp8Block && b[1] == kFp8Block))
      return f.refuse("weight_block_size", "[128, 128]");
  } else if (q.contains("weight_block_size")) {
    return unsupported(path +
                       ": quantization_config.weight_block_size = null (one scale per tensor) is not "
                       "supported (flashgen reads [128, 128])");
  }
  FG_RETURN_IF_ERROR(f.string_list("modules_to_not_convert", c.ignored));
  FG_RETURN_IF_ERROR(f.string_list("ignored_layers", c.ignored));
  // transformers never converts the LM head of a fine-grained FP8 model.
  c.ignored.push_back("lm_head");
  return c;
}

// One compressed-tensors quantization args object ("weights" or "input_activations"): float 8-bit
// symmetric with `strategy`, `dynamic` as given.
Status check_fp8_args(const Json& args, const std::string& path, const std::string& prefix, const char* strategy,
                      bool dynamic) {
  if (!args.is_object()) return unsupported(path + ": " + prefix + " = " + show(args) + " is not supported");
  QuantFields f(args, path, prefix + ".");
  FG_RETURN_IF_ERROR(f.only({"num_bits", "type", "symmetric", "strategy", "dynamic", "group_size", "block_structure",
                             "actorder", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"}));
  FG_RETURN_IF_ERROR(f.expect_string("type", "float", true));
  FG_RETURN_IF_ERROR(f.expect_value("num_bits", 8));
  FG_RETURN_IF_ERROR(f.expect_value("symmetric", true));
  FG_RETURN_IF_ERROR(f.expect_string("strategy", strategy, true));
  FG_RETURN_IF_ERROR(f.expect_value("dynamic", dynamic));
  FG_RETURN_IF_ERROR(f.expect_value("group_size", nullptr));
  FG_RETURN_IF_ERROR(f.expect_value("block_structure", nullptr));
  if (f.has("actorder") && f.at("actorder") != false) return f.refuse("actorder", "null");
  // observer / observer_kwargs describe calibration, not the stored format; scale_dtype and
  // zp_dtype name the scale's dtype, which the loader reads from the file itself.
  return Status::ok();
}

// compressed-tensors "float-quantized": FP8 weights per channel, activations per token, dynamic.
Result<QuantConfig> parse_compressed_tensors(const Json& q, const std::string& path) {
  QuantFields f(q, path, "quantization_config.");
  FG_RETURN_IF_ERROR(
      f.only({"quant_method", "format", "config_groups", "ignore", "kv_cache_scheme", "quantization_status",
              "sparsity_config", "global_compression_ratio", "version", "transform_config"}));
  FG_RETURN_IF_ERROR(f.expect_string("format", "float-quantized", true));
  FG_RETURN_IF_ERROR(f.expect_string("quantization_status", "compressed", false));
  FG_RETURN_IF_ERROR(f.expect_value("kv_cache_scheme", nullptr));
  FG_RETURN_IF_ERROR(f.expect_value("transform_config", nullptr));
  if (f.has("sparsity_config") && !(f.at("sparsity_config").is_object() && f.at("sparsity_config").empty()))
    return f.refuse("sparsity_config", "{} or null");
  if (!f.has("config_groups") || !f.at("config_groups").is_object() || f.at("config_groups").empty())
    return invalid_argument(path + ": quantization_config.config_groups must be an object of quantization groups");
  for (const auto& [name, group] : f.at("config_groups").items()) {
    const std::string prefix = "quantization_config.config_groups." + name;
    if (!group.is_object()) return invalid_argument(path + ": " + prefix + " must be an object");
    QuantFields g(group, path, prefix + ".");
    FG_RETURN_IF_ERROR(g.only({"targets", "weights", "input_activations", "output_activations", "format"}));
    if (!(g.has("targets") && g.at("targets") == Json::array({"Linear"}))) return g.refuse("targets", "[\"Linear\"]");
    FG_RETURN_IF_ERROR(g.expect_value("output_activations", nullptr));
    FG_RETURN_IF_ERROR(g.expect_string("format", "float-quantized", false));
    if (!g.has("weights")) return invalid_argument(path + ": missing " + prefix + ".weights");
    FG_RETURN_IF_ERROR(check_fp8_args(g.at("weights"), path, prefix + ".weights", "channel", false));
    if (!g.has("input_activations"))
      return unsupported(path + ": " + prefix +
                         ".input_activations = null (weight-only FP8) is not supported (flashgen reads "
                         "dynamic per-token FP8 activations)");
    FG_RETURN_IF_ERROR(check_fp8_args(g.at("input_activations"), path, prefix + ".input_activations", "token", true));
  }
  QuantConfig c;
  c.method = WeightQuantization::kFp8Channel;
  c.quant_method = "compressed-tensors";
  FG_RETURN_IF_ERROR(f.string_list("ignore", c.ignored));
  for (const std::string& pattern : c.ignored)
    if (pattern.rfind("re:", 0) == 0 && !NamePattern::compile(pattern.substr(3)))
      return invalid_argument(path + ": quantization_config.ignore entry '" + pattern + "' is not a valid regex");
  return c;
}

std::string module_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix))
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

}  // namespace

const char* weight_quantization_name(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kNone: return "none";
    case WeightQuantization::kFp8Block: return "fp8 (128x128 block scales)";
    case WeightQuantization::kFp8Channel: return "fp8 (per-channel scales)";
  }
  return "?";
}

std::string QuantConfig::scale_name(const std::string& weight_name) const {
  return module_of(weight_name) + (method == WeightQuantization::kFp8Block ? ".weight_scale_inv" : ".weight_scale");
}

bool QuantConfig::is_ignored(const std::string& weight_name) const {
  const std::string module = module_of(weight_name);
  for (const std::string& p : ignored) {
    if (method == WeightQuantization::kFp8Channel) {
      // compressed-tensors: the whole name, or a regex matched from the start of it.
      if (p.rfind("re:", 0) != 0) {
        if (p == module) return true;
        continue;
      }
      const auto re = NamePattern::compile(p.substr(3));
      if (re && re->matches_start(module)) return true;
      continue;
    }
    // transformers: from the start up to a module boundary (as a regex), or a suffix.
    if (module.ends_with(p)) return true;
    if (const auto re = NamePattern::compile("(?:" + p + ")(?:(?<=\\.)|(?=\\.|$))")) {
      if (re->matches_start(module)) return true;
    } else if (module.rfind(p, 0) == 0 && (module.size() == p.size() || module[p.size()] == '.')) {
      return true;  // not a regex: a plain name from the start
    }
  }
  return false;
}

Result<QuantConfig> parse_quant_config(const std::string& json_text, const std::string& path) {
  const Json q = Json::parse(json_text, nullptr, false);
  if (q.is_discarded() || !q.is_object()) return invalid_argument(path + ": quantization_config must be a JSON object");
  if (!q.contains("quant_method") || !q.at("quant_method").is_string())
    return invalid_argument(path + ": quantization_config.quant_method must be a string");
  const std::string method = q.at("quant_method").get<std::string>();
  if (method == "fp8") return parse_finegrained(q, path);
  if (method == "compressed-tensors") return parse_compressed_tensors(q, path);
  return unsupported(path + ": quantization_config.quant_method '" + method +
                     "' is not supported (flashgen reads FP8 checkpoints: \"fp8\" with 128x128 blocks, "
                     "\"compressed-tensors\" float-quantized per channel)");
}

Result<LoadQuantization> parse_load_quantization(const std::string& name) {
  if (name.empty() || name == "none") return LoadQuantization::kNone;
  if (name == "fp8") return LoadQuantization::kFp8;
  return invalid_argument("--quantization '" + name + "' is not supported (use fp8 or none)");
}

}  // namespace fg
