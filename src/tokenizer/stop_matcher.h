// Stop strings over streamed text. Text deltas go in; what comes out is safe to send: text
// that cannot be the start of a stop string. A stop string split across deltas is still
// caught; the stop string itself and everything after it are never sent. Text that might be
// the beginning of a stop string is held back until the next delta resolves it (or flush()).
// Generation stops at the first delta after which the text contains a stop string; the text is
// cut at the earliest occurrence present then.
// Deltas must be whole UTF-8 characters (IncrementalDecoder's are); held-back text then always
// starts on a character boundary. Not thread-safe; one instance per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fg {

class StopStringMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // to send now
    bool stopped = false;  // a stop string was found: generation must end, nothing more is sent
    int stop_index = -1;   // which entry of `stops` matched
  };

  // Adds a delta. After a stop, further calls return empty text with stopped = true.
  Output push(std::string_view delta);
  // End of generation without a stop: releases the held-back text.
  std::string flush();

  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  int stop_index_ = -1;
};

}  // namespace fg
