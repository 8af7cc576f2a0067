// Regular expressions -> grammar expressions (see regex.h). A recursive-descent parser that
// builds the expression as it reads.
#include "grammar/regex.h"

#include <string>

#include "tokenizer/utf8.h"

namespace fg::grammar {

namespace {

CharSet ascii_digits() {
  return CharSet::range('0', '9');
}
CharSet ascii_word() {
  CharSet s = CharSet::range('0', '9');
  s.add('A', 'Z').add('a', 'z').add('_', '_');
  return s;
}
CharSet ascii_space() {
  CharSet s;
  s.add(' ', ' ').add('\t', '\r');  // \t \n \v \f \r
  return s;
}
CharSet ascii_complement(const CharSet& s) {
  return CharSet::range(0, 0x7F).minus(s);
}
CharSet any_but_newlines() {
  CharSet nl;
  nl.add('\n', '\n').add('\r', '\r').add(0x2028, 0x2029);
  return nl.complement();
}

class RegexParser {
 public:
  RegexParser(std::string_view p, const RegexOptions& o) : p_(p), o_(o) {}

  Result<Expr> parse() {
    if (!tok::utf8_is_valid(p_)) return invalid_argument("regex is not valid UTF-8");
    std::vector<Expr> alts;
    for (;;) {
      FG_ASSIGN_OR_RETURN(Expr seq, parse_sequence(/*top=*/true));
      alts.push_back(std::move(seq));
      if (at_end()) break;
      if (peek() == '|') {
        ++i_;
        continue;
      }
      return error("unbalanced ')'");
    }
    return Expr::alt(std::move(alts));
  }

 private:
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }
  Status error(const std::string& what) const {
    return invalid_argument("regex: " + what + " at offset " + std::to_string(i_) + " in '" + std::string(p_) + "'");
  }
  Status unsupported_construct(const std::string& what) const {
    return unsupported("regex: unsupported " + what + " at offset " + std::to_string(i_) + " in '" + std::string(p_) +
                       "'");
  }

  Expr chars(const CharSet& s) const { return o_.json_string ? json_string_chars(s) : Expr::chars(s); }
  Expr any_text() const { return Expr::star(chars(CharSet::all())); }

