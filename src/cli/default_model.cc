// Where the default model is looked for (see default_model.h).
#include "cli/default_model.h"

#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace fg::cli {

const char* const kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string default_model_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> candidates;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "models" / kDefaultModelFile);
  candidates.push_back(fs::path("models") / kDefaultModelFile);
  for (const fs::path& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  throw std::runtime_error("no --model given and the default model (" + candidates.front().lexically_normal().string() +
                           ") is not there; run ./scripts/setup.sh (or ./scripts/fetch-model.sh) to fetch it, or pass "
                           "--model");
}

std::string model_option_help() {
  return std::string(
             "model: a Hugging Face folder (config.json + *.safetensors), a .gguf file, or a folder holding "
             "one .gguf (default: models/") +
         kDefaultModelFile + ", fetched by scripts/setup.sh)";
}

}  // namespace fg::cli
