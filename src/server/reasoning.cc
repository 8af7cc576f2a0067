// Reasoning output split from the reply (see reasoning.h).
#include "server/reasoning.h"

#include <algorithm>

#include "server/utf8.h"

namespace fg::server {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The longest end of `s` that is a proper beginning of `marker` (text that may still become it).
size_t marker_tail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(marker.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

bool template_has_reasoning(std::string_view chat_template_source, const ReasoningMarkers& markers) {
  return chat_template_source.find(markers.start) != std::string_view::npos &&
         chat_template_source.find(markers.end) != std::string_view::npos;
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& markers) {
  return trim_right(prompt).ends_with(markers.start);
}

ReasoningSplitter::ReasoningSplitter(ReasoningMarkers markers, bool starts_inside)
    : markers_(std::move(markers)), state_(starts_inside ? State::kReasoningStart : State::kLeading) {
  saw_reasoning_ = starts_inside;
}

ReasoningSplitter::Piece ReasoningSplitter::feed(std::string_view text) {
  pending_ += text;
  return drain(false);
}

ReasoningSplitter::Piece ReasoningSplitter::finish() {
  return drain(true);
}

ReasoningSplitter::Piece ReasoningSplitter::drain(bool final) {
  Piece out;
  for (;;) {
    switch (state_) {
      case State::kLeading: {
        const size_t space = leading_space(pending_);
        const std::string_view rest = std::string_view(pending_).substr(space);
        if (rest.starts_with(markers_.start)) {
          pending_.erase(0, space + markers_.start.size());
          state_ = State::kReasoningStart;
          saw_reasoning_ = true;
          continue;
        }
        // Nothing but space yet, or the marker's beginning: wait for more.
        if (!final && std::string_view(markers_.start).starts_with(rest)) return out;
        state_ = State::kContent;
        continue;
      }
      case State::kReasoningStart:
        pending_.erase(0, leading_space(pending_));
        if (pending_.empty()) return out;
        state_ = State::kReasoning;
        continue;
      case State::kReasoning: {
        const size_t at = pending_.find(markers_.end);
        if (at != std::string::npos) {
          out.reasoning += trim_right(std::string_view(pending_).substr(0, at));
          pending_.erase(0, at + markers_.end.size());
          state_ = State::kContentStart;
          continue;
        }
        if (final) {
          out.reasoning += trim_right(pending_);
          pending_.clear();
          return out;
        }
        size_t give = pending_.size() - marker_tail(pending_, markers_.end);
        while (give > 0 && is_space(pending_[give - 1])) --give;  // the block's last space is dropped
        give = complete_utf8_prefix(std::string_view(pending_).substr(0, give));
        out.reasoning += pending_.substr(0, give);
        pending_.erase(0, give);
        return out;
      }
      case State::kContentStart:
        pending_.erase(0, leading_space(pending_));
        if (pending_.empty()) return out;
        state_ = State::kContent;
        continue;
      case State::kContent: {
        const size_t give = final ? pending_.size() : complete_utf8_prefix(pending_);
        out.content += pending_.substr(0, give);
        pending_.erase(0, give);
        return out;
      }
    }
  }
}

}  // namespace fg::server
