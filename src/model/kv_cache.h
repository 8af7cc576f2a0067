// KvCache: the per-layer paged K/V tensors of one model, [num_pages, page_size, num_kv_heads,
// head_dim] in the backend's activation dtype (or bf16 on the CPU, whose activations are f32) or
// in f8_e4m3 (an fp8 KV cache: half the bytes of bf16, so the same memory holds twice the
// tokens), in one allocation. Which page belongs to which
// sequence is decided outside (the engine's page pool, or a trivial sequential assignment in the
// CLI and tests); this object only owns the memory.
//
// An fp8 cache has one scale per (layer, kv head) for K and one for V (backend.h's KvCacheLayer:
// stored e4m3(x / scale), read as e4m3 * scale). Scales are fixed when the cache is made, since a
// scale that changed after pages were written would change what those pages mean: the
// checkpoint's calibrated k/v scales when it has them (KvScales), else 1.0 (the K/V values of
// usual models lie well inside e4m3's +-448; larger ones saturate at +-448). Every scale is
// rounded up to a power of two (kv_scale_power_of_two), so quantizing (x / scale) and dequantizing
// (e4m3 * scale) are exact in f32 and the dequantized values exact in bf16: every backend, and
// the CPU reference, computes with the same values.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace fg {

// Per-(layer, kv head) scales of an fp8 KV cache, row-major [num_layers][num_kv_heads].
struct KvScales {
  std::vector<float> k;
  std::vector<float> v;
};

// The scales of kv heads [head0, head0 + count) of `scales` ([num_layers][num_kv_heads]), for the
// KV cache of a tensor-parallel rank that holds those heads (tensor_parallel.h; count 1 when the
// rank holds one replicated head), [num_layers][count].
KvScales kv_scales_for_heads(const KvScales& scales, int num_kv_heads, int head0, int count);

// The smallest power of two >= s (s finite and > 0; checked by the callers).
float kv_scale_power_of_two(float s);

class WeightSource;
// The checkpoint's calibrated K/V scales, when it has them: per layer either
// model.layers.N.self_attn.{k,v}_scale or model.layers.N.self_attn.{k,v}_proj.{k,v}_scale, each a
// single value (every kv head) or one per kv head, f32/f16/bf16. nullopt when no layer has any;
// errors when only some layers or only one of K and V have them, or on another shape or dtype.
Result<std::optional<KvScales>> read_checkpoint_kv_scales(const ModelConfig& config, const WeightSource& source);

// --kv-cache-dtype: "auto", "bf16" (unquantized: the activation dtype bf16 on CUDA; on the CPU,
// whose activations are f32, rows rounded to bf16) or "fp8" (e4m3). "auto" is fp8 when the checkpoint carries
// calibrated K/V scales (it was quantized for an fp8 KV cache), else the activation dtype. Errors name the flag's text.
Result<DType> resolve_kv_cache_dtype(std::string_view name, const Backend& backend, bool checkpoint_has_kv_scales);

// Whether a KV cache may hold `dtype` next to activations of `act`: the act dtype, f8_e4m3, or
// bf16 next to f32 (the CPU reference's --kv-cache-dtype bf16).
constexpr bool kv_cache_dtype_ok(DType dtype, DType act) {
  return dtype == act || dtype == DType::kF8E4M3 || (dtype == DType::kBF16 && act == DType::kF32);
}

class KvCache {
 public:
  // `dtype`: the backend's act dtype, kBF16 where that is f32, or kF8E4M3; `scales` (fp8 only): the checkpoint's, or
  // nullopt for 1.0 everywhere. Errors: non-positive sizes, another dtype, scales of the wrong
  // size or not finite and positive, allocation failure.
  static Result<KvCache> create(Backend& backend, const ModelConfig& config, int num_pages, int page_size, DType dtype,
                                const std::optional<KvScales>& scales = std::nullopt);
  // An act-dtype cache.
  static Result<KvCache> create(Backend& backend, const ModelConfig& config, int num_pages, int page_size) {
    return create(backend, config, num_pages, page_size, backend.act_dtype());
  }

  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int num_layers() const { return int(layers_.size()); }
  DType dtype() const { return dtype_; }
  KvCacheLayer& layer(int i) { return layers_[size_t(i)]; }
  const KvCacheLayer& layer(int i) const { return layers_[size_t(i)]; }
  // The scales in use (powers of two), [num_layers][num_kv_heads]; empty for an act-dtype cache.
  const KvScales& scales() const { return scales_; }

 private:
  Buffer buffer_;
  Buffer scale_buffer_;  // fp8: [num_layers][2][num_kv_heads] f32 on the device
  std::vector<KvCacheLayer> layers_;
  KvScales scales_;
  DType dtype_ = DType::kF32;
  int num_pages_ = 0;
  int page_size_ = 0;
};

// Pages needed to hold `tokens` tokens.
inline int kv_pages_for(int64_t tokens, int page_size) {
  return int((tokens + page_size - 1) / page_size);
}

}  // namespace fg
