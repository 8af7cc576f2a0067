// GBNF text -> Grammar (see gbnf.h). A recursive-descent parser over the text; rule names are
// resolved after the whole text is read so rules may be used before they are defined.
#include "grammar/gbnf.h"

#include <map>
#include <string>

#include "grammar/expr.h"
#include "tokenizer/utf8.h"

namespace fg::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& limits) : t_(text), b_(limits) {}

  Result<Grammar> parse() {
    if (!tok::utf8_is_valid(t_)) return invalid_argument("GBNF grammar is not valid UTF-8");
    skip_space(true);
    while (!at_end()) {
      const size_t name_at = i_;
      const std::string name = parse_name();
      if (name.empty()) return error("expected a rule name");
      skip_space(true);
      if (t_.substr(i_, 3) != "::=") {
        i_ = name_at;
        return error("expected '::=' after rule name '" + name + "'");
      }
      i_ += 3;
      skip_space(true);
      const int32_t id = rule(name);
      if (defined_.count(name)) return error("rule '" + name + "' is defined twice");
      defined_[name] = line_;
      FG_ASSIGN_OR_RETURN(Expr body, parse_alternatives(/*nested=*/false));
      b_.set_body(id, std::move(body));
      if (b_.over_limit()) return invalid_argument("GBNF grammar too large");
      skip_space(true);
    }
    for (const auto& [name, id] : ids_)
      if (!defined_.count(name)) return invalid_argument("GBNF: undefined rule '" + name + "'");
    auto root = ids_.find("root");
    if (root == ids_.end()) return invalid_argument("GBNF: the grammar has no 'root' rule");
    return b_.build(root->second);
  }

 private:
  bool at_end() const { return i_ >= t_.size(); }
  char peek() const { return t_[i_]; }
  Status error(const std::string& what) const {
    return invalid_argument("GBNF line " + std::to_string(line_) + ": " + what);
  }

  int32_t rule(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = b_.add_rule(name);
    ids_[name] = id;
    return id;
  }

  // Spaces and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '\n' && newlines) {
        ++line_;
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && is_name_char(peek())) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  // True when the text at i_ (after spaces) starts a new rule: `name ::=`.
  bool at_rule_start() {
    size_t j = i_;
    while (j < t_.size() && is_name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\r' || t_[j] == '\n')) ++j;
    return t_.substr(j, 3) == "::=";
  }

  // Alternatives end at ')' (nested) or, at top level, where the next rule starts or the text ends.
  Result<Expr> parse_alternatives(bool nested) {
    std::vector<Expr> alts;
    for (;;) {
      FG_ASSIGN_OR_RETURN(Expr seq, parse_sequence(nested));
      alts.push_back(std::move(seq));
      skip_space(true);
      if (!at_end() && peek() == '|') {
        ++i_;
        skip_space(true);
        continue;
      }
      return Expr::alt(std::move(alts));
    }
  }

  Result<Expr> parse_sequence(bool nested) {
    std::vector<Expr> items;
    for (;;) {
      skip_space(true);
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (!nested && at_rule_start()) break;
      FG_ASSIGN_OR_RETURN(Expr item, parse_item());
      items.push_back(std::move(item));
    }
    if (nested && at_end()) return error("unterminated '('");
    return Expr::seq(std::move(items));
  }

  Result<Expr> parse_item() {
    FG_ASSIGN_OR_RETURN(Expr e, parse_primary());
    for (;;) {
      if (at_end()) return e;
      const char c = peek();
      if (c == '*') {
        ++i_;
        e = Expr::star(std::move(e));
      } else if (c == '+') {
        ++i_;
        e = Expr::plus(std::move(e));
      } else if (c == '?') {
        ++i_;
        e = Expr::optional(std::move(e));
      } else if (c == '{') {
        ++i_;
        skip_space(false);
        int min = 0, max = 0;
        if (!number(min)) return error("expected a number after '{'");
        skip_space(false);
        max = min;
        if (!at_end() && peek() == ',') {
          ++i_;
          skip_space(false);
          if (!number(max)) max = Expr::kUnbounded;
          skip_space(false);
        }
        if (at_end() || peek() != '}') return error("expected '}'");
        ++i_;
        if (max != Expr::kUnbounded && max < min) return error("repetition {m,n} with n < m");
        e = Expr::repeat(std::move(e), min, max);
      } else {
        return e;
      }
    }
  }

  bool number(int& out) {
    const size_t start = i_;
    long long v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = std::min<long long>(v * 10 + (peek() - '0'), 100000);
      ++i_;
    }
    out = int(v);
    return i_ > start;
  }

  Result<Expr> parse_primary() {
    const char c = peek();
    if (c == '"') {
      ++i_;
      std::string bytes;
      for (;;) {
        if (at_end() || peek() == '\n') return error("unterminated string literal");
        if (peek() == '"') {
          ++i_;
          break;
        }
        FG_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
        append_utf8(bytes, cp);
      }
      return Expr::literal(bytes);
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (!at_end() && peek() == '^') {
        negate = true;
        ++i_;
      }
      CharSet set;
      for (;;) {
        if (at_end() || peek() == '\n') return error("unterminated character class");
        if (peek() == ']') {
          ++i_;
          break;
        }
        FG_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
        uint32_t hi = lo;
        if (i_ + 1 < t_.size() && peek() == '-' && t_[i_ + 1] != ']') {
          ++i_;
          FG_ASSIGN_OR_RETURN(uint32_t h, parse_char());
          hi = h;
          if (hi < lo) return error("character range out of order");
        }
        set.add(lo, hi);
      }
      if (negate) set = set.complement();
      if (set.empty()) return error("character class matches nothing");
      return Expr::chars(set);
    }
    if (c == '(') {
      ++i_;
      skip_space(true);
      FG_ASSIGN_OR_RETURN(Expr inner, parse_alternatives(true));
      if (at_end() || peek() != ')') return error("expected ')'");
      ++i_;
      return inner;
    }
    if (c == '.') {
      ++i_;
      return Expr::chars(CharSet::all());
    }
    if (c == '<' || c == '!')
      return unsupported("GBNF line " + std::to_string(line_) + ": token references are not supported");
    if (is_name_char(c)) return Expr::call(rule(parse_name()));
    return error("unexpected '" + std::string(1, c) + "'");
  }

  // One character of a literal or class, with escapes.
  Result<uint32_t> parse_char() {
    if (peek() != '\\') {
      size_t j = i_;
      const uint32_t cp = uint32_t(tok::utf8_next(t_, j));
      i_ = j;
      return cp;
    }
    ++i_;
    if (at_end()) return error("trailing backslash");
    const char c = t_[i_++];
    switch (c) {
      case 'n': return uint32_t('\n');
      case 'r': return uint32_t('\r');
      case 't': return uint32_t('\t');
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '/':
      case '\'': return uint32_t(uint8_t(c));
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          if (at_end()) return error("short \\" + std::string(1, c) + " escape");
          const char h = peek();
          const int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (d < 0) return error("bad hex digit in \\" + std::string(1, c) + " escape");
          v = v * 16 + uint32_t(d);
          ++i_;
        }
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return error("escape is not a character");
        return v;
      }
      default: return error("unknown escape '\\" + std::string(1, c) + "'");
    }
  }

  std::string_view t_;
  GrammarBuilder b_;
  size_t i_ = 0;
  int line_ = 1;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, int> defined_;
};

}  // namespace

Result<Grammar> compile_gbnf(std::string_view text, const GrammarLimits& limits) {
  return GbnfParser(text, limits).parse();
}

}  // namespace fg::grammar
