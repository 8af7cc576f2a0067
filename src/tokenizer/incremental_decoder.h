// Streaming detokenization: ids arrive one at a time (from the sampler), text deltas go out
// (to the HTTP stream). Deltas never split a UTF-8 character, handle SentencePiece's leading
// space and byte-fallback tokens (<0xE2><0x82><0xAC> -> "€"), and concatenate to exactly the
// text decode() gives for all ids (given the same context, see below).
//
// Method: each step decodes a short window of ids that starts one emission back, and sends the
// part of it that is new, unless the window's text ends in U+FFFD (an unfinished character:
// wait for the next token), or it ends with a byte-fallback token (the run of bytes is decoded
// as a whole, so wait until it ends). First-token rules of decoders (Strip, Metaspace) then act on the
// window's first token in both texts compared, so they cancel out.
// Cost per id: one decode of a few ids. Not thread-safe; one instance per request.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fg {

class Tokenizer;

class IncrementalDecoder {
 public:
  // `context_ids` (e.g. the end of the prompt) are treated as already shown: the first
  // generated token then keeps the leading space it has after them ("▁Hello" -> " Hello").
  // Without context the output equals decode(generated ids). `keep_special` are special tokens
  // shown even with skip_special_tokens (e.g. a tool-call marker such as [TOOL_CALLS]).
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens, std::span<const int32_t> context_ids = {},
                     std::vector<int32_t> keep_special = {});

  // Feeds one id and returns the text that can be shown now (often empty while a character
  // is unfinished).
  std::string push(int32_t id);
  // Returns what is still held back (an unfinished character is emitted as U+FFFD). Call at
  // the end of generation.
  std::string flush();

  // All ids fed so far, context included.
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  std::string decode_range(size_t begin, size_t end) const;
  bool hidden(int32_t id) const;  // a special token left out of the text

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> keep_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;         // start of the decode window
  size_t read_ = 0;           // ids before this were already shown
  std::string prefix_text_;   // decode(ids_[prefix_, read_))
  bool in_byte_run_ = false;  // the last id the decoder sees is a byte-fallback token
};

}  // namespace fg
