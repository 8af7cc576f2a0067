// Fuzz target: config.json parsing (both the classic and the transformers-5 forms, rope scaling,
// sliding windows, layer types). Every accepted config must satisfy the invariants the loader and
// the model rely on (fuzz/model_files.h); every refused one must say why.
// Seeds: fuzz/corpus/model_config (the fixture models' configs and the benchmark configs).
#include "fuzz_util.h"
#include "model/config.h"
#include "model_files.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fg::Result<fg::ModelConfig> c = fg::parse_model_config(text, "config.json");
  if (c.is_ok())
    fg::fuzz::check_config(*c);
  else
    FG_FUZZ_CHECK(c.status().message().rfind("config.json: ", 0) == 0);
  return 0;
}
