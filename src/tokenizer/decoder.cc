// Decoder implementations (see decoder.h).
#include "tokenizer/decoder.h"

#include "tokenizer/component_json.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

// Maps byte-level characters back to bytes and joins everything into one string, repairing
// invalid UTF-8 with U+FFFD. A token holding a character outside the byte-level alphabet
// (e.g. an added token with a space) is taken as raw text.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        const int b = byte_level_byte(utf8_next(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens.assign(1, utf8_is_valid(bytes) ? std::move(bytes) : utf8_sanitize(bytes));
  }
};

// Turns runs of <0xNN> tokens back into the bytes they stand for; a run that is not valid
// UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8_is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending_count; ++k) out.emplace_back(kReplacementUtf8);
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex(t[3], t[4]);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int parse_hex(char a, char b) {
    const int hi = hex_digit(a), lo = hex_digit(b);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one character per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && b < e; ++k) {
        size_t i = b;
        if (utf8_next(t, i) != content_) break;
        b = i;
      }
      for (size_t k = 0; k < stop_ && e > b; ++k) {
        size_t i = e;
        if (utf8_prev(t, i) != content_) break;
        e = i;
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = re_->replace_all(t, content_);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

// The replacement character becomes a space; in the first token it is dropped instead (unless
// the prepend scheme is "never"), undoing the prefix the pre-tokenizer added.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first) : replacement_(replacement), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      size_t i = 0;
      while (i < t.size()) {
        const size_t s = i;
        const char32_t c = utf8_next(t, i);
        if (c == replacement_) {
          if (!(k == 0 && strip_first_)) out.push_back(' ');
        } else {
          out.append(t, s, i - s);
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

Result<char32_t> single_char(const std::string& s, const std::string& ctx, const char* field) {
  size_t i = 0;
  if (s.empty()) return invalid_argument(ctx + ": '" + field + "' must be one character");
  const char32_t c = utf8_next(s, i);
  if (i != s.size()) return invalid_argument(ctx + ": '" + field + "' must be one character");
  return c;
}

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = component_type(j);
  const std::string ctx = where + ": decoder " + type;
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    std::string content = " ";
    int64_t start = 0, stop = 0;
    FG_RETURN_IF_ERROR(json_get(j, "content", content, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "start", start, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "stop", stop, ctx));
    FG_ASSIGN_OR_RETURN(const char32_t c, single_char(content, ctx, "content"));
    if (start < 0 || stop < 0) return invalid_argument(ctx + ": 'start' and 'stop' must be >= 0");
    return std::unique_ptr<Decoder>(new StripDecoder(c, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    std::string content;
    FG_RETURN_IF_ERROR(json_get(j, "content", content, ctx));
    if (!j.contains("pattern")) return invalid_argument(ctx + ": missing 'pattern'");
    FG_ASSIGN_OR_RETURN(auto re, compile_pattern(j["pattern"], ctx));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(re), std::move(content)));
  }
  if (type == "Metaspace") {
    std::string replacement = "\u2581", scheme;
    FG_RETURN_IF_ERROR(json_get(j, "replacement", replacement, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "prepend_scheme", scheme, ctx));
    bool add_prefix_space = true;
    FG_RETURN_IF_ERROR(json_get(j, "add_prefix_space", add_prefix_space, ctx));
    FG_ASSIGN_OR_RETURN(const char32_t c, single_char(replacement, ctx, "replacement"));
    const bool strip_first = scheme.empty() ? add_prefix_space : scheme != "never";
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(c, strip_first));
  }
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      return invalid_argument(ctx + ": 'decoders' must be a list");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& sub : j["decoders"]) {
      FG_ASSIGN_OR_RETURN(auto p, make_decoder(sub, where));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return component_unsupported(where, "decoder", type);
}

}  // namespace fg::tok