  // A sequence up to '|' or ')' or the end. At top level, ^ may open it and $ close it.
  Result<Expr> parse_sequence(bool top) {
    std::vector<Expr> items;
    bool anchored_start = false, anchored_end = false;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (!top || !items.empty() || anchored_start) return unsupported_construct("'^' inside the pattern");
        anchored_start = true;
        ++i_;
        continue;
      }
      if (peek() == '$') {
        ++i_;
        if (!top || !(at_end() || peek() == '|')) return unsupported_construct("'$' inside the pattern");
        anchored_end = true;
        continue;
      }
      FG_ASSIGN_OR_RETURN(Expr atom, parse_atom());
      FG_ASSIGN_OR_RETURN(Expr rep, parse_quantifiers(std::move(atom)));
      items.push_back(std::move(rep));
    }
    if (top && o_.search) {
      if (!anchored_start) items.insert(items.begin(), any_text());
      if (!anchored_end) items.push_back(any_text());
    }
    return Expr::seq(std::move(items));
  }

  Result<Expr> parse_quantifiers(Expr atom) {
    for (;;) {
      if (at_end()) return atom;
      int min = 0, max = 0;
      const char c = peek();
      if (c == '*') {
        min = 0, max = Expr::kUnbounded;
        ++i_;
      } else if (c == '+') {
        min = 1, max = Expr::kUnbounded;
        ++i_;
      } else if (c == '?') {
        min = 0, max = 1;
        ++i_;
      } else if (c == '{') {
        size_t j = i_ + 1;
        auto number = [&](int& out) {
          const size_t start = j;
          long long v = 0;
          while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
            v = v * 10 + (p_[j] - '0');
            if (v > 100000) v = 100000;
            ++j;
          }
          out = int(v);
          return j > start;
        };
        if (!number(min)) return atom;  // a literal '{' (as ECMA-262 Annex B and Python read it)
        max = min;
        if (j < p_.size() && p_[j] == ',') {
          ++j;
          if (!number(max)) max = Expr::kUnbounded;
        }
        if (j >= p_.size() || p_[j] != '}') return atom;
        if (max != Expr::kUnbounded && max < min) return error("repetition {m,n} with n < m");
        i_ = j + 1;
      } else {
        return atom;
      }
      if (!at_end() && peek() == '?') ++i_;  // lazy: the same strings
      if (!at_end() && peek() == '+') return unsupported_construct("possessive quantifier");
      atom = Expr::repeat(std::move(atom), min, max);
    }
  }

  Result<Expr> parse_atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (!at_end() && peek() == '?') {
        ++i_;
        if (at_end()) return error("unterminated group");
        if (peek() == ':') {
          ++i_;
        } else if (peek() == '<' || (peek() == 'P' && i_ + 1 < p_.size() && p_[i_ + 1] == '<')) {
          if (peek() == 'P') ++i_;
          if (i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!'))
            return unsupported_construct("lookbehind");
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) return error("unterminated group name");
          i_ = close + 1;
        } else if (peek() == '=' || peek() == '!') {
          return unsupported_construct("lookahead");
        } else {
          return unsupported_construct("group modifier '(?" + std::string(1, peek()) + "'");
        }
      }
      std::vector<Expr> alts;
      for (;;) {
        FG_ASSIGN_OR_RETURN(Expr seq, parse_sequence(false));
        alts.push_back(std::move(seq));
        if (at_end()) return error("unterminated group");
        if (peek() == '|') {
          ++i_;
          continue;
        }
        ++i_;  // ')'
        return Expr::alt(std::move(alts));
      }
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return chars(any_but_newlines());
    }
    if (c == '*' || c == '+' || c == '?') return error("quantifier without anything to repeat");
    if (c == '\\') {
      FG_ASSIGN_OR_RETURN(CharSet s, parse_escape(/*in_class=*/false));
      return chars(s);
    }
    size_t j = i_;
    const uint32_t cp = uint32_t(tok::utf8_next(p_, j));
    i_ = j;
    return chars(CharSet::of(cp));
  }

  // After '\'. Returns the set the escape stands for.
  Result<CharSet> parse_escape(bool in_class) {
    ++i_;
    if (at_end()) return error("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return ascii_digits();
      case 'D': return ascii_complement(ascii_digits());
      case 'w': return ascii_word();
      case 'W': return ascii_complement(ascii_word());
      case 's': return ascii_space();
      case 'S': return ascii_complement(ascii_space());
      case 'n': return CharSet::of('\n');
      case 't': return CharSet::of('\t');
      case 'r': return CharSet::of('\r');
      case 'f': return CharSet::of('\f');
      case 'v': return CharSet::of('\v');
      case '0': return CharSet::of(0);
      case 'b':
        if (in_class) return CharSet::of('\b');
        --i_;
        return unsupported_construct("word boundary '\\b'");
      case 'B': --i_; return unsupported_construct("word boundary '\\B'");
      case 'x': {
        uint32_t v = 0;
        if (!hex(2, v)) return error("\\x needs two hex digits");
        return CharSet::of(v);
      }
      case 'u': {
        uint32_t v = 0;
        if (!at_end() && peek() == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos || close == i_ + 1 || close - i_ - 1 > 6) return error("bad \\u{...}");
          ++i_;
          if (!hex(close - i_, v)) return error("bad \\u{...}");
          ++i_;
        } else if (!hex(4, v)) {
          return error("\\u needs four hex digits");
        }
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return error("\\u escape is not a character");
        return CharSet::of(v);
      }
      case 'p':
      case 'P': --i_; return unsupported_construct("Unicode property '\\" + std::string(1, c) + "'");
      case 'A':
      case 'Z':
      case 'z':
      case 'G': --i_; return unsupported_construct("anchor '\\" + std::string(1, c) + "'");
      case 'c': --i_; return unsupported_construct("control escape '\\c'");
      case 'k': --i_; return unsupported_construct("backreference '\\k'");
      default: break;
    }
    if (c >= '1' && c <= '9') {
      --i_;
      return unsupported_construct("backreference");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      --i_;
      return unsupported_construct("escape '\\" + std::string(1, c) + "'");
    }
    // An escaped punctuation or other character stands for itself.
    size_t j = i_ - 1;
    const uint32_t cp = uint32_t(tok::utf8_next(p_, j));
    i_ = j;
    return CharSet::of(cp);
  }

  bool hex(size_t n, uint32_t& v) {
    v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (at_end()) return false;
      const char h = p_[i_];
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) return false;
      v = v * 16 + uint32_t(d);
      ++i_;
    }
    return true;
  }

  Result<Expr> parse_class() {
    ++i_;  // '['
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++i_;
    }
    CharSet set;
    bool first = true;
    for (;;) {
      if (at_end()) return error("unterminated character class");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      if (peek() == ']') return unsupported_construct("empty character class");
      if (peek() == '[' && i_ + 1 < p_.size() && (p_[i_ + 1] == ':' || p_[i_ + 1] == '=' || p_[i_ + 1] == '.'))
        return unsupported_construct("POSIX class");
      first = false;
      uint32_t lo = 0;
      bool single = true;
      if (peek() == '\\') {
        FG_ASSIGN_OR_RETURN(CharSet s, parse_escape(/*in_class=*/true));
        if (s.ranges().size() == 1 && s.ranges()[0].first == s.ranges()[0].second) {
          lo = s.ranges()[0].first;
        } else {
          set.add(s);
          single = false;
        }
      } else {
        size_t j = i_;
        lo = uint32_t(tok::utf8_next(p_, j));
        i_ = j;
      }
      if (!single) continue;
      // A range lo-hi, unless '-' ends the class.
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (peek() == '\\') {
          FG_ASSIGN_OR_RETURN(CharSet s, parse_escape(true));
          if (s.ranges().size() != 1 || s.ranges()[0].first != s.ranges()[0].second)
            return error("class range ends in a class escape");
          hi = s.ranges()[0].first;
        } else {
          size_t j = i_;
          hi = uint32_t(tok::utf8_next(p_, j));
          i_ = j;
        }
        if (hi < lo) return error("class range out of order");
        set.add(lo, hi);
      } else {
        set.add(lo, lo);
      }
    }
    if (negate) set = set.complement();
    if (set.empty()) return error("character class matches nothing");
    return chars(set);
  }

  std::string_view p_;
  RegexOptions o_;
  size_t i_ = 0;
};

}  // namespace

