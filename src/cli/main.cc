// flashgen's command-line entry point: parses the subcommand and hands over to its handler.
// Handlers report user errors as one line on stderr and a non-zero exit; they never abort on bad
// input.
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"flashgen: LLM inference server (one ragged batch per step, one attention kernel)"};
  app.require_subcommand(1);
  fg::cli::register_generate_command(app);
  fg::cli::register_chat_command(app);
  fg::cli::register_model_commands(app);
  fg::cli::register_tokenizer_commands(app);
  fg::cli::register_template_commands(app);
  fg::cli::register_serve_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashgen: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
