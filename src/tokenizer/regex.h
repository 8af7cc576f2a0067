// A compiled PCRE2 regular expression (UTF + Unicode properties, JIT when available) used by the
// Split pre-tokenizer, the ByteLevel pre-tokenizer and the Replace normalizer/decoder.
// Hugging Face tokenizers compiles these patterns with Oniguruma; PCRE2 agrees on the
// constructs tokenizer.json files use (\p{L}, \p{N}, \s, (?i:...), (?!...), {1,3}).
// Subjects must be valid UTF-8 (checked once by the caller, never here).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fg::tok {

class Regex {
 public:
  // Compiles an Oniguruma-syntax `pattern` (as found in tokenizer.json; \\w is widened to
  // Oniguruma's Unicode meaning); a syntax error gives kInvalidArgument quoting the pattern and PCRE2's
  // message.
  static Result<std::unique_ptr<Regex>> compile(const std::string& pattern);
  // A regex that matches `literal` exactly.
  static Result<std::unique_ptr<Regex>> compile_literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each successive non-overlapping match in subject, left to
  // right. After an empty match the search resumes one character later. If the engine fails
  // (e.g. a backtracking limit on pathological input) the search stops early; the unmatched
  // rest is then reported by callers as text that did not match.
  template <class F>
  void for_each_match(std::string_view subject, F&& on_match) const {
    MatchState st(*this);
    size_t pos = 0;
    std::pair<size_t, size_t> m;
    while (pos <= subject.size() && find(st, subject, pos, m)) {
      on_match(m.first, m.second);
      if (m.second == m.first) {
        if (m.second >= subject.size()) break;
        pos = m.second + 1;
        while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
      } else {
        pos = m.second;
      }
    }
  }

  // subject with every match replaced by `replacement` (taken literally).
  std::string replace_all(std::string_view subject, std::string_view replacement) const;

  const std::string& pattern() const { return pattern_; }

 private:
  // Per-call match data (the compiled code is shared and read-only; match data is not).
  struct MatchState {
    explicit MatchState(const Regex& re);
    ~MatchState();
    void* match_data;
  };
  Regex() = default;
  bool find(MatchState& st, std::string_view subject, size_t start, std::pair<size_t, size_t>& out) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

}  // namespace fg::tok
