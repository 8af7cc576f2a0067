// The `flashgen` subcommands. Each group registers its subcommands on the app in its own file
// (cmd_*.cc), so the CLI grows without one file knowing every command's options.
#pragma once

#include <CLI/CLI.hpp>

namespace fg::cli {

// generate, logits (model runtime)
void register_model_commands(CLI::App& app);
// tokenize, detokenize
void register_tokenizer_commands(CLI::App& app);
// template (chat-template rendering)
void register_template_commands(CLI::App& app);

}  // namespace fg::cli
