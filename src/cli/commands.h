// The `flashgen` subcommands. Each group registers its subcommands on the app in its own file
// (cmd_*.cc), so the CLI grows without one file knowing every command's options.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

namespace fg::cli {

// generate, logits (model runtime)
void register_model_commands(CLI::App& app);
// The single-request settings of `generate` that the engine path (cmd_engine.cc) also uses.
struct GenerateDefaults {
  std::string model_dir;
  std::string backend = "auto";
  std::string prompt_ids;  // "1,2,3" (used when no --prompts file is given)
  int page_size = 16;
  int max_new_tokens = 32;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool json = false;
};
// Adds --prompts FILE and the engine flags (cli/engine_flags.h) to `generate`. The returned function runs
// the request(s) through the engine and returns true when one of --prompts, --dummy-weights or
// --kv-cache-memory was given; otherwise it returns false and `generate` keeps its direct path.
std::function<bool(const GenerateDefaults&)> add_engine_generate_options(CLI::App* generate);
// tokenize, detokenize
void register_tokenizer_commands(CLI::App& app);
// template (chat-template rendering)
void register_template_commands(CLI::App& app);
// serve (HTTP server, cmd_serve.cc)
void register_serve_commands(CLI::App& app);

}  // namespace fg::cli
