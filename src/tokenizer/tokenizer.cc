// Tokenizer: loading of the model folder and the encode / decode pipelines (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/component_json.h"
#include "tokenizer/decoder.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fg {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(ErrorCode::kIo, path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(ErrorCode::kIo, path + ": read error");
  return ss.str();
}

Result<json> parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return invalid_argument(name + ": invalid JSON: " + e.what());
  }
}

// A special-token field of tokenizer_config.json: a string, {"content": ...}, or null.
std::string token_field(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

bool contains_type(const json& j, const std::string& type) {
  if (j.is_object()) {
    if (tok::component_type(j) == type) return true;
    for (const auto& [k, v] : j.items())
      if (contains_type(v, type)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (contains_type(v, type)) return true;
  }
  return false;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  fs::path dir(path), tokenizer_path;
  const bool folder_with_json = fs::is_directory(dir, ec) && fs::exists(dir / "tokenizer.json", ec);
  if (!folder_with_json) {
    FG_ASSIGN_OR_RETURN(std::string gguf_path, find_gguf_model(path));
    if (!gguf_path.empty()) {
      FG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf_path));
      FG_ASSIGN_OR_RETURN(GgufTokenizerDocuments docs, gguf_tokenizer_documents(*file));
      return from_documents(docs.tokenizer, docs.config, docs.generation, gguf_path);
    }
  }
  if (fs::is_regular_file(dir, ec)) {
    tokenizer_path = dir;
    dir = dir.parent_path();
  } else if (fs::is_directory(dir, ec)) {
    tokenizer_path = dir / "tokenizer.json";
    if (!fs::exists(tokenizer_path, ec))
      return not_found(tokenizer_path.string() + ": no such file (a model folder needs a tokenizer.json)");
  } else {
    return not_found(path + ": no such file or directory");
  }
  FG_ASSIGN_OR_RETURN(std::string tokenizer_text, read_text_file(tokenizer_path.string()));
  std::string config_text, generation_text;
  const fs::path config_path = dir / "tokenizer_config.json";
  const fs::path generation_path = dir / "generation_config.json";
  if (fs::exists(config_path, ec)) {
    FG_ASSIGN_OR_RETURN(config_text, read_text_file(config_path.string()));
  }
  if (fs::exists(generation_path, ec)) {
    FG_ASSIGN_OR_RETURN(generation_text, read_text_file(generation_path.string()));
  }
  // Errors in the configs name their own files.
  if (!config_text.empty()) FG_RETURN_IF_ERROR(parse_json(config_text, config_path.string()).status());
  if (!generation_text.empty()) FG_RETURN_IF_ERROR(parse_json(generation_text, generation_path.string()).status());
  return from_json(tokenizer_text, config_text, generation_text, tokenizer_path.string());
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                                                        std::string_view generation_config_json,
                                                        const std::string& name) {
  FG_ASSIGN_OR_RETURN(json root, parse_json(tokenizer_json, name));
  json cfg, gen;
  if (!config_json.empty()) {
    FG_ASSIGN_OR_RETURN(cfg, parse_json(config_json, "tokenizer_config.json"));
  }
  if (!generation_config_json.empty()) {
    FG_ASSIGN_OR_RETURN(gen, parse_json(generation_config_json, "generation_config.json"));
  }
  return from_documents(root, cfg, gen, name);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_documents(const json& root, const json& config,
                                                             const json& generation, const std::string& name) {
  if (!root.is_object()) return invalid_argument(name + ": expected a JSON object at the top level");
  std::unique_ptr<Tokenizer> t(new Tokenizer());

  static const json kNull;
  auto field = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  const json& model = field("model");
  if (!model.is_object()) return invalid_argument(name + ": missing 'model'");
  std::string model_type = tok::component_type(model);
  if (model_type.empty() && model.contains("merges")) model_type = "BPE";
  if (model_type != "BPE") return tok::component_unsupported(name, "model", model_type);
  FG_ASSIGN_OR_RETURN(t->model_, tok::BpeModel::load(model, name));

  t->added_ = std::make_unique<tok::AddedVocabulary>();
  FG_ASSIGN_OR_RETURN(t->normalizer_, tok::make_normalizer(field("normalizer"), name));
  const tok::BpeModel* bpe = t->model_.get();
  const tok::Normalizer* norm = t->normalizer_.get();
  std::function<std::string(std::string_view)> normalize;
  if (norm) normalize = [norm](std::string_view s) { return norm->normalize(s); };
  FG_RETURN_IF_ERROR(t->added_->load(
      field("added_tokens"), name, [bpe](std::string_view s) { return bpe->token_to_id(s); }, bpe->vocab_len(),
      normalize));
  FG_ASSIGN_OR_RETURN(t->pre_tokenizer_, tok::make_pre_tokenizer(field("pre_tokenizer"), name));
  FG_ASSIGN_OR_RETURN(t->decoder_, tok::make_decoder(field("decoder"), name));
  t->byte_level_decoder_ = contains_type(field("decoder"), "ByteLevel");
  t->byte_fallback_decoder_ = contains_type(field("decoder"), "ByteFallback");
  FG_ASSIGN_OR_RETURN(tok::SpecialTokenWrap wrap, tok::make_post_processor(field("post_processor"), name));
  t->prefix_ = std::move(wrap.prefix);
  t->suffix_ = std::move(wrap.suffix);

  t->vocab_size_ = t->model_->vocab_size();
  for (const auto& a : t->added_->tokens()) t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);

  // tokenizer_config.json: BOS/EOS strings and transformers' add_bos_token / add_eos_token.
  const json cfg = config.is_object() ? config : json::object();
  const std::string bos = token_field(cfg, "bos_token"), eos = token_field(cfg, "eos_token");
  if (!bos.empty()) t->bos_id_ = t->id_of(bos);
  const int32_t config_eos = eos.empty() ? -1 : t->id_of(eos);
  if (config_eos >= 0) t->eos_ids_.push_back(config_eos);
  if (!generation.is_null()) {
    const json& gen = generation;
    std::vector<int32_t> ids;
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const json& e = gen["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
      if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
    }
    for (int32_t id : ids)
      if (id >= 0 && std::find(t->eos_ids_.begin(), t->eos_ids_.end(), id) == t->eos_ids_.end())
        t->eos_ids_.push_back(id);
  }
  // transformers rebuilds the single-sequence template of Llama-style tokenizers from
  // add_bos_token / add_eos_token. Follow it when the config sets them and tokenizer.json's
  // template holds nothing but BOS/EOS (a template with other tokens is kept as is).
  const bool has_add_bos = cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean();
  const bool has_add_eos = cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean();
  if (has_add_bos || has_add_eos) {
    auto bos_or_eos = [&](int32_t id) { return id >= 0 && (id == t->bos_id_ || id == config_eos); };
    const bool simple = std::all_of(t->prefix_.begin(), t->prefix_.end(), bos_or_eos) &&
                        std::all_of(t->suffix_.begin(), t->suffix_.end(), bos_or_eos);
    if (simple) {
      if (has_add_bos) {
        t->prefix_.clear();
        if (cfg["add_bos_token"].get<bool>() && t->bos_id_ >= 0) t->prefix_.push_back(t->bos_id_);
      }
      if (has_add_eos) {
        t->suffix_.clear();
        if (cfg["add_eos_token"].get<bool>() && config_eos >= 0) t->suffix_.push_back(config_eos);
      }
    }
  }
  // Every id encode() can add must exist: a template naming an id past the vocabulary would hand
  // the model an embedding row it does not have.
  for (const std::vector<int32_t>* ids : {&t->prefix_, &t->suffix_}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= t->vocab_size_)
        return invalid_argument(name + ": post_processor adds token id " + std::to_string(id) +
                                ", which is not in the vocabulary (" + std::to_string(t->vocab_size_) + " ids)");
    }
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  encode_into(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  std::string repaired;
  if (!tok::utf8_is_valid(text)) {
    repaired = tok::utf8_sanitize(text);
    text = repaired;
  }
  out.reserve(out.size() + text.size() / 3 + prefix_.size() + suffix_.size());
  if (add_special_tokens) out.insert(out.end(), prefix_.begin(), prefix_.end());
  std::vector<tok::TextSplit> splits;
  added_->split(text, /*normalized_set=*/false, splits);
  for (const auto& s : splits) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    encode_segment(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
  }
  if (add_special_tokens) out.insert(out.end(), suffix_.begin(), suffix_.end());
}

