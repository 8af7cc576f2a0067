// KvCache allocation (see kv_cache.h).
#include "model/kv_cache.h"

#include <string>

namespace fg {

Result<KvCache> KvCache::create(Backend& backend, const ModelConfig& c, int num_pages, int page_size) {
  if (page_size <= 0) return invalid_argument("KV page size must be positive, got " + std::to_string(page_size));
  if (num_pages <= 0) return invalid_argument("KV cache needs at least one page, got " + std::to_string(num_pages));
  const DType act = backend.act_dtype();
  const int64_t per_tensor = int64_t(num_pages) * page_size * c.num_kv_heads * c.head_dim;
  if (per_tensor > (int64_t(1) << 40) / int64_t(2 * c.num_layers))
    return invalid_argument("KV cache of " + std::to_string(num_pages) + " pages of " + std::to_string(page_size) +
                            " tokens is too large");
  const size_t bytes = size_t(per_tensor) * dtype_size(act);
  KvCache kv;
  kv.buffer_ = backend.alloc(bytes * 2 * size_t(c.num_layers));
  if (!kv.buffer_.data())
    return Status(ErrorCode::kResourceExhausted,
                  "cannot allocate the KV cache (" + std::to_string(bytes * 2 * size_t(c.num_layers)) + " bytes)");
  kv.num_pages_ = num_pages;
  kv.page_size_ = page_size;
  char* base = static_cast<char*>(kv.buffer_.data());
  for (int l = 0; l < c.num_layers; ++l) {
    KvCacheLayer layer;
    layer.k = Tensor::contiguous(base + (2 * size_t(l)) * bytes, act, backend.device(),
                                 {num_pages, page_size, c.num_kv_heads, c.head_dim});
    layer.v = Tensor::contiguous(base + (2 * size_t(l) + 1) * bytes, act, backend.device(),
                                 {num_pages, page_size, c.num_kv_heads, c.head_dim});
    kv.layers_.push_back(layer);
  }
  return kv;
}

}  // namespace fg
