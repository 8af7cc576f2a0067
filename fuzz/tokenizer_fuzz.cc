// Fuzz target: the tokenizer on arbitrary bytes, with every fixture tokenizer (the seven Hugging
// Face tokenizer.json files, the server tests' tokenizer, the chat fixture model's, and the four
// GGUF vocabularies). One byte picks the tokenizer, one byte the options; the rest is
//  - text to encode (with or without special tokens), then decoded back and streamed through the
//    incremental decoder, or
//  - when the options say so, token ids (two bytes each) to decode, to stream through the
//    incremental decoder and to look up one by one (token_text, token_bytes).
// Checks: ids stay within the vocabulary, decoded text is valid UTF-8, the incremental decoder's
// streamed text is valid UTF-8, byte-level tokenizers without a normalizer round-trip any text
// (invalid UTF-8 repaired).
// Seeds: fuzz/corpus/tokenizer.
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

struct Loaded {
  std::string name;
  std::unique_ptr<fg::Tokenizer> tok;
};

std::vector<Loaded> load_all() {
  const std::string fx = fg::fuzz::fixtures_dir();
  const std::string src = fg::fuzz::source_dir();
  const char* paths[] = {
      "tokenizers/gpt2",
      "tokenizers/llama-3-8b-instruct",
      "tokenizers/llama-3.2-instruct",
      "tokenizers/mistral-7b-v0.1",
      "tokenizers/mistral-7b-v0.1-legacy-format",
      "tokenizers/phi-3-mini-4k-instruct",
      "tokenizers/qwen2.5-instruct",
      "vocab_tests/ggml-vocab-gpt-2.gguf",
      "vocab_tests/ggml-vocab-llama-spm.gguf",
      "vocab_tests/ggml-vocab-phi-3.gguf",
  };
  std::vector<Loaded> out;
  for (const char* p : paths) {
    auto t = fg::Tokenizer::load(fx + "/" + p);
    if (!t.is_ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", p, t.status().to_string().c_str());
      std::abort();
    }
    out.push_back({p, std::move(t).value()});
  }
  for (const char* p : {"tests/fixtures/server_tokenizer", "tests/fixtures/models/chat_llama"}) {
    auto t = fg::Tokenizer::load(src + "/" + p);
    FG_FUZZ_CHECK(t.is_ok());
    out.push_back({p, std::move(t).value()});
  }
  return out;
}

// Byte-level BPE without a normalizer: decode(encode(text)) is the text (invalid UTF-8 repaired).
bool lossless(const std::string& name) {
  return name == "tokenizers/gpt2" || name == "tokenizers/llama-3-8b-instruct" ||
         name == "tokenizers/llama-3.2-instruct";
}

void check_stream(const fg::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  fg::IncrementalDecoder dec(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.push(id);
  streamed += dec.flush();
  FG_FUZZ_CHECK(fg::tok::utf8_is_valid(streamed));
}

}  // namespace

// Loaded once, before the first input (loading takes seconds under the sanitizers and must not
// count against an input's time limit).
static std::vector<Loaded>* g_loaded = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  g_loaded = new std::vector<Loaded>(load_all());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<Loaded>& toks = *g_loaded;
  fg::fuzz::FuzzInput in(data, size);
  const Loaded& t = toks[in.byte() % toks.size()];
  const uint8_t opts = in.byte();
  const bool add_special = opts & 1;
  const bool skip_special = opts & 2;
  const std::string_view rest = in.rest();
  const int32_t vocab = t.tok->vocab_size();
  if (opts & 4) {
    // Ids, two bytes each (little-endian), spread over the vocabulary and a little past it.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < rest.size(); i += 2) {
      const uint32_t v = uint8_t(rest[i]) | (uint32_t(uint8_t(rest[i + 1])) << 8);
      ids.push_back(int32_t(uint64_t(v) * uint64_t(vocab + 8) / 65536u) - 4);
    }
    std::vector<int32_t> valid;
    for (int32_t id : ids) {
      (void)t.tok->token_text(id);
      (void)t.tok->token_bytes(id);
      (void)t.tok->is_special(id);
      if (id >= 0 && id < vocab) valid.push_back(id);
    }
    FG_FUZZ_CHECK(fg::tok::utf8_is_valid(t.tok->decode(ids, skip_special)));
    check_stream(*t.tok, valid, skip_special);
    return 0;
  }
  const std::vector<int32_t> ids = t.tok->encode(rest, add_special);
  for (int32_t id : ids) FG_FUZZ_CHECK(id >= 0 && id < vocab);
  const std::string text = t.tok->decode(ids, skip_special);
  FG_FUZZ_CHECK(fg::tok::utf8_is_valid(text));
  check_stream(*t.tok, ids, skip_special);
  if (!add_special && !skip_special && lossless(t.name)) {
    if (text != fg::tok::utf8_sanitize(rest)) {
      std::fprintf(stderr, "tokenizer_fuzz: %s does not round-trip\n", t.name.c_str());
      std::abort();
    }
  }
  return 0;
}
