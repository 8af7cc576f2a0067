// Unicode properties and transforms the tokenizer components need, on UTF-8 strings.
// Backed by ICU (libicu): NFC/NFD/NFKC/NFKD normalization, full lowercase mapping and the
// character classes of Rust's `char` methods that Hugging Face tokenizers relies on
// (is_whitespace, is_alphanumeric, is_numeric, Unicode punctuation, combining marks).
// Inputs must be valid UTF-8 (the tokenizer repairs its input before anything else runs).
#pragma once

#include <string>
#include <string_view>

namespace fg::tok {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// s in the given normalization form. ASCII-only strings are returned unchanged without
// touching ICU (they are stable under every form).
std::string unicode_normalize(std::string_view s, NormalForm form);

// Full lowercase mapping of each character independently, like Rust's char::to_lowercase
// (one character may become several: U+0130 -> "i\u0307"; no context-dependent final sigma).
std::string unicode_lowercase(std::string_view s);

// s without the combining marks (general categories Mn, Mc, Me), like the StripAccents
// normalizer.
std::string unicode_strip_marks(std::string_view s);

// Rust char::is_whitespace: the White_Space property.
bool unicode_is_whitespace(char32_t c);
// Rust char::is_numeric: general categories Nd, Nl, No.
bool unicode_is_numeric(char32_t c);
// ASCII punctuation or a general category P* (Pc Pd Ps Pe Pi Pf Po).
bool unicode_is_punctuation(char32_t c);

}  // namespace fg::tok
