// Jinja2-compatible lexer (see lexer.h). The structure follows Jinja2's documented behaviour:
// text is scanned for the earliest `{{`, `{%` or `{#`; the text before it is stripped according
// to the tag's sign (`-` strips all whitespace, `+` keeps it, otherwise lstrip_blocks removes the
// spaces and tabs that open the line of a block or comment tag); a block or comment end eats one
// following newline (trim_blocks) unless written `+%}`; `-%}` eats all following whitespace.
#include "jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "jinja/error.h"
#include "jinja/value.h"

namespace fg::jinja {
namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.rstrip() (Unicode whitespace), used for `{%-`.
std::string rstrip_ws(std::string_view s) {
  return py_strip(s, nullptr, false, true);
}

// Length of the whitespace run (Python \s, Unicode) at s[pos...].
size_t whitespace_run(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[p]);
    if (c < 0x80) {
      if (!is_ascii_space(static_cast<char>(c)) && !(c >= 0x1C && c <= 0x1F)) break;
      ++p;
      continue;
    }
    std::u32string one = utf8_decode(s.substr(p, 4));
    if (one.empty() || !py_isspace(one[0])) break;
    std::string enc;
    utf8_append(enc, one[0]);
    p += enc.size();
  }
  return p - pos;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos));
        pos = src_.size();
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after];
      std::string text = src_.substr(pos, tag - pos);
      bool is_raw = kind == '%' && match_raw_begin(after + (sign ? 1 : 0)) != std::string::npos;
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          std::string_view rest(text.data() + l_pos, text.size() - l_pos);
          if (!rest.empty() && whitespace_run(rest, 0) == rest.size()) text.resize(l_pos);
        }
      }
      count_lines(pos, tag);
      emit_data(text);
      size_t body = after + (sign ? 1 : 0);
      if (is_raw) {
        pos = lex_raw(body, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(body, line_starting);
      } else {
        pos = lex_tag(kind == '%', body, line_starting);
      }
    }
    Token eof;
    eof.type = TokenType::kEof;
    eof.line = line_;
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) { throw JinjaError(ErrorKind::kSyntax, msg, line_); }

  size_t find_tag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i)
      if (src_[i] == '\n') ++line_;
  }

  void emit_data(std::string text) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::kData;
    t.value = std::move(text);
    t.line = line_;
    out_.push_back(std::move(t));
  }

  void emit(TokenType type, std::string value = {}) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_;
    out_.push_back(std::move(t));
  }

  // `\s*raw\s*(-%}\s*|%})` at p: returns the position after it, or npos.
  size_t match_raw_begin(size_t p) const {
    p += whitespace_run(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
      return std::string::npos;
    p += whitespace_run(src_, p);
    if (src_.compare(p, 3, "-%}") == 0) return p + 3;
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t body, bool& line_starting) {
    size_t p = body;
    p += whitespace_run(src_, p);
    p += 3;  // raw
    p += whitespace_run(src_, p);
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p += whitespace_run(src_, p);
    } else {
      p += 2;
    }
    count_lines(body, p);
    // Search for {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)
    size_t q = p;
    while (true) {
      size_t tag = src_.find("{%", q);
      if (tag == std::string::npos) fail("Missing end of raw directive");
      size_t r = tag + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r += whitespace_run(src_, r);
      if (src_.compare(r, 6, "endraw") != 0) {
        q = tag + 2;
        continue;
      }
      r += 6;
      r += whitespace_run(src_, r);
      size_t end;
      if (src_.compare(r, 3, "+%}") == 0) {
        end = r + 3;
      } else if (src_.compare(r, 3, "-%}") == 0) {
        end = r + 3;
        end += whitespace_run(src_, end);
      } else if (src_.compare(r, 2, "%}") == 0) {
        end = r + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        q = tag + 2;
        continue;
      }
      std::string text = src_.substr(p, tag - p);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0) {
          std::string_view rest(text.data() + l_pos, text.size() - l_pos);
          if (!rest.empty() && whitespace_run(rest, 0) == rest.size()) text.resize(l_pos);
        }
      }
      emit_data(text);
      count_lines(p, end);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  size_t lex_comment(size_t body, bool& line_starting) {
    size_t p = body;
    while (p < src_.size()) {
      size_t end = 0;
      if (src_.compare(p, 3, "+#}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 3, "-#}") == 0) {
        end = p + 3;
        end += whitespace_run(src_, end);
      } else if (src_.compare(p, 2, "#}") == 0) {
        end = p + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      }
      if (end) {
        count_lines(body, end);
        line_starting = src_[end - 1] == '\n';
        return end;
      }
      ++p;
    }
    fail("Missing end of comment tag");
  }

  // Lexes the inside of {{ ... }} or {% ... %}; returns the position after the end tag.
  size_t lex_tag(bool block, size_t p, bool& line_starting) {
    emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin);
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size())
        fail(block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (src_.compare(p, 3, "+%}") == 0) {
            end = p + 3;
          } else if (src_.compare(p, 3, "-%}") == 0) {
            end = p + 3;
            end += whitespace_run(src_, end);
          } else if (src_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;
          }
        } else {
          if (src_.compare(p, 3, "-}}") == 0) {
            end = p + 3;
            end += whitespace_run(src_, end);
          } else if (src_.compare(p, 2, "}}") == 0) {
            end = p + 2;
          }
        }
        if (end) {
          emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd);
          count_lines(p, end);
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      size_t ws = whitespace_run(src_, p);
      if (ws) {
        count_lines(p, p + ws);
        p += ws;
        continue;
      }
      char c = src_[p];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        emit(TokenType::kName, src_.substr(p, q - p));
        p = q;
        continue;
      }
      if (c == '"' || c == '\'') {
        p = lex_string(p);
        continue;
      }
      static const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : kOps2) {
        if (src_.compare(p, 2, op) == 0) {
          emit(TokenType::kOperator, op);
          p += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::strchr("+-/*%~[](){}><=.:|,;", c) && c != 0) {
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c);
        } else if (c == ')' || c == ']' || c == '}') {
          char want = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (balance.empty() || balance.back() != want) fail(std::string("unexpected '") + c + "'");
          balance.pop_back();
        }
        emit(TokenType::kOperator, std::string(1, c));
        ++p;
        continue;
      }
      fail(std::string("unexpected char '") + c + "'");
    }
  }

  size_t digits_run(size_t p) const {  // (\d+_)*\d+
    size_t q = p;
    if (q >= src_.size() || !std::isdigit(static_cast<unsigned char>(src_[q]))) return 0;
    while (true) {
      while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
        ++q;
        continue;
      }
      break;
    }
    return q - p;
  }

  size_t lex_number(size_t p) {
    auto strip_underscores = [](std::string s) {
      std::string r;
      for (char ch : s)
        if (ch != '_') r.push_back(ch);
      return r;
    };
    // Prefixed integers: 0x.., 0o.., 0b..
    if (src_[p] == '0' && p + 2 < src_.size()) {
      char b = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      int base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 0;
      if (base) {
        size_t q = p + 2;
        std::string digits;
        while (q < src_.size()) {
          char ch = src_[q];
          if (ch == '_') {
            ++q;
            continue;
          }
          int d = std::isdigit(static_cast<unsigned char>(ch))    ? ch - '0'
                  : std::isxdigit(static_cast<unsigned char>(ch)) ? std::tolower(ch) - 'a' + 10
                                                                  : 99;
          if (d >= base) break;
          digits.push_back(ch);
          ++q;
        }
        if (!digits.empty()) {
          Token t;
          t.type = TokenType::kInteger;
          t.line = line_;
          errno = 0;
          unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
          if (errno || v > static_cast<unsigned long long>(INT64_MAX)) fail("integer literal too large");
          t.int_value = static_cast<int64_t>(v);
          t.value = src_.substr(p, q - p);
          out_.push_back(t);
          return q;
        }
      }
    }
    size_t int_len = digits_run(p);
    size_t q = p + int_len;
    bool is_float = false;
    // fractional part
    if (q + 1 < src_.size() && src_[q] == '.' && digits_run(q + 1)) {
      q += 1 + digits_run(q + 1);
      is_float = true;
    }
    // exponent
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      size_t d = digits_run(r);
      if (d) {
        q = r + d;
        is_float = true;
      }
    }
    // Jinja2 refuses a float that directly follows a '.', e.g. `x.1.5` is x . 1 . 5
    if (is_float && p > 0 && src_[p - 1] == '.') {
      is_float = false;
      q = p + int_len;
    }
    Token t;
    t.line = line_;
    t.value = src_.substr(p, q - p);
    std::string clean = strip_underscores(t.value);
    if (is_float) {
      t.type = TokenType::kFloat;
      t.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      t.type = TokenType::kInteger;
      errno = 0;
      unsigned long long v = std::strtoull(clean.c_str(), nullptr, 10);
      if (errno || v > static_cast<unsigned long long>(INT64_MAX)) fail("integer literal too large");
      t.int_value = static_cast<int64_t>(v);
    }
    out_.push_back(std::move(t));
    return q;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A quoted string with Python's unicode-escape rules (unknown escapes keep their backslash).
  size_t lex_string(size_t p) {
    char q = src_[p];
    size_t i = p + 1;
    std::string out;
    int start_line = line_;
    while (true) {
      if (i >= src_.size()) {
        line_ = start_line;
        fail("unexpected end of string literal");
      }
      char c = src_[i];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) {
        line_ = start_line;
        fail("unexpected end of string literal");
      }
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': ++line_; break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) fail(std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) fail("illegal Unicode character in string literal");
          i += n;
          utf8_append(out, cp);
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            utf8_append(out, cp);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // Jinja2 backslash-escapes non-ASCII text before decoding, so "\é" reads "\xe9".
            std::u32string one = utf8_decode(src_.substr(i - 1, 4));
            char32_t cp = one.empty() ? static_cast<unsigned char>(e) : one[0];
            std::string enc;
            utf8_append(enc, cp);
            i = i - 1 + (one.empty() ? 1 : enc.size());
            char buf[16];
            if (cp < 0x100)
              std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
            else if (cp < 0x10000)
              std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            else
              std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
            out += buf;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t;
    t.type = TokenType::kString;
    t.value = std::move(out);
    t.line = start_line;
    out_.push_back(std::move(t));
    return i + 1;
  }

  std::string src_;
  std::vector<Token> out_;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  // Jinja2 first normalizes every line ending to "\n" and drops one trailing newline.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(c);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace fg::jinja
