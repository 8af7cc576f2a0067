// Fuzz target: GGUF files and everything read from them. The input is a GGUF file image; it is
// validated as GgufFile::open validates a mapped file (every length, count and offset against the
// bytes left, tensor shapes, types, sizes, alignment, overlaps, duplicates); when accepted:
//  - the model config is read from the metadata (checked like a config.json), and the weights are
//    loaded on the CPU backend when small (renaming, dequantization, q/k un-permutation, NaN
//    checks);
//  - the tokenizer is built from the tokenizer.* metadata and encodes and decodes a short text;
//  - the chat template in the metadata, if any, renders a short conversation within limits.
// Checks: every accepted tensor lies inside the image with the byte size its type and shape need.
// Seeds: fuzz/corpus/gguf (tiny llama / qwen2 files with f32, f16 and quantized tensors and a
// small vocabulary, written by fuzz/make_seeds.py, and the fixture vocabularies' headers).
#include <vector>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "model/gguf_model.h"
#include "model_files.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly the image's bytes, so a read past its end is an AddressSanitizer report.
  std::vector<uint8_t> image(data, data + size);
  auto file = fg::GgufFile::parse(image.data(), image.size(), "model.gguf");
  if (!file.is_ok()) {
    FG_FUZZ_CHECK(file.status().message().rfind("model.gguf: ", 0) == 0);
    return 0;
  }
  const fg::GgufFile& f = **file;
  for (const fg::GgufTensorInfo& t : f.tensors()) {
    FG_FUZZ_CHECK(t.data >= image.data() && t.data + t.nbytes <= image.data() + image.size());
    FG_FUZZ_CHECK(t.type_info != nullptr && t.numel() >= 0);
  }
  auto config = fg::gguf_model_config(f);
  if (config.is_ok()) {
    fg::fuzz::check_config(*config);
    fg::fuzz::try_load(*config, *fg::gguf_weight_source(f, *config));
  }
  auto docs = fg::gguf_tokenizer_documents(f);
  if (docs.is_ok()) {
    auto tok = fg::Tokenizer::from_documents(docs->tokenizer, docs->config, docs->generation, "model.gguf");
    if (tok.is_ok()) {
      const std::vector<int32_t> ids = (*tok)->encode("Hello world! 123 \xF0\x9F\x98\x80", true);
      for (int32_t id : ids) FG_FUZZ_CHECK(id >= 0 && id < (*tok)->vocab_size());
      (void)(*tok)->decode(ids, false);
    }
  }
  auto tcfg = fg::gguf_tokenizer_config(f);
  if (tcfg.is_ok() && tcfg->contains("chat_template") && (*tcfg)["chat_template"].is_string()) {
    auto tpl = fg::ChatTemplate::from_string((*tcfg)["chat_template"].get<std::string>());
    if (tpl.is_ok()) {
      fg::jinja::Limits limits;
      limits.max_output_bytes = 64 << 10;
      limits.max_work_bytes = 4 << 20;
      limits.max_steps = 20000;
      tpl->set_limits(limits);
      tpl->set_fixed_now(std::tm{});
      (void)tpl->render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])"), nullptr, true);
    }
  }
  return 0;
}
