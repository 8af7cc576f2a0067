// The tokenizer a GGUF file describes, as the Hugging Face documents flashgen's tokenizer already
// loads: a tokenizer.json, a tokenizer_config.json (special tokens, add_bos_token, chat template)
// and a generation_config.json (end-of-generation ids), built from the file's `tokenizer.*`
// metadata. Tokenizer::load and ChatTemplate::from_model_dir call this for a .gguf path.
//
// tokenizer.ggml.model:
//  - "gpt2": byte-level BPE from tokens + merges; `tokenizer.ggml.pre` names the pre-tokenizer
//    (split regex, digit splitting), mapped to Hugging Face's equivalent components:
//      gpt2/gpt-2/default/(none)     ByteLevel with GPT-2's regex
//      llama3/llama-v3/llama-bpe/falcon3/pixtral/smaug-bpe/dbrx   Llama 3's split regex
//      qwen2/deepseek-r1-qwen/megrez Qwen2's split regex (single digits)
//      smollm/starcoder/refact       single digits, then GPT-2's regex
//      tekken, gpt-4o/llama4         their split regexes
//    any other name is refused by name;
//  - "llama": SentencePiece-style BPE from tokens + scores (merges rebuilt from the scores the way
//    transformers does when a file has none) with byte fallback; the text is prefixed with "▁"
//    (unless tokenizer.ggml.add_space_prefix is false) and spaces become "▁", as the original
//    Llama / Mistral tokenizers and llama.cpp do.
// Token types: CONTROL tokens become special added tokens, USER_DEFINED ones plain added tokens.
// Special ids (bos, eos, eot, eom, unk, pad) and add_bos_token/add_eos_token come from
// `tokenizer.ggml.*`; the chat template from `tokenizer.chat_template` (named ones from
// `tokenizer.chat_template.<name>`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"

namespace fg {

struct GgufTokenizerDocuments {
  nlohmann::json tokenizer;   // tokenizer.json
  nlohmann::json config;      // tokenizer_config.json (special tokens, add_bos_token, chat_template)
  nlohmann::json generation;  // generation_config.json ({"eos_token_id": [...]})
};

// Errors name the file and the key: a missing vocabulary, an unsupported tokenizer model or
// pre-tokenizer (by name), inconsistent lengths, special ids outside the vocabulary.
Result<GgufTokenizerDocuments> gguf_tokenizer_documents(const GgufFile& file);

// The tokenizer_config.json part alone (special-token strings, add_bos_token / add_eos_token,
// chat_template: a string, or a list of {"name", "template"} when the file has named ones),
// without building the vocabulary; for ChatTemplate.
Result<nlohmann::json> gguf_tokenizer_config(const GgufFile& file);

}  // namespace fg
