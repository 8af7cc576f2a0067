// UTF-8 helpers for the tokenizer: code point decoding/encoding, validation and lossy repair.
// Hugging Face tokenizers work on Rust `str` (always valid UTF-8); flashgen accepts any bytes and
// repairs them first with `utf8_sanitize`, which replaces each maximal invalid subsequence by
// U+FFFD exactly as Python's `bytes.decode("utf-8", "replace")` and Rust's
// `String::from_utf8_lossy` do. Nothing here may allocate in the per-character paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fg::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Byte length of the UTF-8 sequence starting with lead byte `b` (1 for invalid leads).
inline size_t utf8_seq_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xF0) return b < 0xF8 ? 4 : 1;
  if (b >= 0xE0) return 3;
  if (b >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at s[i] and advances i. The input must be valid UTF-8.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const size_t n = utf8_seq_len(b0);
  char32_t c = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return c;
}

// Decodes the code point that ends just before position i and moves i back to its start.
inline char32_t utf8_prev(std::string_view s, size_t& i) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  char32_t c = utf8_next(s, k);
  i = j;
  return c;
}

// Appends the UTF-8 encoding of c.
void utf8_append(std::string& out, char32_t c);

// True when s is entirely valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool utf8_is_valid(std::string_view s);

// s with every maximal invalid subsequence replaced by U+FFFD (Unicode "substitution of
// maximal subparts", the behaviour of Python's errors="replace").
std::string utf8_sanitize(std::string_view s);

// Length of the longest prefix of s that ends on a complete character boundary, treating a
// trailing incomplete (but so far valid) multi-byte sequence as not yet complete.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace fg::tok
