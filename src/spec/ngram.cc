// ngram_propose (see ngram.h).
#include "spec/ngram.h"

#include <algorithm>

namespace fg::spec {

int ngram_propose(std::span<const int32_t> tokens, const NgramOptions& o, int max_draft, std::vector<int32_t>& out) {
  const int64_t len = int64_t(tokens.size());
  if (max_draft <= 0 || o.min_n < 1 || o.max_n < o.min_n) return 0;
  for (int n = int(std::min<int64_t>(o.max_n, len - 1)); n >= o.min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n));
    // Most recent earlier occurrence first: start positions len - n - 1 down to 0.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (tokens[size_t(start)] != suffix[0] ||
          !std::equal(suffix.begin(), suffix.end(), tokens.begin() + std::ptrdiff_t(start)))
        continue;
      const int64_t from = start + n;  // < len: the occurrence ends before the suffix does
      const int64_t take = std::min<int64_t>(max_draft, len - from);
      out.insert(out.end(), tokens.begin() + std::ptrdiff_t(from), tokens.begin() + std::ptrdiff_t(from + take));
      return int(take);
    }
  }
  return 0;
}

}  // namespace fg::spec
