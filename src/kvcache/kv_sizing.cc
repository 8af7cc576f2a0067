// Byte sizes and page counts for the KV cache (kv_sizing.h).
#include "kvcache/kv_sizing.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fg {

Result<int64_t> parse_byte_size(std::string_view text) {
  std::string s(text);
  auto bad = [&](const char* why) {
    return invalid_argument("cannot read memory size '" + s + "': " + why +
                            " (examples: 1073741824, 512MiB, 4GiB, 1.5GiB)");
  };
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  size_t num_begin = i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == num_begin) return bad("no number");
  std::string number = s.substr(num_begin, i - num_begin);
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end == nullptr || *end != '\0') return bad("malformed number");
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  std::string unit;
  for (; i < s.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) break;
    unit.push_back(char(std::tolower(static_cast<unsigned char>(s[i]))));
  }
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  if (i != s.size()) return bad("trailing text");
  double scale;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1024.0 * 1024.0;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  } else {
    return bad("unknown unit (use KiB, MiB, GiB or TiB)");
  }
  double bytes = value * scale;
  if (!(bytes >= 0) || bytes > double(std::numeric_limits<int64_t>::max() / 2)) return bad("out of range");
  return int64_t(std::llround(bytes));
}

std::string format_byte_size(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

int64_t kv_bytes_per_page(const KvCacheShape& shape) {
  return 2 * int64_t(shape.num_layers) * shape.page_size * shape.num_kv_heads * shape.head_dim *
         int64_t(dtype_size(shape.dtype));
}

int64_t cpu_default_kv_cap_bytes(int64_t bytes_per_token, int64_t max_model_len) {
  const int64_t one_sequence = bytes_per_token * max_model_len;
  return std::max(one_sequence, std::min(kCpuKvMaxBytes, kCpuKvSequences * one_sequence));
}

Result<int32_t> kv_num_pages(const KvCacheShape& shape, const KvMemoryRequest& request) {
  if (shape.page_size <= 0) return invalid_argument("page size must be positive");
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0) {
    return invalid_argument("KV cache shape needs positive layers, kv heads and head dim");
  }
  const int64_t per_page = kv_bytes_per_page(shape);
  int64_t budget;
  std::string source;
  if (request.kv_cache_bytes > 0) {
    budget = request.kv_cache_bytes;
    source = "--kv-cache-memory " + format_byte_size(budget);
  } else {
    if (!(request.gpu_memory_fraction > 0.0 && request.gpu_memory_fraction <= 1.0)) {
      return invalid_argument("--gpu-memory-fraction must be in (0, 1]; or set --kv-cache-memory SIZE");
    }
    if (request.device_total_bytes <= 0) {
      return unsupported("the backend does not report its memory size; set --kv-cache-memory SIZE instead");
    }
    const int64_t in_use = request.device_total_bytes - request.device_free_bytes;
    budget = int64_t(double(request.device_total_bytes) * request.gpu_memory_fraction) - in_use -
             request.activation_reserve_bytes;
    source = "--gpu-memory-fraction " + std::to_string(request.gpu_memory_fraction) + " of " +
             format_byte_size(request.device_total_bytes) + " with " + format_byte_size(in_use) +
             " already in use and " + format_byte_size(request.activation_reserve_bytes) + " kept for activations";
    if (request.cap_bytes > 0 && request.cap_bytes < budget) {
      budget = request.cap_bytes;
      source = "the default KV cache size " + format_byte_size(budget) + " (set --kv-cache-memory SIZE)";
    }
  }
  const int64_t pages = budget > 0 ? budget / per_page : 0;
  if (pages < 1) {
    return Status(ErrorCode::kResourceExhausted, source + " leaves no room for a single KV page of " +
                                                     format_byte_size(per_page) +
                                                     "; raise the KV memory or lower the page size");
  }
  return int32_t(std::min<int64_t>(pages, std::numeric_limits<int32_t>::max()));
}

}  // namespace fg
