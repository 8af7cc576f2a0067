// Normalizer implementations (see normalizer.h). Each mirrors the documented behaviour of the
// Hugging Face component of the same name.
#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/component_json.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm f) : form_(f) {}
  std::string normalize(std::string_view s) const override { return unicode_normalize(s, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view s) const override { return unicode_lowercase(s); }
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view s) const override { return unicode_strip_marks(s); }
};

// Removes leading and/or trailing whitespace (Unicode White_Space).
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!unicode_is_whitespace(utf8_next(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t i = e;
        if (!unicode_is_whitespace(utf8_prev(s, i))) break;
        e = i;
      }
    }
    return std::string(s.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

// Prepends a string to every non-empty input.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prefix_(std::move(p)) {}
  std::string normalize(std::string_view s) const override {
    if (s.empty()) return {};
    std::string out;
    out.reserve(prefix_.size() + s.size());
    out.append(prefix_);
    out.append(s);
    return out;
  }

 private:
  std::string prefix_;
};

// Replaces every match of a literal or a regex.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  std::string normalize(std::string_view s) const override {
    if (re_) return re_->replace_all(s, content_);
    std::string out;
    out.reserve(s.size() + s.size() / 8);
    size_t prev = 0;
    for (size_t pos; (pos = s.find(literal_, prev)) != std::string_view::npos; prev = pos + literal_.size()) {
      out.append(s.substr(prev, pos - prev));
      out.append(content_);
    }
    out.append(s.substr(prev));
    return out;
  }

 private:
  std::string literal_;  // used when re_ is null (a non-empty String pattern)
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string_view s) const override {
    std::string cur(s);
    for (const auto& p : parts_) cur = p->normalize(cur);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = component_type(j);
  const std::string ctx = where + ": normalizer " + type;
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    bool left = true, right = true;
    FG_RETURN_IF_ERROR(json_get(j, "strip_left", left, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "strip_right", right, ctx));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Prepend") {
    std::string prepend;
    FG_RETURN_IF_ERROR(json_get(j, "prepend", prepend, ctx));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prepend)));
  }
  if (type == "Replace") {
    std::string content;
    FG_RETURN_IF_ERROR(json_get(j, "content", content, ctx));
    if (!j.contains("pattern")) return invalid_argument(ctx + ": missing 'pattern'");
    std::string literal;
    if (pattern_literal(j["pattern"], literal) && !literal.empty())
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(literal), nullptr, std::move(content)));
    FG_ASSIGN_OR_RETURN(auto re, compile_pattern(j["pattern"], ctx));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer({}, std::move(re), std::move(content)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return invalid_argument(ctx + ": 'normalizers' must be a list");
    for (const auto& sub : j["normalizers"]) {
      FG_ASSIGN_OR_RETURN(auto p, make_normalizer(sub, where));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return component_unsupported(where, "normalizer", type);
}

}  // namespace fg::tok
