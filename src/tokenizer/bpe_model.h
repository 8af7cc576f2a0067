// The BPE model of tokenizer.json: turns one pre-tokenized piece into token ids by applying
// merges in rank order (lowest rank first, leftmost first among equal ranks), the same result
// as Hugging Face's BPE. Covers byte-level BPE (GPT-2, Llama 3, Qwen) and SentencePiece-style
// BPE (Llama 2, Mistral, Phi-3): unk_token, fuse_unk, byte_fallback (<0xNN> tokens),
// ignore_merges, continuing_subword_prefix, end_of_word_suffix.
//
// Cost: O(n log n) per piece of n characters (a heap of candidate merges over a linked list of
// symbols; short pieces use a linear scan). Results for pieces up to kMaxCachedBytes are cached,
// so repeated words cost one hash lookup. Long pieces (SentencePiece-style tokenizers pass whole
// texts as one piece) are first cut where no token of the vocabulary can span the cut: between
// two characters that never appear next to each other in any token. Merges cannot cross such a
// cut, so the pieces on each side merge exactly as they would together, and are cached as words.
// Thread-safe: encode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "tokenizer/string_map.h"

namespace fg::tok {

class BpeModel {
 public:
  // Builds the model from the "model" object of tokenizer.json (`where` names the file).
  static Result<std::unique_ptr<BpeModel>> load(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one piece to out. Characters with no token (and no byte fallback or
  // unk token) are dropped, as Hugging Face does.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  // Id of a vocabulary string, or -1.
  int32_t token_to_id(std::string_view token) const;
  // Vocabulary string of an id, or nullptr when the model has no such id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id of the model vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // Number of vocabulary entries (ids may have gaps, so this can be below vocab_size()).
  int32_t vocab_len() const { return static_cast<int32_t>(vocab_.size()); }
  bool byte_fallback() const { return byte_fallback_; }

  static constexpr size_t kMaxCachedBytes = 128;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  BpeModel() = default;
  void tokenize_word(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
  // True when some vocabulary token holds character a directly followed by character b.
  bool joinable(char32_t a, char32_t b) const {
    if (a < 256 && b < 256) return (joinable_latin1_[(a << 8 | b) >> 6] >> ((a << 8 | b) & 63)) & 1;
    return joinable_.count((static_cast<uint64_t>(a) << 32) | b) != 0;
  }
  void build_joinable();
  // Rank and result of merging (a, b); rank -1 when the pair has no merge.
  Merge find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? Merge{-1, -1} : it->second;
  }
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  // Id of each single character below kCharTableSize when it is a token (no prefix), else -1.
  static constexpr char32_t kCharTableSize = 0x800;
  std::vector<int32_t> char_id_;
  std::vector<int32_t> byte_id_;  // <0xNN> tokens when byte_fallback, else -1
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;                     // continuing_subword_prefix
  std::string suffix_;                     // end_of_word_suffix
  bool can_cut_ = false;                   // long pieces may be cut (no prefix/suffix)
  std::vector<uint64_t> joinable_latin1_;  // bitmap over (a << 8 | b) for a, b < 256
  std::unordered_set<uint64_t> joinable_;  // other pairs, (a << 32 | b)

  // Piece -> ids cache, sharded to keep lock contention low.
  struct CacheShard {
    std::mutex mu;
    StringMap<std::vector<int32_t>> map;
  };
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 4096;
  mutable std::unique_ptr<CacheShard[]> cache_{new CacheShard[kCacheShards]};
};

}  // namespace fg::tok
