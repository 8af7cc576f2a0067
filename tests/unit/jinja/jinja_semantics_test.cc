// Jinja2 semantics that chat templates depend on. Every expected string here was produced by
// Python Jinja2 3.1.6 with transformers' settings (trim_blocks, lstrip_blocks, loopcontrols).
#include <gtest/gtest.h>

#include <string>

#include "jinja/template.h"

namespace fg::jinja {
namespace {

Dict test_vars() {
  Dict d;
  d.set("xs", Value::from_json(nlohmann::ordered_json::parse("[1, 2, 3]")));
  d.set("d", Value::from_json(nlohmann::ordered_json::parse(R"({"a": 1, "items": 5})")));
  d.set("s", Value::string("h\xc3\xa9llo"));
  return d;
}

std::string render(const std::string& src) {
  auto t = Template::parse(src);
  if (!t.is_ok()) return "PARSE-ERROR " + t.status().message();
  auto r = t->render(test_vars());
  if (!r.is_ok()) return "ERROR " + r.status().message();
  return r.value();
}

bool fails(const std::string& src) {
  return render(src).rfind("ERROR", 0) == 0 || render(src).rfind("PARSE-ERROR", 0) == 0;
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if 1 %}\nx\n  {% endif %}\nb"), "a\nx\nb");
  EXPECT_EQ(render("{{ 'a' }}  {% if 1 %}x{% endif %}"), "a  x");
  EXPECT_EQ(render("  {# c #}\nz"), "z");
  EXPECT_EQ(render("a\n{%- if 1 -%}\n  b  \n{%- endif %}\nc\n"), "abc");
  EXPECT_EQ(render("x {%+ if 1 %}y{% endif +%}\nz"), "x y\nz");
  EXPECT_EQ(render("{% raw %}\n {{x}}{% endraw %}\n!"), "\n {{x}}!");
  EXPECT_EQ(render("{{ 1 }}\n  {% if 1 %}y{%endif%}"), "1\ny");
  EXPECT_EQ(render("line\r\nnext\r\n"), "line\nnext");
}

TEST(JinjaExpressions, Literals) {
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
  EXPECT_EQ(render("{{ '\\\xc3\xa9\\d\\x41' }}"), "\\xe9\\dA");
  EXPECT_EQ(render("{{ (1,2) }} {{ (1,) }} {{ {\"a\": [1, \"b\", none, true]} }} {{ \"it's\" }} {{ [\"a\\\"b\"] }}"),
            "(1, 2) (1,) {'a': [1, 'b', None, True]} it's ['a\"b']");
  EXPECT_EQ(render("{{ 'a' 'b' }}"), "ab");
}

TEST(JinjaExpressions, Arithmetic) {
  EXPECT_EQ(render("{{ 1/2 }} {{ 7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 0.1+0.2 }}"),
            "0.5 3 2 1024 1.0 1e+20 1e+16 0.30000000000000004");
  EXPECT_EQ(render("{{ \"a\" * 3 }}{{ 3 * \"a\" }}{{ [1] * 2 }}{{ True + 1 }}"), "aaaaaa[1, 1]2");
  EXPECT_TRUE(fails("{{ 5 // 0 }}"));
  EXPECT_EQ(render("{{ \"%s-%d\" % (\"a\", 3) }}"), "a-3");
  EXPECT_TRUE(fails("{{ 'a' + 1 }}"));
}

TEST(JinjaExpressions, AttributesItemsSlices) {
  EXPECT_EQ(render("{{ d.items()|list }}{{ d[\"items\"] }}"), "[('a', 1), ('items', 5)]5");
  EXPECT_EQ(render("{{ s[1:3] }}{{ s|length }}{{ xs[::-1] }}"), "\xc3\xa9l5[3, 2, 1]");
  EXPECT_EQ(render("{{ xs.0 }}{{ \"abc\".1 }}"), "1b");
  EXPECT_EQ(render("{{ none.x }}|{{ d.nope }}|{{ xs[10] }}"), "||");
  EXPECT_TRUE(fails("{{ (none.x).y }}"));
  EXPECT_TRUE(fails("{{ undefined_x.y }}"));
  EXPECT_EQ(render("{{ 3 in d }}{{ 'a' in d }}{{ 'él' in s }}"), "FalseTrueTrue");
}

TEST(JinjaStatements, LoopScopingAndMacros) {
  EXPECT_EQ(render("{% set y = 0 %}{% for x in xs %}{{ y }}{% set y = x %}{{ y }}|{% endfor %}{{ y }}"), "01|02|03|0");
  EXPECT_EQ(render("{% for x in xs %}{% if loop.first %}{% set z = 5 %}{% endif %}{{ z }},{% endfor %}"), "5,,,");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ y }}{% endmacro %}{% set y = 1 %}{{ m(1) }}{% set y = 3 %}{{ "
                   "m(1, b=5) }}"),
            "121153");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}{% else %}none{% endfor %}"), "1/22/2");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x "
                   "}}{% endfor %}"),
            "1");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;items=5;");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem is defined }}{{ loop.revindex }}{% endfor %}"),
            "False3True2True1");
  EXPECT_EQ(render("{% set t %}a{{ 1 }}{% endset %}{{ t }}|{% filter upper %}abc{% endfilter %}"), "a1|ABC");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"), "[in]");
}

