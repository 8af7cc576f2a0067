// How many KV pages fit: byte-size parsing for --kv-cache-memory and the arithmetic from a memory
// budget (or a fraction of device memory) to a page count. Pure functions, no device access.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace fg {

// "1073741824", "512MiB", "4GiB", "1.5 GiB", "64KiB", also "k"/"m"/"g"/"KB"/"MB"/"GB" (all binary,
// 1024-based, as memory sizes are). Errors name the offending text.
Result<int64_t> parse_byte_size(std::string_view text);
// 1536 -> "1.50 KiB"
std::string format_byte_size(int64_t bytes);

// The shape of one model's KV cache.
struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kBF16;
  int page_size = 16;
};

// Bytes one page occupies across all layers, K and V.
int64_t kv_bytes_per_page(const KvCacheShape& shape);

// Where the KV memory budget comes from: an explicit size, or a fraction of the device's total
// memory minus what is already in use (weights, workspace) and a reserve for activations, at most
// `cap_bytes` when set (the CPU default, cpu_default_kv_cap_bytes).
struct KvMemoryRequest {
  int64_t kv_cache_bytes = 0;        // > 0: use exactly this much (--kv-cache-memory)
  double gpu_memory_fraction = 0.0;  // used when kv_cache_bytes == 0 (--gpu-memory-fraction)
  int64_t device_total_bytes = 0;    // from the device
  int64_t device_free_bytes = 0;     // from the device, measured after the weights were loaded
  int64_t activation_reserve_bytes = 0;
  int64_t cap_bytes = 0;  // > 0: the fraction's budget is capped at this (ignored with kv_cache_bytes)
};

// The CPU backend's default KV budget is host memory, where a fraction of what is free would
// reserve many GiB no CPU decode ever fills: at most kCpuKvSequences sequences of max_model_len
// tokens, and at most kCpuKvMaxBytes unless one such sequence alone needs more.
constexpr int64_t kCpuKvSequences = 4;
constexpr int64_t kCpuKvMaxBytes = int64_t(2) << 30;
// That cap for a cache of `bytes_per_token` bytes per token (all layers, K and V, of every model
// that shares the budget) and sequences of `max_model_len` tokens.
int64_t cpu_default_kv_cap_bytes(int64_t bytes_per_token, int64_t max_model_len);

// The number of pages, or an error that says which setting to change.
Result<int32_t> kv_num_pages(const KvCacheShape& shape, const KvMemoryRequest& request);

}  // namespace fg