void Tokenizer::encode_segment(std::string_view segment, bool at_origin, std::vector<int32_t>& out) const {
  std::string normalized;
  std::string_view text = segment;
  if (normalizer_) {
    normalized = normalizer_->normalize(segment);
    text = normalized;
  }
  std::vector<tok::TextSplit> splits;
  added_->split(text, /*normalized_set=*/true, splits);
  tok::PieceBuffer buf;
  for (const auto& s : splits) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    buf.text.assign(text.substr(s.begin, s.end - s.begin));
    buf.pieces.assign(1, tok::Piece{0, buf.text.size(), at_origin && s.begin == 0});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(buf);
    for (const auto& p : buf.pieces) model_->tokenize(std::string_view(buf.text).substr(p.begin, p.end - p.begin), out);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const tok::AddedToken* a = added_->find_id(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->text);
    } else if (const std::string* s = model_->id_to_token(id)) {
      tokens.push_back(*s);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out.push_back(' ');
      out += tokens[k];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  if (const tok::AddedToken* a = added_->find_id(id)) return a->text;
  if (const std::string* s = model_->id_to_token(id)) return *s;
  return {};
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (const tok::AddedToken* a = added_->find_id(id)) return a->text;
  const std::string* s = model_->id_to_token(id);
  if (s == nullptr) return {};
  if (model_->byte_fallback() && s->size() == 6 && s->compare(0, 3, "<0x") == 0 && (*s)[5] == '>') {
    const std::string hex = s->substr(3, 2);
    if (std::isxdigit(static_cast<unsigned char>(hex[0])) && std::isxdigit(static_cast<unsigned char>(hex[1])))
      return std::string(1, static_cast<char>(std::stoi(hex, nullptr, 16)));
  }
  if (byte_level_decoder_) {
    std::string bytes;
    size_t i = 0;
    while (i < s->size()) {
      const int b = tok::byte_level_byte(tok::utf8_next(*s, i));
      if (b < 0) return *s;
      bytes.push_back(static_cast<char>(b));
    }
    return bytes;
  }
  if (!decoder_) return *s;
  // Run the decoder with a sentinel first token so that first-token rules (Strip, Metaspace)
  // act on the sentinel, then drop it.
  std::vector<std::string> tokens{"\x01", *s};
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  if (!out.empty() && out[0] == '\x01') out.erase(0, 1);
  return out;
}

int32_t Tokenizer::id_of(std::string_view token) const {
  if (const tok::AddedToken* a = added_->find_content(token)) return a->id;
  return model_->token_to_id(token);
}

bool Tokenizer::is_byte_token(int32_t id) const {
  if (!byte_fallback_decoder_) return false;
  const tok::AddedToken* a = added_->find_id(id);
  const std::string* s = a ? &a->text : model_->id_to_token(id);
  return s != nullptr && s->size() == 6 && s->compare(0, 3, "<0x") == 0 && (*s)[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>((*s)[3])) && std::isxdigit(static_cast<unsigned char>((*s)[4]));
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* a = added_->find_id(id);
  return a != nullptr && a->special;
}

}  // namespace fg
