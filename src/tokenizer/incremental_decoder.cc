// Incremental detokenizer (see incremental_decoder.h).
#include "tokenizer/incremental_decoder.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fg {

namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, tok::kReplacementUtf8) == 0;
}

// Ids of context kept in the first window: enough for any decoder's neighbour rules.
constexpr size_t kContextWindow = 6;

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                                       std::span<const int32_t> context_ids, std::vector<int32_t> keep_special)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      keep_special_(std::move(keep_special)),
      ids_(context_ids.begin(), context_ids.end()) {
  read_ = ids_.size();
  prefix_ = read_ > kContextWindow ? read_ - kContextWindow : 0;
  prefix_text_ = decode_range(prefix_, read_);
}

bool IncrementalDecoder::hidden(int32_t id) const {
  return skip_special_ && tokenizer_.is_special(id) &&
         std::find(keep_special_.begin(), keep_special_.end(), id) == keep_special_.end();
}

std::string IncrementalDecoder::decode_range(size_t begin, size_t end) const {
  const std::span<const int32_t> ids(ids_.data() + begin, end - begin);
  if (keep_special_.empty() || !skip_special_) return tokenizer_.decode(ids, skip_special_);
  // Some special tokens are shown: leave the others out, then decode what is left whole.
  std::vector<int32_t> shown;
  shown.reserve(ids.size());
  for (int32_t id : ids)
    if (!hidden(id)) shown.push_back(id);
  return tokenizer_.decode(shown, /*skip_special_tokens=*/false);
}

std::string IncrementalDecoder::push(int32_t id) {
  ids_.push_back(id);
  // A run of byte-fallback tokens is decoded as a whole (a bad byte later in the run changes
  // the text of the earlier ones), so nothing is shown until the run ends. Skipped special
  // tokens are invisible to the decoder and do not end a run.
  if (!hidden(id)) in_byte_run_ = tokenizer_.is_byte_token(id);
  if (in_byte_run_) return {};
  std::string text = decode_range(prefix_, ids_.size());
  if (text.size() <= prefix_text_.size() || ends_with_replacement(text) ||
      text.compare(0, prefix_text_.size(), prefix_text_) != 0)
    return {};
  std::string delta = text.substr(prefix_text_.size());
  // The next window starts at the first id of this emission; its text alone is the new prefix.
  prefix_ = read_;
  read_ = ids_.size();
  prefix_text_ = decode_range(prefix_, read_);
  return delta;
}

std::string IncrementalDecoder::flush() {
  if (read_ == ids_.size()) return {};
  std::string text = decode_range(prefix_, ids_.size());
  std::string delta;
  if (text.size() > prefix_text_.size() && text.compare(0, prefix_text_.size(), prefix_text_) == 0)
    delta = text.substr(prefix_text_.size());
  prefix_ = read_;
  read_ = ids_.size();
  prefix_text_ = decode_range(prefix_, read_);
  return delta;
}

}  // namespace fg
