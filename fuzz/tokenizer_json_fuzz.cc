// Fuzz target: loading a tokenizer.json (model folders are untrusted input): the model, added
// tokens, normalizers, pre-tokenizers (user regexes compiled by PCRE2), post-processors and
// decoders. The input is a tokenizer.json, optionally followed by a line "#--config--#" and a
// tokenizer_config.json. An accepted tokenizer then encodes and decodes a short text.
// Checks: ids stay within the vocabulary; decoded text is valid UTF-8.
// Seeds: fuzz/corpus/tokenizer_json (the small fixture tokenizers and component variants).
#include <string>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fg::fuzz::FuzzInput in(data, size);
  const std::string_view tokenizer_json = in.until("\n#--config--#\n");
  const std::string_view config_json = in.rest();
  auto tok = fg::Tokenizer::from_json(tokenizer_json, config_json, "", "tokenizer.json");
  if (!tok.is_ok()) return 0;
  for (const char* text : {"Hello world", " 12,345 caf\xC3\xA9 <s>\n\n", "\xFF\xFE"}) {
    const std::vector<int32_t> ids = (*tok)->encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) {
        std::fprintf(stderr, "tokenizer_json_fuzz: id %d outside the vocabulary size %d\n", id, (*tok)->vocab_size());
        std::abort();
      }
    }
    FG_FUZZ_CHECK(fg::tok::utf8_is_valid((*tok)->decode(ids, false)));
  }
  return 0;
}
