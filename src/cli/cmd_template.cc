// flashgen template commands (filled in by the template layer).
#include "cli/commands.h"

namespace fg::cli {

void register_template_commands(CLI::App& app) { (void)app; }

}  // namespace fg::cli
