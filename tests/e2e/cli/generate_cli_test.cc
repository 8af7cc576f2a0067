// `flashgen generate` and `flashgen chat` as a user runs them, on the fixture models (CPU):
// the engine is the default and --reference the model layer's loop, and they agree; --reference
// refuses the engine's flags; text prompts, --chat and "messages" lines use the model's tokenizer
// and chat template and print text; stop strings work in --prompts files; max_new_tokens 0 and
// null mean "nothing" and "no limit"; `chat` streams replies and keeps the history.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_test_util.h"

namespace fg::test {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kChatModel = std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/chat_llama";
const std::string kIdsModel = std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/llama";
const std::string kCommon = " --backend cpu --kv-cache-memory 4MiB";

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(flashgen_binary())) GTEST_SKIP() << "flashgen binary not built at " << flashgen_binary();
    tmp_ = fs::temp_directory_path() / ("fg_generate_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  CliResult run(const std::string& args, const std::string& input = "") { return run_flashgen(args, tmp_, input); }

  // `generate ... --json` on the chat model (through the engine, or the reference loop, which
  // takes no engine flags); one parsed object per output line.
  std::vector<Json> generate_json(const std::string& args, bool reference = false) {
    CliResult r = run("generate --model " + kChatModel + (reference ? " --backend cpu --reference" : kCommon) +
                      " --json " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<Json> out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) out.push_back(Json::parse(line));
    return out;
  }

  // Runs a --prompts file holding `lines` (JSON objects).
  std::vector<Json> generate_lines(const std::vector<Json>& lines, const std::string& args = "") {
    const fs::path file = tmp_ / "requests.jsonl";
    std::ofstream f(file, std::ios::trunc);
    for (const Json& j : lines) f << j.dump() << "\n";
    f.close();
    return generate_json("--prompts " + file.string() + " " + args);
  }

  fs::path tmp_;
};

std::vector<int32_t> ids_of(const Json& j) {
  return j.get<std::vector<int32_t>>();
}

