// A fine-grained FP8 checkpoint written at test time (header-only): a tiny random Llama whose every
// linear dimension is a multiple of 128, so that its q/k/v and gate/up parts tile their fused
// matrices in whole 128 x 128 blocks and a backend that computes on FP8 codes keeps them with
// their block scales (model/weights.h). The committed fixtures (tools/make_fp8_fixtures.py) are
// 160 wide on purpose, so that their blocks are partial; this one is the other case. Next to it,
// its exact twin: the same model with every linear weight as its f32 value e4m3(code) * scale.
// Also: CodesKeepingCpu, a CPU backend that keeps FP8 codes as CUDA does.
//
// Each 128 x 128 block of a weight gets its own magnitude (a factor 2^-3 .. 2^2), so scales that
// were applied to the wrong block would change the logits by far more than FP8 rounding does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"

namespace fg::test {

// The CPU reference with the CUDA backend's choice of weight dtype: FP8 codes kept as stored, so a
// model's linear layers run Backend::quantize_rows_fp8 + gemm_fp8 (the reference ops) on them.
class CodesKeepingCpu : public CpuBackend {
 public:
  DType weight_dtype(DType stored) const override {
    return stored == DType::kF8E4M3 ? stored : CpuBackend::weight_dtype(stored);
  }
};

// Writes `tensors` (name -> dtype name, shape, bytes) as dir/model.safetensors.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
inline void write_safetensors(const std::filesystem::path& dir,
                              const std::map<std::string, SafetensorsEntry>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

struct Fp8BlockLlamaShape {
  int64_t vocab = 256;
  int64_t hidden = 256;
  int64_t head_dim = 64;
  int64_t heads = 4;     // q rows 256
  int64_t kv_heads = 2;  // k and v rows 128 each
  int64_t inter = 384;
  int layers = 2;
};

inline void write_fp8_block_llama(const std::filesystem::path& fp8_dir, const std::filesystem::path& twin_dir,
                                  uint32_t seed = 20261204, const Fp8BlockLlamaShape& s = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(fp8_dir);
  fs::create_directories(twin_dir);
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                           {"model_type", "llama"},
                           {"vocab_size", s.vocab},
                           {"hidden_size", s.hidden},
                           {"head_dim", s.head_dim},
                           {"num_attention_heads", s.heads},
                           {"num_key_value_heads", s.kv_heads},
                           {"intermediate_size", s.inter},
                           {"num_hidden_layers", s.layers},
                           {"max_position_embeddings", 256},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 10000.0},
                           {"hidden_act", "silu"},
                           {"tie_word_embeddings", true},
                           {"torch_dtype", "bfloat16"},
                           {"bos_token_id", 1},
                           {"eos_token_id", 2}};
  std::ofstream(twin_dir / "config.json") << config.dump(2);
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"activation_scheme", "dynamic"},
                                   {"fmt", "e4m3"},
                                   {"weight_block_size", {128, 128}},
                                   {"modules_to_not_convert", {"lm_head"}}};
  std::ofstream(fp8_dir / "config.json") << config.dump(2);

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-3, 2);
  auto bf16_bytes = [&](std::vector<int64_t> shape, float center, float spread) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::string bytes(size_t(n) * 2, '\0');
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t v = f32_to_bf16(center + spread * uniform(rng));
      std::memcpy(bytes.data() + 2 * i, &v, 2);
    }
    return SafetensorsEntry{"BF16", shape, bytes};
  };
  std::map<std::string, SafetensorsEntry> fp8, twin;
  auto both = [&](const std::string& name, const SafetensorsEntry& e) { fp8[name] = twin[name] = e; };
  // A linear weight [n, k]: e4m3 codes with per-block scales, and its exact f32 values.
  auto linear = [&](const std::string& name, int64_t n, int64_t k) {
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    std::vector<float> w(size_t(n * k));
    std::vector<float> factor(size_t(nb * kb));
    for (float& f : factor) f = std::ldexp(0.1f, exponent(rng));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) w[size_t(i * k + j)] = uniform(rng) * factor[size_t((i / 128) * kb + j / 128)];
    std::vector<float> scales(size_t(nb * kb));
    std::string codes(size_t(n * k), '\0'), values(size_t(n * k) * 4, '\0');
    for (int64_t bi = 0; bi < nb; ++bi)
      for (int64_t bj = 0; bj < kb; ++bj) {
        float amax = 0.0f;
        for (int64_t i = bi * 128; i < std::min(n, bi * 128 + 128); ++i)
          for (int64_t j = bj * 128; j < std::min(k, bj * 128 + 128); ++j)
            amax = std::fmax(amax, std::fabs(w[size_t(i * k + j)]));
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        scales[size_t(bi * kb + bj)] = scale;
        for (int64_t i = bi * 128; i < std::min(n, bi * 128 + 128); ++i)
          for (int64_t j = bj * 128; j < std::min(k, bj * 128 + 128); ++j) {
            const uint8_t code = f32_to_f8e4m3(w[size_t(i * k + j)] / scale);
            const float value = f8e4m3_to_f32(code) * scale;
            codes[size_t(i * k + j)] = char(code);
            std::memcpy(values.data() + 4 * (i * k + j), &value, 4);
          }
      }
    std::string scale_bytes(scales.size() * 4, '\0');
    std::memcpy(scale_bytes.data(), scales.data(), scale_bytes.size());
    fp8[name + ".weight"] = {"F8_E4M3", {n, k}, codes};
    fp8[name + ".weight_scale_inv"] = {"F32", {nb, kb}, scale_bytes};
    twin[name + ".weight"] = {"F32", {n, k}, values};
  };
  both("model.embed_tokens.weight", bf16_bytes({s.vocab, s.hidden}, 0.0f, 1.0f));
  both("model.norm.weight", bf16_bytes({s.hidden}, 1.0f, 0.2f));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    both(p + "input_layernorm.weight", bf16_bytes({s.hidden}, 1.0f, 0.2f));
    both(p + "post_attention_layernorm.weight", bf16_bytes({s.hidden}, 1.0f, 0.2f));
    linear(p + "self_attn.q_proj", s.heads * s.head_dim, s.hidden);
    linear(p + "self_attn.k_proj", s.kv_heads * s.head_dim, s.hidden);
    linear(p + "self_attn.v_proj", s.kv_heads * s.head_dim, s.hidden);
    linear(p + "self_attn.o_proj", s.hidden, s.heads * s.head_dim);
    linear(p + "mlp.gate_proj", s.inter, s.hidden);
    linear(p + "mlp.up_proj", s.inter, s.hidden);
    linear(p + "mlp.down_proj", s.hidden, s.inter);
  }
  write_safetensors(fp8_dir, fp8);
  write_safetensors(twin_dir, twin);
}

}  // namespace fg::test
