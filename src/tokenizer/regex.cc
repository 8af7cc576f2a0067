// PCRE2 wrapper (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace fg::tok {

namespace {

// JIT stack shared per thread: the default 32 KiB is too small for long runs matched by
// patterns with look-ahead; 4 MiB is plenty for any tokenizer regex.
pcre2_jit_stack* thread_jit_stack() {
  struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 4 * 1024 * 1024, nullptr);
    ~Holder() {
      if (stack) pcre2_jit_stack_free(stack);
    }
  };
  thread_local Holder holder;
  return holder.stack;
}

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-#/ \t\n\r\f\v").find(c) != std::string_view::npos) {
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      if (c == '\t') {
        out += "\\t";
        continue;
      }
      if (c == '\r') {
        out += "\\r";
        continue;
      }
      if (c == '\f') {
        out += "\\f";
        continue;
      }
      if (c == '\v') {
        out += "\\x0b";
        continue;
      }
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

// Oniguruma's Unicode \w differs from PCRE2's (letters, numbers, underscore): it takes letters,
// all marks, Nd, Nl, Pc, and of the other numbers (No) only the Latin-1 ones (² ³ ¹ ¼ ½ ¾), as
// observed through Hugging Face tokenizers. Spelled out so that both engines split alike.
constexpr std::string_view kOnigWordClass = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";

std::string translate_onig(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 'w') {
        if (in_class)
          out += kOnigWordClass;
        else
          out += "[" + std::string(kOnigWordClass) + "]";
      } else if (n == 'W' && !in_class) {
        out += "[^" + std::string(kOnigWordClass) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Regex>> Regex::compile(const std::string& onig_pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  const std::string pattern = translate_onig(onig_pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return invalid_argument("cannot compile regex '" + onig_pattern + "' at offset " + std::to_string(err_off) + ": " +
                            reinterpret_cast<const char*>(buf));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = onig_pattern;
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Result<std::unique_ptr<Regex>> Regex::compile_literal(std::string_view literal) {
  return compile(escape_literal(literal));
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::MatchState::MatchState(const Regex& re)
    : match_data(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re.code_), nullptr)) {
  FG_CHECK(match_data != nullptr, "out of memory allocating PCRE2 match data");
}

Regex::MatchState::~MatchState() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

bool Regex::find(MatchState& st, std::string_view subject, size_t start, std::pair<size_t, size_t>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(st.match_data);
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc;
  if (jit_) {
    rc = pcre2_jit_match(code, subj, subject.size(), start, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(ctx, nullptr, thread_jit_stack());
      rc = pcre2_jit_match(code, subj, subject.size(), start, 0, md, ctx);
      pcre2_match_context_free(ctx);
    }
  } else {
    rc = pcre2_match(code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  }
  if (rc < 0) return false;  // no match, or an engine limit: stop searching
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  out = {ov[0], ov[1]};
  return out.second >= out.first && out.second <= subject.size();
}

std::string Regex::replace_all(std::string_view subject, std::string_view replacement) const {
  std::string out;
  size_t prev = 0;
  for_each_match(subject, [&](size_t b, size_t e) {
    out.append(subject.substr(prev, b - prev));
    out.append(replacement);
    prev = e;
  });
  out.append(subject.substr(prev));
  return out;
}

}  // namespace fg::tok