Expr json_string_chars(const CharSet& set) {
  CharSet special;
  special.add(0, 0x1F).add('"', '"').add('\\', '\\');
  std::vector<Expr> alts;
  const CharSet raw = set.minus(special);
  if (!raw.empty()) alts.push_back(Expr::chars(raw));
  for (auto [lo, hi] : set.ranges()) {
    for (uint32_t c = lo; c <= hi && c <= 0x5C; ++c) {
      if (!special.contains(c)) continue;
      switch (c) {
        case '"': alts.push_back(Expr::literal("\\\"")); break;
        case '\\': alts.push_back(Expr::literal("\\\\")); break;
        case '\n': alts.push_back(Expr::literal("\\n")); break;
        case '\t': alts.push_back(Expr::literal("\\t")); break;
        case '\r': alts.push_back(Expr::literal("\\r")); break;
        case '\b': alts.push_back(Expr::literal("\\b")); break;
        case '\f': alts.push_back(Expr::literal("\\f")); break;
        default: {
          static const char* kHex = "0123456789abcdef";
          alts.push_back(Expr::literal(std::string("\\u00") + kHex[c >> 4] + kHex[c & 15]));
        }
      }
    }
  }
  return Expr::alt(std::move(alts));
}

Result<Expr> regex_expr(std::string_view pattern, const RegexOptions& options) {
  return RegexParser(pattern, options).parse();
}

Result<Grammar> compile_regex(std::string_view pattern, const GrammarLimits& limits) {
  FG_ASSIGN_OR_RETURN(Expr e, regex_expr(pattern, {}));
  GrammarBuilder b(limits);
  const int32_t root = b.add_rule("regex", std::move(e));
  return b.build(root);
}

}  // namespace fg::grammar
