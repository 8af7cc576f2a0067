// UTF-8 checks (RFC 3629 well-formedness table).
#include "server/utf8.h"

#include <cstdint>

namespace fg::server {

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlongs
      if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
    }
    i += len;
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t n = s.size();
  size_t back = 0;
  while (back < 4 && back < n && (static_cast<uint8_t>(s[n - 1 - back]) & 0xC0) == 0x80) ++back;
  if (back == n) return n;
  const auto lead = static_cast<uint8_t>(s[n - 1 - back]);
  size_t need = 1;
  if (lead >= 0xF0)
    need = 4;
  else if (lead >= 0xE0)
    need = 3;
  else if (lead >= 0xC0)
    need = 2;
  return back + 1 >= need ? n : n - 1 - back;
}

}  // namespace fg::server
