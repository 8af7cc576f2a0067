// KvCache allocation, the fp8 scale rule and --kv-cache-dtype (see kv_cache.h).
#include "model/kv_cache.h"

#include <cmath>
#include <cstring>
#include <string>

#include "model/weights.h"

namespace fg {

namespace {

// Layer l's K (kind "k") or V ("v") scale tensor, NotFound when it has none.
Result<WeightTensor> find_kv_scale(const WeightSource& source, int l, const std::string& kind) {
  auto t = source.find(weight_name_layer(l, ("self_attn." + kind + "_scale").c_str()));
  if (t.is_ok() || t.status().code() != ErrorCode::kNotFound) return t;
  return source.find(weight_name_layer(l, ("self_attn." + kind + "_proj." + kind + "_scale").c_str()));
}

}  // namespace

Result<std::optional<KvScales>> read_checkpoint_kv_scales(const ModelConfig& c, const WeightSource& source) {
  KvScales out;
  int found = 0;
  std::vector<uint8_t> scratch;
  for (int l = 0; l < c.num_layers; ++l) {
    for (const std::string kind : {"k", "v"}) {
      auto t = find_kv_scale(source, l, kind);
      if (!t.is_ok()) {
        if (t.status().code() != ErrorCode::kNotFound) return t.status();
        continue;
      }
      ++found;
      const int64_t n = t->numel();
      if (!t->dtype || (n != 1 && n != c.num_kv_heads))
        return invalid_argument(t->file + ": KV scale " + t->name + " is " + t->dtype_name + " " + t->shape_string() +
                                "; expected one f32, f16 or bf16 value or one per kv head (" +
                                std::to_string(c.num_kv_heads) + ")");
      const void* data = source.read(*t, scratch);
      std::vector<float>& dst = kind == "k" ? out.k : out.v;
      for (int h = 0; h < c.num_kv_heads; ++h) {
        const int64_t i = n == 1 ? 0 : h;
        float x;
        if (*t->dtype == DType::kF32) {
          std::memcpy(&x, static_cast<const char*>(data) + 4 * i, 4);
        } else {
          uint16_t b;
          std::memcpy(&b, static_cast<const char*>(data) + 2 * i, 2);
          x = *t->dtype == DType::kBF16 ? bf16_to_f32(b) : f16_to_f32(b);
        }
        if (!(std::isfinite(x) && x > 0.0f))
          return invalid_argument(t->file + ": KV scale " + t->name + " holds " + std::to_string(x) +
                                  "; scales must be finite and positive");
        dst.push_back(x);
      }
    }
  }
  if (found == 0) return std::optional<KvScales>();
  if (found != 2 * c.num_layers)
    return invalid_argument(c.dir + ": the checkpoint has K/V scales for only some layers (" + std::to_string(found) +
                            " of " + std::to_string(2 * c.num_layers) + " tensors)");
  return std::optional<KvScales>(std::move(out));
}

KvScales kv_scales_for_heads(const KvScales& scales, int num_kv_heads, int head0, int count) {
  KvScales out;
  const size_t layers = scales.k.size() / size_t(num_kv_heads);
  for (size_t l = 0; l < layers; ++l) {
    const size_t first = l * size_t(num_kv_heads) + size_t(head0);
    out.k.insert(out.k.end(), scales.k.begin() + first, scales.k.begin() + first + count);
    out.v.insert(out.v.end(), scales.v.begin() + first, scales.v.begin() + first + count);
  }
  return out;
}

float kv_scale_power_of_two(float s) {
  int e = 0;
  const float m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

Result<DType> resolve_kv_cache_dtype(std::string_view name, const Backend& backend, bool checkpoint_has_kv_scales) {
  if (name == "auto") return checkpoint_has_kv_scales ? DType::kF8E4M3 : backend.act_dtype();
  // bf16: the act dtype where that is bf16 (CUDA); the CPU reference (f32 activations) stores
  // rows rounded to bf16.
  if (name == "bf16") return backend.act_dtype() == DType::kF32 ? DType::kBF16 : backend.act_dtype();
  if (name == "fp8") return DType::kF8E4M3;
  return invalid_argument("--kv-cache-dtype '" + std::string(name) + "': expected auto, bf16 or fp8");
}

Result<KvCache> KvCache::create(Backend& backend, const ModelConfig& c, int num_pages, int page_size, DType dtype,
                                const std::optional<KvScales>& scales) {
  if (page_size <= 0) return invalid_argument("KV page size must be positive, got " + std::to_string(page_size));
  if (num_pages <= 0) return invalid_argument("KV cache needs at least one page, got " + std::to_string(num_pages));
  const bool fp8 = dtype == DType::kF8E4M3;
  if (!kv_cache_dtype_ok(dtype, backend.act_dtype()))
    return invalid_argument("a KV cache holds the activation dtype " + std::string(dtype_name(backend.act_dtype())) +
                            (backend.act_dtype() == DType::kF32 ? ", bf16" : "") + " or f8_e4m3, not " +
                            std::string(dtype_name(dtype)));
  const size_t per_layer = size_t(c.num_kv_heads);
  KvScales used;
  if (fp8) {
    used.k.assign(size_t(c.num_layers) * per_layer, 1.0f);
    used.v = used.k;
    if (scales) {
      if (scales->k.size() != used.k.size() || scales->v.size() != used.v.size())
        return invalid_argument("KV scales: expected " + std::to_string(used.k.size()) + " per K and V (" +
                                std::to_string(c.num_layers) + " layers x " + std::to_string(c.num_kv_heads) +
                                " kv heads), got " + std::to_string(scales->k.size()) + " and " +
                                std::to_string(scales->v.size()));
      for (size_t i = 0; i < used.k.size(); ++i) {
        for (const auto* s : {&scales->k[i], &scales->v[i]})
          if (!(std::isfinite(*s) && *s > 0.0f))
            return invalid_argument("KV scale of layer " + std::to_string(i / per_layer) + " kv head " +
                                    std::to_string(i % per_layer) + " is " + std::to_string(*s) +
                                    "; scales must be finite and positive");
        used.k[i] = kv_scale_power_of_two(scales->k[i]);
        used.v[i] = kv_scale_power_of_two(scales->v[i]);
      }
    }
  }
  const int64_t per_tensor = int64_t(num_pages) * page_size * c.num_kv_heads * c.head_dim;
  if (per_tensor > (int64_t(1) << 40) / int64_t(2 * c.num_layers))
    return invalid_argument("KV cache of " + std::to_string(num_pages) + " pages of " + std::to_string(page_size) +
                            " tokens is too large");
  const size_t bytes = size_t(per_tensor) * dtype_size(dtype);
  KvCache kv;
  kv.buffer_ = backend.alloc(bytes * 2 * size_t(c.num_layers));
  if (!kv.buffer_.data())
    return Status(ErrorCode::kResourceExhausted,
                  "cannot allocate the KV cache (" + std::to_string(bytes * 2 * size_t(c.num_layers)) + " bytes)");
  kv.num_pages_ = num_pages;
  kv.page_size_ = page_size;
  kv.dtype_ = dtype;
  float* scale_base = nullptr;
  if (fp8) {
    // [layer][K, V][kv head], uploaded once: the kernels (and recorded graphs) read them in place.
    std::vector<float> host(size_t(c.num_layers) * 2 * per_layer);
    for (int l = 0; l < c.num_layers; ++l) {
      std::memcpy(&host[(2 * size_t(l)) * per_layer], &used.k[size_t(l) * per_layer], per_layer * 4);
      std::memcpy(&host[(2 * size_t(l) + 1) * per_layer], &used.v[size_t(l) * per_layer], per_layer * 4);
    }
    kv.scale_buffer_ = backend.alloc(host.size() * 4);
    Buffer staging = backend.alloc_host(host.size() * 4);
    std::memcpy(staging.data(), host.data(), host.size() * 4);
    backend.copy_from_host(kv.scale_buffer_.data(), staging.data(), host.size() * 4);
    backend.synchronize();
    scale_base = static_cast<float*>(kv.scale_buffer_.data());
    kv.scales_ = std::move(used);
  }
  char* base = static_cast<char*>(kv.buffer_.data());
  for (int l = 0; l < c.num_layers; ++l) {
    KvCacheLayer layer;
    layer.k = Tensor::contiguous(base + (2 * size_t(l)) * bytes, dtype, backend.device(),
                                 {num_pages, page_size, c.num_kv_heads, c.head_dim});
    layer.v = Tensor::contiguous(base + (2 * size_t(l) + 1) * bytes, dtype, backend.device(),
                                 {num_pages, page_size, c.num_kv_heads, c.head_dim});
    if (fp8) {
      layer.k_scale =
          Tensor::contiguous(scale_base + (2 * size_t(l)) * per_layer, DType::kF32, backend.device(), {c.num_kv_heads});
      layer.v_scale = Tensor::contiguous(scale_base + (2 * size_t(l) + 1) * per_layer, DType::kF32, backend.device(),
                                         {c.num_kv_heads});
    }
    kv.layers_.push_back(layer);
  }
  return kv;
}

}  // namespace fg
