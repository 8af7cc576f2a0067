// Hostile templates and inputs: random bytes, random token soup, deep nesting, runaway loops,
// recursion and exponential strings must end in an error (or a render) within the limits, never
// a crash or a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "jinja/template.h"

namespace fg::jinja {
namespace {

Limits small_limits() {
  Limits l;
  l.max_output_bytes = 1 << 20;
  l.max_work_bytes = 16 << 20;
  l.max_steps = 200000;
  l.max_call_depth = 64;
  return l;
}

Dict fuzz_vars() {
  Dict d;
  d.set(
      "messages",
      Value::from_json(nlohmann::ordered_json::parse(
          R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "x"}]}])")));
  d.set("tools", Value::none());
  d.set("add_generation_prompt", Value::boolean(true));
  return d;
}

// Parses and renders; returns true when both succeeded. Never throws.
bool try_template(const std::string& src) {
  Limits limits = small_limits();
  auto t = Template::parse(src, limits);
  if (!t.is_ok()) return false;
  RenderOptions opts;
  opts.limits = limits;
  auto r = t->render(fuzz_vars(), opts);
  if (r.is_ok()) {
    EXPECT_LE(r.value().size(), limits.max_output_bytes);
  }
  return r.is_ok();
}

TEST(TemplateFuzz, RandomBytes) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 200, '\0');
    // Half the inputs are printable ASCII so that they get past UTF-8 validation into the lexer.
    const bool ascii = i % 2 == 0;
    for (char& c : s) c = static_cast<char>(ascii ? 32 + rng() % 95 : rng() % 256);
    try_template(s);
  }
}

TEST(TemplateFuzz, RandomTokenSoup) {
  // A table; clang-format would put one piece per line.
  // clang-format off
  static const char* const kPieces[] = {
      "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " elif ", " else ", " endif ",
      " for ", " in ", " endfor ", " set ", " = ", " macro ", " endmacro ", " call ", " endcall ", " filter ",
      " endfilter ", " break ", " continue ", "x", "messages", "loop", "loop.index", ".", "[", "]", "(", ")",
      "{", "}", ",", ":", "|", " is ", " not ", " and ", " or ", "~", "+", "-", "*", "**", "/", "//", "%",
      "'a'", "\"b\"", "'\\x4", "1", "2.5", "1e400", "-1", "none", "true", "range(50)", "namespace(a=1)",
      "|tojson", "|length", "|join(',')", "|map(attribute='role')", "|list", "|first", "|indent(2)",
      "[::-1]", "[1:]", ".items()", ".split(' ')", "raise_exception('r')", " recursive ", "\n", "  ", "é",
      "{% raw %}", "{% endraw %}", "ns.a", "caller()", "varargs", "kwargs", "loop.cycle(1,2)"};
  // clang-format on
  std::mt19937 rng(42);
  const auto start = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    int n = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) s += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
    ok += try_template(s);
  }
  EXPECT_GT(ok, 0);  // the soup sometimes forms valid templates
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(TemplateFuzz, MutatedRealTemplate) {
  const std::string base =
      "{%- set ns = namespace(sys='') -%}{%- for m in messages -%}{%- if m.role == 'system' -%}"
      "{%- set ns.sys = m.content -%}{%- elif m.content is string -%}<|{{ m.role }}|>{{ m.content | trim }}\n"
      "{%- else -%}{%- for p in m.content -%}{{ p.text if p.type == 'text' else '' }}{%- endfor -%}"
      "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt %}<|assistant|>{% endif -%}";
  ASSERT_TRUE(try_template(base));
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0: s.erase(pos, 1 + rng() % 5); break;
        case 1: s.insert(pos, 1, "{}%#|()[]'\"-+~.,:= \n"[rng() % 20]); break;
        default: s[pos] = static_cast<char>(rng() % 128);
      }
      if (s.empty()) s = "x";
    }
    try_template(s);
  }
}

TEST(TemplateLimits, RunawayTemplatesStop) {
  auto fails_with = [](const std::string& src, const char* what) {
    Limits limits = small_limits();
    auto t = Template::parse(src, limits);
    if (!t.is_ok()) return t.status().message().find(what) != std::string::npos;
    RenderOptions opts;
    opts.limits = limits;
    auto r = t->render(fuzz_vars(), opts);
    return !r.is_ok() && r.status().message().find(what) != std::string::npos;
  };
  EXPECT_TRUE(fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "limit"));
  EXPECT_TRUE(fails_with("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "limit"));
  EXPECT_TRUE(fails_with("{{ 'a' * 1000000000 }}", "limit"));
  EXPECT_TRUE(fails_with("{{ [1] * 1000000000 }}", "limit"));
  EXPECT_TRUE(fails_with(
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "limit"));
  EXPECT_TRUE(fails_with("{{ range(1000000) }}", "Range too big"));
  EXPECT_TRUE(fails_with("{{ 2 ** 200 }}", "overflow"));
  EXPECT_TRUE(
      fails_with("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nested too deeply"));
  EXPECT_TRUE(fails_with("{{ " + std::string(100000, '-') + "1 }}", "nested too deeply"));
  EXPECT_FALSE(try_template("{{ " + std::string(5000, '[') + " }}"));  // unbalanced: a syntax error
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if 1 %}";
  EXPECT_TRUE(fails_with(deep_ifs, "nested too deeply"));
}

}  // namespace
}  // namespace fg::jinja
