// Fuzz target: real chat templates on random conversations. One byte picks one of the fixture
// chat templates (the 100 Hugging Face templates in tests/fixtures/chat_templates.tar.xz), one
// byte the options (add_generation_prompt, tools on or off); the rest is a JSON value used as the
// messages (and, after a line "#--tools--#", as the tools and chat_template_kwargs), as a client
// of /v1/chat/completions would send them. Rendering must end in a prompt or an error within the
// server's limits, never a crash or a hang. JSON nested deeper than the server accepts
// (--max-json-depth) is skipped: the server refuses it before rendering.
// Seeds: fuzz/corpus/chat_template (the fixture conversations: plain, system, multi-turn, tool
// calls, reasoning, content parts).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_util.h"
#include "server/request_body.h"
#include "tokenizer/chat_template.h"

namespace {

std::vector<fg::ChatTemplate> load_all() {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fg::fuzz::fixtures_dir() + "/chat_templates"))
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  const nlohmann::ordered_json special = {
      {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}};
  fg::jinja::Limits limits;  // what a rendering may cost in the fuzzer: far below the defaults
  limits.max_output_bytes = 256 << 10;
  limits.max_work_bytes = 16 << 20;
  limits.max_steps = 200000;
  std::vector<fg::ChatTemplate> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto t = fg::ChatTemplate::from_string(text, special);
    if (!t.is_ok()) continue;  // the parity tests cover which templates parse
    t->set_limits(limits);
    t->set_fixed_now(std::tm{});
    out.push_back(std::move(t).value());
  }
  FG_FUZZ_CHECK(out.size() >= 90);
  return out;
}

}  // namespace

// Loaded once, before the first input (loading takes seconds under the sanitizers and must not
// count against an input's time limit).
static std::vector<fg::ChatTemplate>* g_loaded = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  g_loaded = new std::vector<fg::ChatTemplate>(load_all());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<fg::ChatTemplate>& templates = *g_loaded;
  fg::fuzz::FuzzInput in(data, size);
  const fg::ChatTemplate& t = templates[in.byte() % templates.size()];
  const uint8_t opts = in.byte();
  using ojson = nlohmann::ordered_json;
  // The server refuses bodies nested deeper than --max-json-depth before any template sees them.
  if (fg::server::json_nesting_depth(in.peek_rest()) > fg::server::RequestLimits{}.max_json_depth) return 0;
  const ojson messages = ojson::parse(in.until("\n#--tools--#\n"), nullptr, false);
  if (messages.is_discarded()) return 0;
  ojson tools = nullptr, kwargs = ojson::object();
  const ojson extra = ojson::parse(in.rest(), nullptr, false);
  if (!extra.is_discarded() && (opts & 2)) {
    if (extra.is_object() && extra.contains("tools")) tools = extra["tools"];
    if (extra.is_object() && extra.contains("kwargs") && extra["kwargs"].is_object()) kwargs = extra["kwargs"];
  }
  auto r = t.render(messages, tools, opts & 1, kwargs);
  (void)r;
  return 0;
}