TEST_F(GenerateCli, TextPromptUsesTheTokenizerAndBothPathsAgree) {
  const std::string flags = "--prompt " + shell_quote("Hello world, this is") + " --max-new-tokens 10 --ignore-eos";
  const std::vector<Json> engine = generate_json(flags);
  ASSERT_EQ(engine.size(), 1u);
  // The prompt ids are the tokenizer's (with its BOS rules: chat_llama adds none).
  CliResult tok = run("tokenize --model " + kChatModel + " --text " + shell_quote("Hello world, this is") + " --json");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_EQ(engine[0]["prompt_ids"], Json::parse(tok.out)["ids"]);
  EXPECT_EQ(engine[0]["output_ids"].size(), 10u);
  EXPECT_EQ(engine[0]["finish_reason"], "length");
  ASSERT_TRUE(engine[0].contains("text"));
  // The text is the decoded output.
  std::string ids;
  for (const Json& id : engine[0]["output_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  CliResult detok = run("detokenize --model " + kChatModel + " --skip-special-tokens --ids " + ids);
  ASSERT_EQ(detok.exit_code, 0) << detok.err;
  const std::string text = engine[0]["text"];
  const size_t lead = std::min(detok.out.find_first_not_of(' '), detok.out.size());
  EXPECT_NE(text.find(detok.out.substr(lead)), std::string::npos)
      << "text '" << text << "' vs detokenized '" << detok.out << "'";

  const std::vector<Json> reference = generate_json(flags, /*reference=*/true);
  ASSERT_EQ(reference.size(), 1u);
  EXPECT_EQ(reference[0]["prompt_ids"], engine[0]["prompt_ids"]);
  EXPECT_EQ(reference[0]["output_ids"], engine[0]["output_ids"]);
  EXPECT_EQ(reference[0]["text"], engine[0]["text"]);

  // Without --json: the ids line, then the text.
  CliResult plain = run("generate --model " + kChatModel + kCommon + " " + flags);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::string want_ids;
  for (const Json& id : engine[0]["output_ids"])
    want_ids += (want_ids.empty() ? "" : " ") + std::to_string(id.get<int>());
  EXPECT_EQ(plain.out, "[0] length: " + want_ids + "\n" + text + "\n");
}

TEST_F(GenerateCli, ChatAppliesTheTemplateLikeAMessagesLine) {
  const std::vector<Json> chat = generate_json("--prompt Hi --chat --max-new-tokens 8");
  ASSERT_EQ(chat.size(), 1u);
  const std::vector<Json> lines =
      generate_lines({{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_new_tokens", 8}}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(chat[0]["prompt_ids"], lines[0]["prompt_ids"]);
  EXPECT_EQ(chat[0]["output_ids"], lines[0]["output_ids"]);
  EXPECT_EQ(chat[0]["text"], lines[0]["text"]);
  // The rendered template, encoded without special tokens.
  const fs::path messages = tmp_ / "messages.json";
  std::ofstream(messages) << R"([{"role": "user", "content": "Hi"}])";
  CliResult rendered =
      run("template --model " + kChatModel + " --messages " + messages.string() + " --add-generation-prompt");
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  EXPECT_NE(rendered.out.find("Hi"), std::string::npos);
  CliResult tok = run("tokenize --model " + kChatModel + " --text " + shell_quote(rendered.out) + " --json");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_EQ(chat[0]["prompt_ids"], Json::parse(tok.out)["ids"]);
  // --reference takes --chat too, and agrees.
  const std::vector<Json> reference = generate_json("--prompt Hi --chat --max-new-tokens 8", /*reference=*/true);
  ASSERT_EQ(reference.size(), 1u);
  EXPECT_EQ(reference[0]["output_ids"], chat[0]["output_ids"]);
}

TEST_F(GenerateCli, StopStringsWorkInPromptsFiles) {
  const Json base = {{"prompt", "The story begins"}, {"max_new_tokens", 40}, {"ignore_eos", true}};
  const std::vector<Json> free_run = generate_lines({base});
  ASSERT_EQ(free_run.size(), 1u);
  const std::string text = free_run[0]["text"];
  // A stop string of two ASCII characters from the middle of the text.
  std::string stop;
  for (size_t i = text.size() / 3; i + 1 < text.size() && stop.empty(); ++i) {
    const auto a = static_cast<unsigned char>(text[i]), b = static_cast<unsigned char>(text[i + 1]);
    if (a > 32 && a < 127 && b > 32 && b < 127) stop = text.substr(i, 2);
  }
  ASSERT_FALSE(stop.empty()) << "no ASCII pair in '" << text << "'";
  Json with_stop = base;
  with_stop["stop"] = Json::array({stop});
  Json as_string = base;
  as_string["stop"] = stop;
  const std::vector<Json> stopped = generate_lines({with_stop, as_string, base});
  ASSERT_EQ(stopped.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(stopped[i]["finish_reason"], "stop_string");
    EXPECT_EQ(stopped[i]["text"], text.substr(0, text.find(stop)));
    const std::vector<int32_t> out = ids_of(stopped[i]["output_ids"]);
    const std::vector<int32_t> all = ids_of(free_run[0]["output_ids"]);
    ASSERT_LT(out.size(), all.size());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), all.begin())) << "stopping changed the tokens before the stop";
  }
  EXPECT_EQ(stopped[2]["output_ids"], free_run[0]["output_ids"]);
  // --stop on the command line does the same for --prompt.
  const std::vector<Json> flag = generate_json("--prompt " + shell_quote("The story begins") +
                                               " --max-new-tokens 40 --ignore-eos --stop " + shell_quote(stop));
  ASSERT_EQ(flag.size(), 1u);
  EXPECT_EQ(flag[0]["finish_reason"], "stop_string");
  EXPECT_EQ(flag[0]["output_ids"], stopped[0]["output_ids"]);
}

// --step-trace: a CSV header and one line per engine step; the first step prefills the prompts,
// the later ones decode them, and the output tokens add up to what the steps decoded.
TEST_F(GenerateCli, StepTraceWritesALinePerStep) {
  const fs::path trace = tmp_ / "steps.csv";
  const std::vector<Json> out =
      generate_lines({Json{{"prompt_ids", {5, 6, 7, 8}}, {"max_new_tokens", 6}, {"ignore_eos", true}},
                      Json{{"prompt_ids", {9, 10}}, {"max_new_tokens", 6}, {"ignore_eos", true}}},
                     "--step-trace " + trace.string());
  ASSERT_EQ(out.size(), 2u);
  std::ifstream f(trace);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_EQ(line, "step,start_s,seconds,seqs,decodes,prefill_tokens,prefill_chunk,running,waiting");
  int steps = 0, decodes = 0, prefill = 0, prefilled_at = 0;  // the step that ends both prompts' prefill
  double last_start = -1.0;
  while (std::getline(f, line)) {
    std::vector<double> v;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) v.push_back(std::stod(c));
    ASSERT_EQ(v.size(), 9u) << line;
    EXPECT_EQ(int(v[0]), ++steps);
    EXPECT_GE(v[1], last_start);
    EXPECT_GT(v[2], 0.0);
    last_start = v[1];
    decodes += int(v[4]);
    prefill += int(v[5]);
    if (prefill == 6 && prefilled_at == 0) prefilled_at = steps;
  }
  EXPECT_EQ(prefill, 6);      // both prompts
  EXPECT_EQ(decodes, 2 * 5);  // every output token but each request's first comes from a decode
  // The engine steps while the requests are submitted one by one: usually both prompts are in the
  // first step, else the second's prefill comes a step or two later and its 5 decodes with it.
  ASSERT_GE(prefilled_at, 1);
  EXPECT_EQ(steps, std::max(6, prefilled_at + 5));
  CliResult bad = run("generate --model " + kChatModel + kCommon + " --prompt-ids 5 --step-trace /nonexistent/x.csv");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--step-trace"), std::string::npos) << bad.err;
}

TEST_F(GenerateCli, MaxNewTokensZeroIsNothingAndNullIsNoLimit) {
  const Json zero = {{"prompt_ids", {5, 6, 7}}, {"max_new_tokens", 0}};
  const Json unlimited = {{"prompt_ids", {5, 6, 7}}, {"max_new_tokens", nullptr}, {"ignore_eos", true}};
  const std::vector<Json> out = generate_lines({zero, unlimited});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["finish_reason"], "length");
  EXPECT_TRUE(out[0]["output_ids"].empty());
  // chat_llama's context is 512 tokens: all of it is used.
  EXPECT_EQ(out[1]["finish_reason"], "length");
  EXPECT_EQ(out[1]["output_ids"].size(), 512u - 3u);
}

