// What a render leaves behind: nothing. A render's frames, variables and macros are released when
// it ends, also when macros close over the frame they are stored in (a reference cycle that once
// leaked every frame of every render of such a template; found by the chat_template fuzz target
// under LeakSanitizer, input in fuzz/regressions/chat_template/).
#include <gtest/gtest.h>

#include <memory>

#include "jinja/template.h"

namespace fg::jinja {
namespace {

// A callable whose only job is to be referenced: its use_count tells who still holds it.
class Probe : public Callable {
 public:
  Value call(Interpreter&, CallArgs&) override { return Value::string("probe"); }
  std::string name() const override { return "probe"; }
};

long holders_after_render(const std::string& source) {
  auto probe = std::make_shared<Probe>();
  {
    Dict vars;
    vars.set("probe", Value::callable(probe));
    auto t = Template::parse(source);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    auto r = t->render(vars);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  }
  return probe.use_count();  // 1: only this function's pointer is left
}

TEST(JinjaResources, MacroInItsOwnFrameIsReleased) {
  EXPECT_EQ(holders_after_render("{% set p = probe %}{% macro m() %}{{ p() }}{% endmacro %}{{ m() }}"), 1);
}

TEST(JinjaResources, NestedMacrosAndCallBlocksAreReleased) {
  EXPECT_EQ(holders_after_render("{% set p = probe %}"
                                 "{% macro outer() %}{% set q = p %}{% macro inner() %}{{ q() }}{% endmacro %}"
                                 "{{ inner() }}{{ caller() }}{% endmacro %}"
                                 "{% call outer() %}{{ p() }}{% endcall %}"),
            1);
}

TEST(JinjaResources, MacroStoredInANamespaceIsReleased) {
  EXPECT_EQ(holders_after_render("{% set ns = namespace(f=none, p=probe) %}{% macro m() %}{{ ns.p() }}{% endmacro %}"
                                 "{% set ns.f = m %}{{ ns.f() }}"),
            1);
}

TEST(JinjaResources, RenderingTwiceGivesTheSameAndHoldsNothing) {
  auto probe = std::make_shared<Probe>();
  Dict vars;
  vars.set("probe", Value::callable(probe));
  auto t = Template::parse(
      "{% macro m(x) %}[{{ x }}{{ probe() }}]{% endmacro %}{% for i in range(3) %}{{ m(i) }}{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  const long before = probe.use_count();
  auto a = t->render(vars);
  auto b = t->render(vars);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*a, "[0probe][1probe][2probe]");
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(probe.use_count(), before);
}

// A namespace that holds itself (`set ns.x = ns`, a reference cycle that leaked the namespace and
// everything in it; found by the jinja fuzz target under LeakSanitizer) is released too.
TEST(JinjaResources, NamespaceHoldingItselfIsReleased) {
  EXPECT_EQ(holders_after_render("{% set ns = namespace(p=probe, me=none) %}{% set ns.me = ns %}"
                                 "{{ ns.me.me.p() }}"),
            1);
}

// An empty string or list repeated any number of times is empty at once: '' * 10^10 once spun
// ten billion empty appends under every limit (found by the jinja fuzz target as a timeout;
// input in fuzz/regressions/jinja/).
TEST(JinjaResources, EmptySequenceRepeatedHugelyIsImmediate) {
  auto t = Template::parse("[{{ 'x' * 0 * 10000000010 }}|{{ ([] * 10000000010) | length }}|{{ 'ab' * 2 }}]");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto r = t->render(Dict{});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, "[|0|abab]");
}

}  // namespace
}  // namespace fg::jinja
