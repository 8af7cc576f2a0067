// flashgen tokenizer commands (filled in by the tokenizer layer).
#include "cli/commands.h"

namespace fg::cli {

void register_tokenizer_commands(CLI::App& app) { (void)app; }

}  // namespace fg::cli