TEST_F(GenerateCli, ReferenceRefusesTheEngineFlags) {
  for (const char* flag :
       {"--max-running 4", "--no-prefix-cache", "--stop x", "--dummy-weights", "--batch-invariant"}) {
    const std::string extra = flag;
    CliResult r = run("generate --model " + kIdsModel + " --prompt-ids 1,2,3 --backend cpu --reference " + extra);
    SCOPED_TRACE(extra);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(extra.substr(0, extra.find(' '))), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--reference"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  CliResult prompts = run("generate --model " + kIdsModel + " --prompts /nonexistent --backend cpu --reference");
  EXPECT_EQ(prompts.exit_code, 1);
  EXPECT_NE(prompts.err.find("--prompts"), std::string::npos) << prompts.err;
}

// --batch-invariant reaches the backend: a prompt's tokens and logprobs, alone or among 24 others
// whose prompts share its steps under a 64-token budget, are bitwise the same.
TEST_F(GenerateCli, BatchInvariantGivesAPromptTheSameResultsAloneAndInABatch) {
  std::vector<Json> lines;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> ids;
    for (int j = 0; j < 5 + (i * 7) % 30; ++j) ids.push_back(3 + (i * 31 + j * 17) % 250);
    lines.push_back({{"prompt_ids", ids}, {"max_new_tokens", 12}, {"ignore_eos", true}, {"logprobs", 3}});
  }
  const std::string model = " --model " + kIdsModel;
  auto run_lines = [&](const std::vector<Json>& ls) {
    const fs::path file = tmp_ / "requests.jsonl";
    std::ofstream f(file, std::ios::trunc);
    for (const Json& j : ls) f << j.dump() << "\n";
    f.close();
    CliResult r = run("generate" + model + kCommon + " --json --batch-invariant --max-batch-tokens 64 --prompts " +
                      file.string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<Json> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
    return out;
  };
  const std::vector<Json> batch = run_lines(lines);
  ASSERT_EQ(batch.size(), lines.size());
  for (size_t i : {size_t(0), size_t(9), size_t(23)}) {
    const std::vector<Json> alone = run_lines({lines[i]});
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0]["output_ids"], batch[i]["output_ids"]) << "prompt " << i;
    // JSON writes floats with enough digits to round-trip, so equal text is equal bits.
    EXPECT_EQ(alone[0]["logprobs"].dump(), batch[i]["logprobs"].dump()) << "prompt " << i;
    EXPECT_EQ(alone[0]["top_logprobs"].dump(), batch[i]["top_logprobs"].dump()) << "prompt " << i;
  }
}

