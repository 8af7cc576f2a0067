// KvCache: the per-layer paged K/V tensors of one model, [num_pages, page_size, num_kv_heads,
// head_dim] in the backend's activation dtype, in one allocation. Which page belongs to which
// sequence is decided outside (the engine's page pool, or a trivial sequential assignment in the
// CLI and tests); this object only owns the memory.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace fg {

class KvCache {
 public:
  // Errors: non-positive sizes, allocation failure.
  static Result<KvCache> create(Backend& backend, const ModelConfig& config, int num_pages, int page_size);

  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int num_layers() const { return int(layers_.size()); }
  KvCacheLayer& layer(int i) { return layers_[size_t(i)]; }
  const KvCacheLayer& layer(int i) const { return layers_[size_t(i)]; }

 private:
  Buffer buffer_;
  std::vector<KvCacheLayer> layers_;
  int num_pages_ = 0;
  int page_size_ = 0;
};

// Pages needed to hold `tokens` tokens.
inline int kv_pages_for(int64_t tokens, int page_size) {
  return int((tokens + page_size - 1) / page_size);
}

}  // namespace fg
