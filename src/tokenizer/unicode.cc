// ICU-backed Unicode helpers (see unicode.h).
#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "core/status.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

const icu::Normalizer2* normalizer_for(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc: n = icu::Normalizer2::getNFCInstance(err); break;
    case NormalForm::kNfd: n = icu::Normalizer2::getNFDInstance(err); break;
    case NormalForm::kNfkc: n = icu::Normalizer2::getNFKCInstance(err); break;
    case NormalForm::kNfkd: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  FG_CHECK(U_SUCCESS(err) && n != nullptr, "ICU normalizer data is missing");
  return n;
}

}  // namespace

std::string unicode_normalize(std::string_view s, NormalForm form) {
  if (is_ascii(s)) return std::string(s);
  const icu::Normalizer2* n = normalizer_for(form);
  UErrorCode err = U_ZERO_ERROR;
  const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  if (n->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, piece, sink, nullptr, err);
  FG_CHECK(U_SUCCESS(err), std::string("ICU normalization failed: ") + u_errorName(err));
  return out;
}

std::string unicode_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    const size_t start = i;
    const char32_t c = utf8_next(s, i);
    // Full (possibly multi-character) mapping of one character alone, so that no context
    // rule applies: the same as Rust's char::to_lowercase.
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, c);
    UChar dst[8];
    UErrorCode err = U_ZERO_ERROR;
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &err);
    if (U_FAILURE(err) || n <= 0) {
      out.append(s.substr(start, i - start));
      continue;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 cp;
      U16_NEXT(dst, k, n, cp);
      utf8_append(out, static_cast<char32_t>(cp));
    }
  }
  return out;
}

std::string unicode_strip_marks(std::string_view s) {
  if (is_ascii(s)) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = utf8_next(s, i);
    const int8_t t = u_charType(static_cast<UChar32>(c));
    if (t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK) continue;
    out.append(s.substr(start, i - start));
  }
  return out;
}

bool unicode_is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool unicode_is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool unicode_is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION: return true;
    default: return false;
  }
}

}  // namespace fg::tok
