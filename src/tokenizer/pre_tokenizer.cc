// Pre-tokenizer implementations (see pre_tokenizer.h), following the behaviour of the Hugging
// Face components of the same names, including their split rules:
//  - a delimiter found by a regex is one match; a delimiter found by a character predicate is
//    one match per character;
//  - the behaviour decides whether delimiters are dropped, kept alone, or glued to a neighbour;
//  - empty pieces are dropped.
#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <optional>

#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

// GPT-2's pre-tokenization pattern, used by ByteLevel when use_regex is on.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Whitespace pre-tokenizer: words (\w as Hugging Face's Rust regex defines it: Alphabetic, marks,
// Nd, Pc, joiners) and runs of other non-space characters.
constexpr const char* kWhitespacePattern =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)";

struct ByteLevelTables {
  std::array<std::string, 256> to_char;
  std::array<int, 0x180> to_byte;  // byte-level characters are all below U+0180
  ByteLevelTables() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(to_char[b], c);
      to_byte[c] = b;
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables t;
  return t;
}

// One segment of a piece: [begin, end) and whether it is a delimiter match.
struct Segment {
  size_t begin, end;
  bool is_match;
};

// Applies `behavior` to the segments of one piece (which cover it exactly, in order) and appends
// the resulting non-empty pieces.
void emit_segments(const Piece& parent, std::vector<Segment>& segs, SplitBehavior behavior, bool invert,
                   std::vector<Piece>& out) {
  if (invert)
    for (auto& s : segs) s.is_match = !s.is_match;
  auto push = [&](size_t b, size_t e) {
    if (e > b) out.push_back({b, e, parent.at_origin && b == parent.begin});
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : segs)
        if (!s.is_match) push(s.begin, s.end);
      return;
    case SplitBehavior::kIsolated:
      for (const auto& s : segs) push(s.begin, s.end);
      return;
    case SplitBehavior::kMergedWithPrevious: {
      // A match is glued to the end of the previous segment (unless that was a match too).
      std::vector<std::pair<size_t, size_t>> acc;
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match && !prev_match && !acc.empty())
          acc.back().second = s.end;
        else
          acc.emplace_back(s.begin, s.end);
        prev_match = s.is_match;
      }
      for (auto& [b, e] : acc) push(b, e);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match is glued to the start of the next segment (unless that is a match too).
      std::vector<std::pair<size_t, size_t>> acc;
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const auto& s = segs[k];
        if (s.is_match && !prev_match && !acc.empty())
          acc.back().first = s.begin;
        else
          acc.emplace_back(s.begin, s.end);
        prev_match = s.is_match;
      }
      for (size_t k = acc.size(); k-- > 0;) push(acc[k].first, acc[k].second);
      return;
    }
    case SplitBehavior::kContiguous: {
      // Neighbouring segments of the same kind are joined.
      std::vector<std::pair<size_t, size_t>> acc;
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match == prev_match && !acc.empty())
          acc.back().second = s.end;
        else
          acc.emplace_back(s.begin, s.end);
        prev_match = s.is_match;
      }
      for (auto& [b, e] : acc) push(b, e);
      return;
    }
  }
}

// Splits every piece with a regex.
void split_regex(PieceBuffer& buf, const Regex& re, SplitBehavior behavior, bool invert) {
  std::vector<Piece> out;
  out.reserve(buf.pieces.size() * 2);
  std::vector<Segment> segs;
  for (const Piece& p : buf.pieces) {
    segs.clear();
    const std::string_view sub(buf.text.data() + p.begin, p.end - p.begin);
    size_t prev = 0;
    re.for_each_match(sub, [&](size_t b, size_t e) {
      if (prev != b) segs.push_back({p.begin + prev, p.begin + b, false});
      segs.push_back({p.begin + b, p.begin + e, true});
      prev = e;
    });
    if (prev != sub.size()) segs.push_back({p.begin + prev, p.end, false});
    emit_segments(p, segs, behavior, invert, out);
  }
  buf.pieces = std::move(out);
}

// Splits every piece on each character for which pred(c) holds.
template <class Pred>
void split_chars(PieceBuffer& buf, Pred pred, SplitBehavior behavior, bool invert) {
  std::vector<Piece> out;
  out.reserve(buf.pieces.size() * 2);
  std::vector<Segment> segs;
  const std::string_view text(buf.text);
  for (const Piece& p : buf.pieces) {
    segs.clear();
    size_t last = p.begin;
    size_t i = p.begin;
    while (i < p.end) {
      const size_t start = i;
      const char32_t c = utf8_next(text, i);
      if (pred(c)) {
        if (last < start) segs.push_back({last, start, false});
        segs.push_back({start, i, true});
        last = i;
      }
    }
    if (last < p.end) segs.push_back({last, p.end, false});
    emit_segments(p, segs, behavior, invert, out);
  }
  buf.pieces = std::move(out);
}