TEST(JinjaFilters, Common) {
  EXPECT_EQ(render("{{ xs|map(\"string\")|join(\",\") }} {{ xs|select(\"odd\")|list }}"), "1,2,3 [1, 3]");
  EXPECT_EQ(render("{{ \"hello world-foo(bar)\"|title }}|{{ \"  a\\n b\"|indent(2) }}|{{ \"a\\n\\nb\"|indent(2, true) "
                   "}}|{{ \"a\\nb\\n\"|indent(2) }}"),
            "Hello World-Foo(Bar)|  a\n   b|  a\n\n  b|a\n  b\n");
  EXPECT_EQ(render("{{ [3,1,2]|sort }}{{ [\"b\",\"A\",\"a\"]|sort }}{{ [\"b\",\"A\",\"a\"]|unique|list }}{{ "
                   "{\"b\":1,\"A\":2}|dictsort }}"),
            "[1, 2, 3]['A', 'a', 'b']['b', 'A'][('A', 2), ('b', 1)]");
  EXPECT_EQ(render("{{ 2.5|round }}{{ 3|round }}{{ -2.5|round }}{{ 2.675|round(2) }}{{ 7|round(0,\"floor\") }}"),
            "2.03-2.02.677.0");
  EXPECT_EQ(render("{{ \"42.7\"|int }}{{ \" 12 \"|int }}{{ \"abc\"|int }}{{ 3.9|int }}{{ \"1e3\"|int }}{{ "
                   "\"0x1A\"|int(base=16) }}"),
            "421203100026");
  EXPECT_EQ(render("{{ [1,2,3]|sum }}{{ [1,2,3]|max }}{{ \"abc\"|list }}{{ xs|batch(2)|list }}"),
            "63['a', 'b', 'c'][[1, 2], [3]]");
  EXPECT_EQ(render("{{ \"a b  c\"|wordcount }}{{ \"ab\"|center(6) }}|"), "3  ab  |");
  EXPECT_EQ(render("{{ {'k': 'é', 'n': [1, 2.0, none, true]}|tojson }}"),
            "{\"k\": \"é\", \"n\": [1, 2.0, null, true]}");
  EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ undefined_thing|default('x') }}{{ ''|default('y', true) }}{{ '  t '|trim }}"), "xyt");
  EXPECT_TRUE(fails("{{ undefined_thing|tojson }}"));
  EXPECT_TRUE(fails("{{ xs|map(\"string\")|length }}"));  // a generator has no len()
}

TEST(JinjaTests, Common) {
  EXPECT_EQ(render("{{ x is iterable }}{{ x is sequence }}{{ none is iterable }}"), "TrueTrueFalse");
  EXPECT_EQ(render("{{ d is mapping }}{{ s is string }}{{ 1 is number }}{{ true is boolean }}{{ 4 is divisibleby 2 }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ none is none }}{{ 1 is odd }}{{ 'a' is not defined }}{{ xs is not mapping }}"),
            "TrueTrueFalseTrue");
}

TEST(JinjaSandbox, MutatingMethodsAreRefused) {
  EXPECT_TRUE(fails("{% set l = [] %}{% set _ = l.append(1) %}"));
  EXPECT_TRUE(fails("{% set _ = d.pop('a') %}"));
  EXPECT_EQ(render("{{ raise_exception is defined }}"), "True");
  auto r = Template::parse("{{ raise_exception('no system role') }}")->render(test_vars());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no system role"), std::string::npos);
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  auto t = Template::parse("a\nb\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("line 4"), std::string::npos) << t.status().message();
  EXPECT_FALSE(Template::parse("{% for x in y %}").is_ok());
  EXPECT_FALSE(Template::parse("{% endif %}").is_ok());
  EXPECT_FALSE(Template::parse("{{ 'unterminated }}").is_ok());
  EXPECT_FALSE(Template::parse("{% include 'x' %}").is_ok());
  EXPECT_FALSE(Template::parse("{% break %}").is_ok());
}

TEST(JinjaErrors, UndefinedAttributeNamesTheLine) {
  auto r = Template::parse("x\n{{ messages[0].content.text }}")->render(test_vars());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace fg::jinja
