// The model `flashgen generate` and `flashgen serve` use when --model is not given:
// SmolLM2-135M-Instruct as a Q4_1 GGUF, which scripts/fetch-model.sh (run by scripts/setup.sh)
// places in <repo>/models/. Looked for beside the executable's build folder
// (<repo>/build/flashgen -> <repo>/models/...), then under the current directory.
#pragma once

#include <string>

namespace fg::cli {

// "SmolLM2-135M-Instruct.Q4_1.gguf"
extern const char* const kDefaultModelFile;

// The default model's path. Throws std::runtime_error (one line, saying to run
// ./scripts/setup.sh) when it is in neither place.
std::string default_model_path();

// --model's help text for the commands that have a default.
std::string model_option_help();

}  // namespace fg::cli
