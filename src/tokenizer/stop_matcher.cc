// Stop-string matching over streamed text (see stop_matcher.h).
#include "tokenizer/stop_matcher.h"

#include <algorithm>

namespace fg {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopStringMatcher::Output StopStringMatcher::push(std::string_view delta) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    out.stop_index = stop_index_;
    return out;
  }
  held_.append(delta);
  // The earliest occurrence of any stop string ends the stream (the longest one on a tie).
  size_t best_pos = std::string::npos;
  int best = -1;
  for (size_t k = 0; k < stops_.size(); ++k) {
    const size_t pos = held_.find(stops_[k]);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stops_[k].size() > stops_[static_cast<size_t>(best)].size())) {
      best_pos = pos;
      best = static_cast<int>(k);
    }
  }
  if (best >= 0) {
    out.text = held_.substr(0, best_pos);
    out.stopped = true;
    out.stop_index = best;
    stopped_ = true;
    stop_index_ = best;
    held_.clear();
    return out;
  }
  // Hold back the longest tail of the text that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, held_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace fg
