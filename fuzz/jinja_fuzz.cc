// Fuzz target: flashgen's Jinja engine on random templates and random variables. The input is a
// template, then (after a line "#--vars--#") a JSON object of variables; parse and render must end
// in a result or an error, within the limits: no crash, no unbounded time (steps, calls, recursion
// are counted) and no unbounded memory (every string and the output are capped; bytes produced in
// one render are counted). Checks: an output never exceeds the output limit; a template that
// parses renders deterministically (twice, the same result).
// Seeds: fuzz/corpus/jinja (the constructs real chat templates use, loops, macros, recursion,
// filters, and hostile ones: runaway loops, exponential strings, deep nesting); dictionary:
// fuzz/dict/jinja.dict.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "jinja/template.h"

namespace {

fg::jinja::Limits fuzz_limits() {
  fg::jinja::Limits l;
  l.max_output_bytes = 64 << 10;
  l.max_work_bytes = 4 << 20;
  l.max_steps = 20000;
  l.max_call_depth = 32;
  l.max_nesting = 64;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fg::fuzz::FuzzInput in(data, size);
  const std::string_view source = in.until("\n#--vars--#\n");
  const std::string_view vars_text = in.rest();
  const fg::jinja::Limits limits = fuzz_limits();
  auto tpl = fg::jinja::Template::parse(source, limits);
  if (!tpl.is_ok()) return 0;
  fg::jinja::Dict vars;
  auto j = nlohmann::ordered_json::parse(vars_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) vars.set(it.key(), fg::jinja::Value::from_json(it.value()));
  }
  fg::jinja::RenderOptions opts;
  opts.limits = limits;
  opts.fixed_now = std::tm{};
  auto a = tpl->render(vars, opts);
  if (a.is_ok()) FG_FUZZ_CHECK(a->size() <= limits.max_output_bytes);
  auto b = tpl->render(vars, opts);
  FG_FUZZ_CHECK(a.is_ok() == b.is_ok());
  if (a.is_ok()) FG_FUZZ_CHECK(*a == *b);
  return 0;
}
