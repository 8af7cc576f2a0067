// The `flashgen` subcommands. Each group registers its subcommands on the app in its own file
// (cmd_*.cc), so the CLI grows without one file knowing every command's options.
#pragma once

#include <CLI/CLI.hpp>

namespace fg::cli {

// logits (the model layer alone, cmd_model.cc)
void register_model_commands(CLI::App& app);
// generate (the engine, or --reference: the model layer's reference loop; cmd_generate.cc)
void register_generate_command(CLI::App& app);
// chat (an interactive conversation through the engine, cmd_chat.cc)
void register_chat_command(CLI::App& app);
// tokenize, detokenize
void register_tokenizer_commands(CLI::App& app);
// template (chat-template rendering)
void register_template_commands(CLI::App& app);
// serve (HTTP server, cmd_serve.cc)
void register_serve_commands(CLI::App& app);

}  // namespace fg::cli
