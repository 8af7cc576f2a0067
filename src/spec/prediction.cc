// prediction_propose (see prediction.h).
#include "spec/prediction.h"

#include <algorithm>

namespace fg::spec {

namespace {

// The first start in [from, to) where `needle` occurs in `hay` and is followed by at least one
// token; -1 when there is none.
int64_t find_followed(std::span<const int32_t> hay, std::span<const int32_t> needle, int64_t from, int64_t to) {
  const int64_t n = int64_t(needle.size());
  to = std::min<int64_t>(to, int64_t(hay.size()) - n);  // start + n < hay.size()
  for (int64_t start = std::max<int64_t>(from, 0); start < to; ++start)
    if (hay[size_t(start)] == needle[0] &&
        std::equal(needle.begin(), needle.end(), hay.begin() + std::ptrdiff_t(start)))
      return start;
  return -1;
}

int take(std::span<const int32_t> prediction, int64_t from, int max_draft, std::vector<int32_t>& out) {
  const int64_t n = std::min<int64_t>(max_draft, int64_t(prediction.size()) - from);
  if (n <= 0) return 0;
  out.insert(out.end(), prediction.begin() + std::ptrdiff_t(from), prediction.begin() + std::ptrdiff_t(from + n));
  return int(n);
}

}  // namespace

int prediction_propose(std::span<const int32_t> output, std::span<const int32_t> prediction, const NgramOptions& o,
                       int max_draft, PredictionState& state, std::vector<int32_t>& out) {
  if (max_draft <= 0 || prediction.empty()) return 0;
  const int64_t len = int64_t(output.size()), plen = int64_t(prediction.size());
  if (!state.diverged) {
    while (state.aligned < len && state.aligned < plen &&
           output[size_t(state.aligned)] == prediction[size_t(state.aligned)])
      ++state.aligned;
    if (state.aligned < len) state.diverged = true;
  }
  if (!state.diverged) {
    state.cursor = state.aligned;
    return take(prediction, state.aligned, max_draft, out);
  }
  if (o.min_n < 1 || o.max_n < o.min_n) return 0;
  for (int64_t n = std::min<int64_t>(o.max_n, len); n >= o.min_n; --n) {
    const std::span<const int32_t> suffix = output.subspan(size_t(len - n));
    int64_t start = find_followed(prediction, suffix, state.cursor, plen);
    if (start < 0) start = find_followed(prediction, suffix, 0, state.cursor);
    if (start < 0) continue;
    state.cursor = int32_t(start + n);
    return take(prediction, start + n, max_draft, out);
  }
  return 0;
}

}  // namespace fg::spec