// Rewrites each piece with fn(piece_text, out_text), keeping piece boundaries.
template <class Fn>
void transform_pieces(PieceBuffer& buf, Fn fn) {
  std::string text;
  text.reserve(buf.text.size() + buf.text.size() / 2 + 16);
  for (Piece& p : buf.pieces) {
    const size_t b = text.size();
    fn(std::string_view(buf.text.data() + p.begin, p.end - p.begin), p, text);
    p.begin = b;
    p.end = text.size();
  }
  buf.text = std::move(text);
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(PieceBuffer& buf) const override {
    if (add_prefix_space_) {
      transform_pieces(buf, [](std::string_view s, const Piece&, std::string& out) {
        if (s.empty() || s[0] != ' ') out.push_back(' ');
        out.append(s);
      });
    }
    if (re_) split_regex(buf, *re_, SplitBehavior::kIsolated, false);
    const auto& t = byte_level_tables();
    transform_pieces(buf, [&](std::string_view s, const Piece&, std::string& out) {
      for (unsigned char b : s) out.append(t.to_char[b]);
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null when use_regex is off
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior b, bool invert)
      : re_(std::move(re)), behavior_(b), invert_(invert) {}
  void pre_tokenize(PieceBuffer& buf) const override { split_regex(buf, *re_, behavior_, invert_); }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    utf8_append(rep_, replacement);
  }
  void pre_tokenize(PieceBuffer& buf) const override {
    transform_pieces(buf, [&](std::string_view s, const Piece& p, std::string& out) {
      const bool starts_with_rep = s.substr(0, 1) == " " || s.substr(0, rep_.size()) == rep_;
      if (!starts_with_rep && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_origin)))
        out.append(rep_);
      for (char c : s) {
        if (c == ' ')
          out.append(rep_);
        else
          out.push_back(c);
      }
    });
    if (split_) {
      const char32_t rep = replacement_;
      split_chars(
          buf, [rep](char32_t c) { return c == rep; }, SplitBehavior::kMergedWithNext, false);
    }
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

template <class Pred>
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(Pred pred, SplitBehavior b) : pred_(pred), behavior_(b) {}
  void pre_tokenize(PieceBuffer& buf) const override { split_chars(buf, pred_, behavior_, false); }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <class Pred>
std::unique_ptr<PreTokenizer> make_char_split(Pred pred, SplitBehavior b) {
  return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer<Pred>(pred, b));
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(PieceBuffer& buf) const override {
    for (const auto& p : parts_) p->pre_tokenize(buf);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<SplitBehavior> parse_behavior(const nlohmann::json& j, SplitBehavior dflt, const std::string& ctx) {
  std::string name;
  FG_RETURN_IF_ERROR(json_get(j, "behavior", name, ctx));
  if (name.empty()) return dflt;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument(ctx + ": unknown split behavior '" + name + "'");
}

}  // namespace

const std::string& byte_level_char(unsigned char b) {
  return byte_level_tables().to_char[b];
}

int byte_level_byte(char32_t c) {
  return c < 0x180 ? byte_level_tables().to_byte[c] : -1;
}

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  const std::string type = component_type(j);
  const std::string ctx = where + ": pre_tokenizer " + type;
  if (type == "ByteLevel") {
    bool add_prefix_space = true, use_regex = true;
    FG_RETURN_IF_ERROR(json_get(j, "add_prefix_space", add_prefix_space, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "use_regex", use_regex, ctx));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      FG_ASSIGN_OR_RETURN(re, Regex::compile(kByteLevelPattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(add_prefix_space, std::move(re)));
  }
  if (type == "Split") {
    if (!j.contains("pattern")) return invalid_argument(ctx + ": missing 'pattern'");
    FG_ASSIGN_OR_RETURN(auto re, compile_pattern(j["pattern"], ctx));
    FG_ASSIGN_OR_RETURN(auto behavior, parse_behavior(j, SplitBehavior::kIsolated, ctx));
    bool invert = false;
    FG_RETURN_IF_ERROR(json_get(j, "invert", invert, ctx));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), behavior, invert));
  }
  if (type == "Metaspace") {
    std::string replacement = "\u2581", scheme_name;
    bool split = true;
    std::optional<bool> add_prefix_space;
    FG_RETURN_IF_ERROR(json_get(j, "replacement", replacement, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "prepend_scheme", scheme_name, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "split", split, ctx));
    if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean())
      add_prefix_space = j["add_prefix_space"].get<bool>();
    size_t i = 0;
    if (replacement.empty() || (utf8_next(replacement, i), i != replacement.size()))
      return invalid_argument(ctx + ": 'replacement' must be exactly one character");
    i = 0;
    const char32_t rep = utf8_next(replacement, i);
    PrependScheme scheme = PrependScheme::kAlways;
    if (scheme_name == "first")
      scheme = PrependScheme::kFirst;
    else if (scheme_name == "never")
      scheme = PrependScheme::kNever;
    else if (scheme_name == "always")
      scheme = PrependScheme::kAlways;
    else if (!scheme_name.empty())
      return invalid_argument(ctx + ": unknown prepend_scheme '" + scheme_name + "'");
    else if (add_prefix_space && !*add_prefix_space)
      scheme = PrependScheme::kNever;
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(rep, scheme, split));
  }
  if (type == "Digits") {
    bool individual = false;
    FG_RETURN_IF_ERROR(json_get(j, "individual_digits", individual, ctx));
    return make_char_split(&unicode_is_numeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    FG_ASSIGN_OR_RETURN(auto behavior, parse_behavior(j, SplitBehavior::kIsolated, ctx));
    return make_char_split(&unicode_is_punctuation, behavior);
  }
  if (type == "WhitespaceSplit") return make_char_split(&unicode_is_whitespace, SplitBehavior::kRemoved);
  if (type == "Whitespace") {
    FG_ASSIGN_OR_RETURN(auto re, Regex::compile(kWhitespacePattern));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), SplitBehavior::kRemoved, true));
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(make_char_split(&unicode_is_whitespace, SplitBehavior::kRemoved));
    parts.push_back(make_char_split(&unicode_is_punctuation, SplitBehavior::kIsolated));
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return invalid_argument(ctx + ": 'pretokenizers' must be a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& sub : j["pretokenizers"]) {
      FG_ASSIGN_OR_RETURN(auto p, make_pre_tokenizer(sub, where));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return component_unsupported(where, "pre_tokenizer", type);
}

}  // namespace fg::tok