// A --prompts line may ask for prompt logprobs (with max_new_tokens 0 the prompt still runs) and
// bias tokens: a prompt extended by its greedy output scores those tokens as generation did.
TEST_F(GenerateCli, PromptLogprobsLogitBiasAndMinNewTokensInAPromptsFile) {
  const std::vector<int32_t> ids = {5, 17, 42, 99, 7, 3, 61};
  const std::vector<Json> gen = generate_lines(
      {{{"prompt_ids", ids}, {"max_new_tokens", 6}, {"ignore_eos", true}, {"logprobs", 0}},
       {{"prompt_ids", ids}, {"max_new_tokens", 4}, {"ignore_eos", true}, {"logit_bias", {{"11", 100}}}}});
  ASSERT_EQ(gen.size(), 2u);
  EXPECT_EQ(ids_of(gen[1]["output_ids"]), std::vector<int32_t>(4, 11));
  std::vector<int32_t> full = ids;
  for (int32_t t : ids_of(gen[0]["output_ids"])) full.push_back(t);
  ASSERT_EQ(full.size(), ids.size() + 6);
  const std::vector<Json> scored =
      generate_lines({{{"prompt_ids", full}, {"max_new_tokens", 0}, {"prompt_logprobs", 1}}});
  ASSERT_EQ(scored.size(), 1u);
  EXPECT_TRUE(scored[0]["output_ids"].empty());
  EXPECT_EQ(scored[0]["finish_reason"], "length");
  const Json& pl = scored[0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), full.size() - 1);
  for (size_t i = 0; i < 6; ++i) {
    const Json& e = pl[ids.size() - 1 + i];
    EXPECT_EQ(e["id"], full[ids.size() + i]);
    EXPECT_NEAR(e["logprob"].get<double>(), gen[0]["logprobs"][i].get<double>(), 2e-3) << i;
    ASSERT_EQ(e["top"].size(), 1u);
    EXPECT_EQ(e["top"][0]["id"], full[ids.size() + i]) << "greedy tokens are their position's most likely";
  }
  // The first greedy token as a stop id ends the request at once, but not within min_new_tokens.
  const int32_t first = ids_of(gen[0]["output_ids"])[0];
  const std::vector<Json> held =
      generate_lines({{{"prompt_ids", ids}, {"max_new_tokens", 6}, {"ignore_eos", true}, {"stop_token_ids", {first}}},
                      {{"prompt_ids", ids},
                       {"max_new_tokens", 6},
                       {"min_new_tokens", 5},
                       {"ignore_eos", true},
                       {"stop_token_ids", {first}}}});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(ids_of(held[0]["output_ids"]), std::vector<int32_t>{first});
  const std::vector<int32_t> out = ids_of(held[1]["output_ids"]);
  ASSERT_GE(out.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NE(out[i], first) << i;
}

