// GGUF tokenizer metadata -> Hugging Face tokenizer documents (see gguf_tokenizer.h).
#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <span>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fg {
namespace {

using json = nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false)}}};
}

struct PreTokenizerRule {
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values
  json pre_tokenizer;
  bool nfc = false;            // the model's own tokenizer NFC-normalizes first (Qwen2)
  bool ignore_merges = false;  // a piece that is a whole token is not merged (Llama 3, Tekken)
};

const std::vector<PreTokenizerRule>& pre_tokenizer_rules() {
  static const std::vector<PreTokenizerRule> rules = {
      {{"default", "gpt2", "gpt-2"}, byte_level(true)},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "smaug-bpe", "dbrx"},
       split_then_bytes(kLlama3Regex),
       false,
       true},
      {{"qwen2", "deepseek-r1-qwen", "megrez"}, split_then_bytes(kQwen2Regex), true},
      {{"smollm", "starcoder", "refact"},
       {{"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}}},
      {{"tekken"}, split_then_bytes(kTekkenRegex), false, true},
      {{"gpt-4o", "llama4"}, split_then_bytes(kGpt4oRegex)},
  };
  return rules;
}

std::string supported_pre_names() {
  std::string s;
  for (const PreTokenizerRule& r : pre_tokenizer_rules())
    for (std::string_view n : r.names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

size_t code_points(std::string_view s) {
  size_t n = 0, i = 0;
  while (i < s.size()) {
    tok::utf8_next(s, i);
    ++n;
  }
  return n;
}

// Merges implied by a vocabulary, the way transformers rebuilds them for a GGUF file that lists
// none: every split of a token into two vocabulary entries, ordered by the token's score (highest
// first) when scores are given, else by its id (lowest first); ties by the lengths (in characters)
// of the two halves, then by the order the tokens and splits were found in.
std::vector<std::pair<std::string, std::string>> merges_from_vocab(std::span<const std::string_view> tokens,
                                                                   const std::vector<float>* scores) {
  std::unordered_map<std::string_view, int64_t> index;   // the last id of each token string
  std::vector<size_t> first;                             // ids of first occurrences, in order
  std::unordered_map<std::string_view, float> score_of;  // the last score of each token string
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (index.emplace(tokens[i], int64_t(i)).second) first.push_back(i);
    index[tokens[i]] = int64_t(i);
    if (scores) score_of[tokens[i]] = (*scores)[i];
  }
  struct Candidate {
    std::string_view left, right;
    double key;
    size_t left_len, right_len;
  };
  std::vector<Candidate> all;
  std::vector<Candidate> local;
  for (size_t i : first) {
    const std::string_view tok = tokens[i];
    const double key = scores ? double(score_of[tok]) : double(index[tok]);
    local.clear();
    size_t pos = 0;
    tok::utf8_next(tok, pos);  // splits after the first character, then after each further one
    while (pos < tok.size()) {
      const std::string_view l = tok.substr(0, pos), r = tok.substr(pos);
      auto li = index.find(l), ri = index.find(r);
      if (li != index.end() && ri != index.end()) local.push_back({l, r, key, code_points(l), code_points(r)});
      tok::utf8_next(tok, pos);
    }
    std::stable_sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      const int64_t al = index[a.left], bl = index[b.left];
      return al != bl ? al < bl : index[a.right] < index[b.right];
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  const bool descending = scores != nullptr;
  std::stable_sort(all.begin(), all.end(), [&](const Candidate& a, const Candidate& b) {
    const auto ka = std::make_tuple(a.key, a.left_len, a.right_len);
    const auto kb = std::make_tuple(b.key, b.left_len, b.right_len);
    return descending ? kb < ka : ka < kb;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(all.size());
  for (const Candidate& c : all) out.emplace_back(std::string(c.left), std::string(c.right));
  return out;
}

// A byte-level vocabulary spells every byte as one of 256 characters; a token written with other
// characters (a raw space, say) is respelled byte by byte, as transformers does.
bool in_byte_alphabet(std::string_view s) {
  size_t i = 0;
  while (i < s.size())
    if (tok::byte_level_byte(tok::utf8_next(s, i)) < 0) return false;
  return true;
}

std::string respell_bytes(std::string_view s) {
  std::string out;
  for (char c : s) out += tok::byte_level_char(static_cast<unsigned char>(c));
  return out;
}

json added_token(std::string_view content, bool special) {
  return {{"id", 0},
          {"content", std::string(content)},
          {"single_word", false},
          {"lstrip", false},
          {"rstrip", false},
          {"normalized", false},
          {"special", special}};
}

}  // namespace

Result<json> gguf_tokenizer_config(const GgufFile& f) {
  const std::string& path = f.path();
  std::span<const std::string_view> tokens;
  if (f.has("tokenizer.ggml.tokens")) {
    FG_ASSIGN_OR_RETURN(tokens, f.get_string_array("tokenizer.ggml.tokens"));
  }
  const int64_t n = int64_t(tokens.size());
  auto name_of = [&](const char* key) -> Result<json> {
    if (!f.has(key)) return json(nullptr);
    FG_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
    if (id < 0 || id >= n)
      return invalid_argument(path + ": metadata '" + key + "' = " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(n) + " tokens");
    return json(std::string(tokens[size_t(id)]));
  };
  auto flag = [&](const char* key, bool fallback) -> Result<bool> {
    if (!f.has(key)) return fallback;
    return f.get_bool(key);
  };
  json c = json::object();
  FG_ASSIGN_OR_RETURN(c["bos_token"], name_of("tokenizer.ggml.bos_token_id"));
  FG_ASSIGN_OR_RETURN(c["eos_token"], name_of("tokenizer.ggml.eos_token_id"));
  FG_ASSIGN_OR_RETURN(c["unk_token"], name_of("tokenizer.ggml.unknown_token_id"));
  FG_ASSIGN_OR_RETURN(c["pad_token"], name_of("tokenizer.ggml.padding_token_id"));
  // llama.cpp and transformers add BOS to a SentencePiece vocabulary unless the file says otherwise.
  bool spm = false;
  if (f.has("tokenizer.ggml.model")) {
    FG_ASSIGN_OR_RETURN(std::string_view model, f.get_string("tokenizer.ggml.model"));
    spm = model == "llama";
  }
  FG_ASSIGN_OR_RETURN(c["add_bos_token"], flag("tokenizer.ggml.add_bos_token", spm));
  FG_ASSIGN_OR_RETURN(c["add_eos_token"], flag("tokenizer.ggml.add_eos_token", false));

  // Chat templates: the default one, plus named ones (tokenizer.chat_template.<name>).
  const std::string named_prefix = "tokenizer.chat_template.";
  json named = json::array();
  for (const auto& [key, value] : f.metadata()) {
    if (key.compare(0, named_prefix.size(), named_prefix) != 0) continue;
    FG_ASSIGN_OR_RETURN(std::string_view src, f.get_string(key));
    named.push_back({{"name", key.substr(named_prefix.size())}, {"template", std::string(src)}});
  }
  if (f.has("tokenizer.chat_template")) {
    FG_ASSIGN_OR_RETURN(std::string_view src, f.get_string("tokenizer.chat_template"));
    if (named.empty())
      c["chat_template"] = std::string(src);
    else
      named.insert(named.begin(), json{{"name", "default"}, {"template", std::string(src)}});
  }
  if (!named.empty()) c["chat_template"] = std::move(named);
  return c;
}

Result<GgufTokenizerDocuments> gguf_tokenizer_documents(const GgufFile& f) {
  const std::string& path = f.path();
  if (!f.has("tokenizer.ggml.model"))
    return not_found(path + ": the file has no tokenizer (metadata 'tokenizer.ggml.model' is missing)");
  FG_ASSIGN_OR_RETURN(std::string_view model, f.get_string("tokenizer.ggml.model"));
  FG_ASSIGN_OR_RETURN(std::span<const std::string_view> tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (tokens.empty()) return invalid_argument(path + ": metadata 'tokenizer.ggml.tokens' is empty");
  const int64_t n = int64_t(tokens.size());
  std::vector<int64_t> types;
  if (f.has("tokenizer.ggml.token_type")) {
    FG_ASSIGN_OR_RETURN(types, f.get_int_array("tokenizer.ggml.token_type"));
    if (int64_t(types.size()) != n)
      return invalid_argument(path + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                              " entries for " + std::to_string(n) + " tokens");
  }
  auto token_id = [&](const char* key, int64_t& out) -> Status {
    out = -1;
    if (!f.has(key)) return Status::ok();
    FG_ASSIGN_OR_RETURN(out, f.get_int(key));
    if (out < 0 || out >= n)
      return invalid_argument(path + ": metadata '" + key + "' = " + std::to_string(out) +
                              " is outside the vocabulary of " + std::to_string(n) + " tokens");
    return Status::ok();
  };
  int64_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.bos_token_id", bos));
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.eos_token_id", eos));
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.eot_token_id", eot));
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.eom_token_id", eom));
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.unknown_token_id", unk));
  FG_RETURN_IF_ERROR(token_id("tokenizer.ggml.padding_token_id", pad));
  auto flag = [&](const char* key, bool fallback) -> Result<bool> {
    if (!f.has(key)) return fallback;
    return f.get_bool(key);
  };

  GgufTokenizerDocuments d;
  json& t = d.tokenizer;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = nullptr;
  t["post_processor"] = nullptr;
  json vocab = json::object();
  json added = json::array();
  std::vector<bool> is_added(size_t(n), false);
  bool spm = false;

  if (model == "gpt2") {
    std::string pre = "default";
    if (f.has("tokenizer.ggml.pre")) {
      FG_ASSIGN_OR_RETURN(std::string_view p, f.get_string("tokenizer.ggml.pre"));
      pre = std::string(p);
    }
    const PreTokenizerRule* rule = nullptr;
    for (const PreTokenizerRule& r : pre_tokenizer_rules())
      if (std::find(r.names.begin(), r.names.end(), pre) != r.names.end()) rule = &r;
    if (!rule)
      return unsupported(path + ": pre-tokenizer '" + pre +
                         "' (tokenizer.ggml.pre) is not supported (supported: " + supported_pre_names() + ")");
    t["pre_tokenizer"] = rule->pre_tokenizer;
    if (rule->nfc) t["normalizer"] = {{"type", "NFC"}};
    t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    for (int64_t i = 0; i < n; ++i) {
      const std::string_view tok = tokens[size_t(i)];
      vocab[in_byte_alphabet(tok) ? std::string(tok) : respell_bytes(tok)] = i;
    }
    json merges = json::array();
    if (f.has("tokenizer.ggml.merges")) {
      FG_ASSIGN_OR_RETURN(std::span<const std::string_view> m, f.get_string_array("tokenizer.ggml.merges"));
      for (std::string_view s : m) merges.push_back(std::string(s));
    } else {
      for (auto& [l, r] : merges_from_vocab(tokens, nullptr)) merges.push_back(json::array({l, r}));
    }
    t["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", rule->ignore_merges},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merges)}};
    // CONTROL tokens are special; one spelled outside the byte alphabet is a mislabel that can
    // never be produced, so it stays a plain vocabulary entry (as in transformers).
    for (int64_t i = 0; i < int64_t(types.size()); ++i) {
      const std::string_view tok = tokens[size_t(i)];
      if (types[size_t(i)] == kTokenControl && in_byte_alphabet(tok)) {
        added.push_back(added_token(tok, true));
        is_added[size_t(i)] = true;
      }
    }
    for (int64_t i = 0; i < int64_t(types.size()); ++i) {
      const std::string_view tok = tokens[size_t(i)];
      if (types[size_t(i)] == kTokenUserDefined && in_byte_alphabet(tok) && !is_added[size_t(i)]) {
        added.push_back(added_token(tok, false));
        is_added[size_t(i)] = true;
      }
    }
  } else if (model == "llama") {
    spm = true;
    FG_ASSIGN_OR_RETURN(std::vector<float> scores, f.get_float_array("tokenizer.ggml.scores"));
    if (int64_t(scores.size()) != n)
      return invalid_argument(path + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                              std::to_string(n) + " tokens");
    FG_ASSIGN_OR_RETURN(bool space_prefix, flag("tokenizer.ggml.add_space_prefix", true));
    json seq = json::array();
    if (space_prefix) seq.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    seq.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(seq)}};
    json dec = json::array();
    dec.push_back({{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}});
    dec.push_back({{"type", "ByteFallback"}});
    dec.push_back({{"type", "Fuse"}});
    if (space_prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    t["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(dec)}};
    for (int64_t i = 0; i < n; ++i) vocab[std::string(tokens[size_t(i)])] = i;
    json merges = json::array();
    if (f.has("tokenizer.ggml.merges")) {
      FG_ASSIGN_OR_RETURN(std::span<const std::string_view> m, f.get_string_array("tokenizer.ggml.merges"));
      for (std::string_view s : m) merges.push_back(std::string(s));
    } else {
      for (auto& [l, r] : merges_from_vocab(tokens, &scores)) merges.push_back(json::array({l, r}));
    }
    t["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", unk >= 0 ? json(std::string(tokens[size_t(unk)])) : json(nullptr)},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", true},
                  {"ignore_merges", false},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merges)}};
    for (int64_t i = 0; i < int64_t(types.size()); ++i)
      if (types[size_t(i)] == kTokenControl || types[size_t(i)] == kTokenUserDefined) {
        added.push_back(added_token(tokens[size_t(i)], types[size_t(i)] == kTokenControl));
        is_added[size_t(i)] = true;
      }
  } else {
    return unsupported(path + ": tokenizer model '" + std::string(model) +
                       "' (tokenizer.ggml.model) is not supported (supported: gpt2, llama)");
  }

  // The named special tokens are special added tokens too (SentencePiece's <unk>, <s>, </s>).
  for (int64_t id : {unk, bos, eos, eot, eom, pad})
    if (id >= 0 && !is_added[size_t(id)] && (!spm ? in_byte_alphabet(tokens[size_t(id)]) : true)) {
      added.push_back(added_token(tokens[size_t(id)], true));
      is_added[size_t(id)] = true;
    }
  t["added_tokens"] = std::move(added);

  FG_ASSIGN_OR_RETURN(d.config, gguf_tokenizer_config(f));

  json eos_ids = json::array();
  for (int64_t id : {eos, eot, eom})
    if (id >= 0 && std::find(eos_ids.begin(), eos_ids.end(), json(id)) == eos_ids.end()) eos_ids.push_back(id);
  d.generation = {{"eos_token_id", std::move(eos_ids)}};
  return d;
}

}  // namespace fg
