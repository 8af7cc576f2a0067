// flashgen model commands (filled in by the model layer).
#include "cli/commands.h"

namespace fg::cli {

void register_model_commands(CLI::App& app) { (void)app; }

}  // namespace fg::cli