TEST_F(GenerateCli, UnusableFlagCombinationsAreRefused) {
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"--model " + kChatModel + " --prompt-ids 1,2 --chat", "--chat"},
      {"--model " + kChatModel, "exactly one of"},
      {"--model " + kChatModel + " --prompt hi --prompt-ids 1,2", "exactly one of"},
      {"--model " + kIdsModel + " --prompt hi", "tokenizer"},
      {"--model " + kIdsModel + " --prompt-ids 1,2 --stop x", "tokenizer"},
  };
  for (const Case& c : cases) {
    CliResult r = run("generate " + c.args + kCommon);
    SCOPED_TRACE(c.args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// FP8 checkpoints through the engine give their f32 twin's tokens (on the CPU); --quantization fp8
// quantizes a bf16 checkpoint at load and is refused where it cannot apply (dummy weights on the CPU).
TEST_F(GenerateCli, Fp8CheckpointsAndQuantizationAtLoad) {
  const std::string models = std::string(FG_SOURCE_DIR) + "/tests/fixtures/models/";
  const std::string args = " --prompt-ids 5,17,33,101,7 --max-new-tokens 12 --ignore-eos --json" + kCommon;
  auto output_ids = [&](const std::string& model_args) {
    CliResult r = run("generate --model " + models + model_args + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? Json::parse(r.out)["output_ids"] : Json();
  };
  for (const std::string format : {"fp8_block", "fp8_channel"}) {
    const Json ids = output_ids(format);
    EXPECT_EQ(ids.size(), 12u) << format;
    EXPECT_EQ(ids, output_ids(format + "_twin")) << format;
  }
  EXPECT_EQ(output_ids("llama_bf16 --quantization fp8").size(), 12u);
  CliResult bad = run("generate --model " + models + "llama_bf16 --quantization int4" + args);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--quantization"), std::string::npos) << bad.err;
  CliResult dummy = run("generate --model " + models + "llama_bf16 --dummy-weights --quantization fp8" + args);
  EXPECT_EQ(dummy.exit_code, 1);
  EXPECT_NE(dummy.err.find("dummy weights"), std::string::npos) << dummy.err;
}

TEST_F(GenerateCli, ChatKeepsTheHistoryAndStreamsReplies) {
  CliResult chat =
      run("chat --model " + kChatModel + kCommon + " --max-new-tokens 12", "Hi\n\nHow are you?\n/exit\nignored\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  // Turn one is `generate --chat`; turn two sees turn one and its reply.
  const std::vector<Json> first = generate_json("--prompt Hi --chat --max-new-tokens 12");
  ASSERT_EQ(first.size(), 1u);
  const std::string reply1 = first[0]["text"];
  const Json history = Json::array({{{"role", "user"}, {"content", "Hi"}},
                                    {{"role", "assistant"}, {"content", reply1}},
                                    {{"role", "user"}, {"content", "How are you?"}}});
  const std::vector<Json> second = generate_lines({{{"messages", history}, {"max_new_tokens", 12}}});
  ASSERT_EQ(second.size(), 1u);
  const std::string reply2 = second[0]["text"];
  EXPECT_FALSE(reply1.empty() && reply2.empty()) << "the fixture model said nothing at all";
  EXPECT_EQ(chat.out, reply1 + "\n" + reply2 + "\n");
}

TEST_F(GenerateCli, SpeculativeDecodingGivesTheSameTokensAndReportsAcceptance) {
  const std::string prompt = " --prompt-ids 5,6,7,5,6,7,5,6 --max-new-tokens 24 --ignore-eos --json";
  CliResult plain = run("generate --model " + kIdsModel + kCommon + prompt);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string& spec :
       {std::string(" --speculative ngram --ngram-min 1"), " --speculative draft --draft-model " + kIdsModel}) {
    CliResult r = run("generate --model " + kIdsModel + kCommon + spec + prompt);
    ASSERT_EQ(r.exit_code, 0) << spec << ": " << r.err;
    EXPECT_EQ(ids_of(Json::parse(r.out)["output_ids"]), ids_of(Json::parse(plain.out)["output_ids"])) << spec;
    EXPECT_NE(r.err.find("flashgen: speculative ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("accepted"), std::string::npos) << r.err;
  }
  CliResult bad = run("generate --model " + kIdsModel + kCommon + " --speculative draft" + prompt);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--draft-model"), std::string::npos) << bad.err;
}

TEST_F(GenerateCli, TensorParallelGivesTheSameTokensAndRefusesBadSizes) {
  const std::string prompt = " --prompt-ids 5,6,7,9,11 --max-new-tokens 12 --ignore-eos --json";
  CliResult plain = run("generate --model " + kIdsModel + kCommon + prompt);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  CliResult split = run("generate --model " + kIdsModel + kCommon + " --tensor-parallel-size 2" + prompt);
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(ids_of(Json::parse(split.out)["output_ids"]), ids_of(Json::parse(plain.out)["output_ids"]));
  for (const auto& [n, says] : std::vector<std::pair<std::string, std::string>>{
           {"0", "--tensor-parallel-size must be at least 1"},
           {"3", "2 attention heads cannot be split over --tensor-parallel-size 3"}}) {
    CliResult bad = run("generate --model " + kIdsModel + kCommon + " --tensor-parallel-size " + n + prompt);
    EXPECT_EQ(bad.exit_code, 1) << n;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
  }
}

}  // namespace
}  // namespace fg::test
