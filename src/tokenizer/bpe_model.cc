// BPE model (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "tokenizer/component_json.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

constexpr int32_t kLinearScanMax = 48;  // pieces with more symbols use the heap

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::load(const nlohmann::json& m, const std::string& where) {
  const std::string ctx = where + ": model BPE";
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  if (!m.contains("vocab") || !m["vocab"].is_object()) return invalid_argument(ctx + ": 'vocab' must be an object");
  std::optional<double> dropout;
  if (m.contains("dropout") && m["dropout"].is_number()) dropout = m["dropout"].get<double>();
  if (dropout && *dropout > 0.0)
    return unsupported(ctx + ": BPE dropout (" + std::to_string(*dropout) + ") is a training feature; set it to null");
  std::string unk_token;
  FG_RETURN_IF_ERROR(json_get(m, "unk_token", unk_token, ctx));
  FG_RETURN_IF_ERROR(json_get(m, "fuse_unk", bpe->fuse_unk_, ctx));
  FG_RETURN_IF_ERROR(json_get(m, "byte_fallback", bpe->byte_fallback_, ctx));
  FG_RETURN_IF_ERROR(json_get(m, "ignore_merges", bpe->ignore_merges_, ctx));
  FG_RETURN_IF_ERROR(json_get(m, "continuing_subword_prefix", bpe->prefix_, ctx));
  FG_RETURN_IF_ERROR(json_get(m, "end_of_word_suffix", bpe->suffix_, ctx));

  const auto& vocab = m["vocab"];
  bpe->vocab_.reserve(vocab.size() * 2);
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return invalid_argument(ctx + ": vocab entry '" + it.key() + "' has no integer id");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 30))
      return invalid_argument(ctx + ": vocab id " + std::to_string(id) + " out of range");
    bpe->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  // The id table is sized by the largest id: a file whose ids are far sparser than its entries
  // (one id of 10^9) would have it allocate gigabytes.
  if (max_id >= 2 * static_cast<int64_t>(vocab.size()) + 1024)
    return invalid_argument(ctx + ": vocab ids are implausibly sparse (largest id " + std::to_string(max_id) + " for " +
                            std::to_string(vocab.size()) + " entries)");
  bpe->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  bpe->has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : bpe->vocab_) {
    bpe->id_to_token_[static_cast<size_t>(id)] = tok;
    bpe->has_id_[static_cast<size_t>(id)] = 1;
  }
  bpe->char_id_.assign(kCharTableSize, -1);
  for (const auto& [tok, id] : bpe->vocab_) {
    size_t i = 0;
    if (tok.empty()) continue;
    const char32_t c = utf8_next(tok, i);
    if (i == tok.size() && c < kCharTableSize) bpe->char_id_[c] = id;
  }
  bpe->byte_id_.assign(256, -1);
  if (bpe->byte_fallback_) {
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      bpe->byte_id_[b] = bpe->token_to_id(name);
    }
  }
  if (!unk_token.empty()) bpe->unk_id_ = bpe->token_to_id(unk_token);
  bpe->can_cut_ = bpe->prefix_.empty() && bpe->suffix_.empty();
  if (bpe->can_cut_) bpe->build_joinable();

  if (!m.contains("merges") || !m["merges"].is_array()) return invalid_argument(ctx + ": 'merges' must be a list");
  const auto& merges = m["merges"];
  bpe->merges_.reserve(merges.size() * 2);
  const size_t prefix_len = bpe->prefix_.size();
  int32_t rank = 0;
  std::string merged;
  for (const auto& mj : merges) {
    std::string_view a, b;
    if (mj.is_string()) {
      const std::string& line = mj.get_ref<const std::string&>();
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        return invalid_argument(ctx + ": merge " + std::to_string(rank + 1) + " ('" + line +
                                "') is not two tokens separated by one space");
      a = std::string_view(line).substr(0, sp);
      b = std::string_view(line).substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get_ref<const std::string&>();
      b = mj[1].get_ref<const std::string&>();
    } else {
      return invalid_argument(ctx + ": merge " + std::to_string(rank + 1) + " is neither \"a b\" nor [a, b]");
    }
    const int32_t a_id = bpe->token_to_id(a), b_id = bpe->token_to_id(b);
    if (a_id < 0 || b_id < 0)
      return invalid_argument(ctx + ": merge " + std::to_string(rank + 1) + " uses a token missing from the vocab ('" +
                              std::string(a_id < 0 ? a : b) + "')");
    merged.assign(a);
    merged.append(b.size() >= prefix_len ? b.substr(prefix_len) : b);
    const int32_t new_id = bpe->token_to_id(merged);
    if (new_id < 0)
      return invalid_argument(ctx + ": merge " + std::to_string(rank + 1) + " produces '" + merged +
                              "', which is missing from the vocab");
    bpe->merges_[pair_key(a_id, b_id)] = Merge{rank, new_id};  // a repeated pair keeps its last rank
    ++rank;
  }
  return bpe;
}

void BpeModel::build_joinable() {
  joinable_latin1_.assign((256 * 256) / 64, 0);
  for (const auto& [tok, id] : vocab_) {
    size_t i = 0;
    if (tok.empty()) continue;
    char32_t prev = utf8_next(tok, i);
    while (i < tok.size()) {
      const char32_t c = utf8_next(tok, i);
      if (prev < 256 && c < 256) {
        const uint32_t k = prev << 8 | c;
        joinable_latin1_[k >> 6] |= uint64_t{1} << (k & 63);
      } else {
        joinable_.insert((static_cast<uint64_t>(prev) << 32) | c);
      }
      prev = c;
    }
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = token_to_id(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (piece.size() > kMaxCachedBytes && can_cut_) {
    // Cut between characters that no token joins; both must be tokens themselves so that byte
    // fallback and unk fusing never straddle a cut.
    auto is_token = [&](char32_t c, size_t b, size_t e) {
      return c < kCharTableSize ? char_id_[c] >= 0 : token_to_id(piece.substr(b, e - b)) >= 0;
    };
    size_t seg = 0, i = 0;
    char32_t prev = utf8_next(piece, i);
    bool prev_known = is_token(prev, 0, i);
    while (i < piece.size()) {
      const size_t at = i;
      const char32_t c = utf8_next(piece, i);
      const bool known = is_token(c, at, i);
      if (prev_known && known && !joinable(prev, c)) {
        tokenize_word(piece.substr(seg, at - seg), out);
        seg = at;
      }
      prev = c;
      prev_known = known;
    }
    tokenize_word(piece.substr(seg), out);
    return;
  }
  tokenize_word(piece, out);
}

void BpeModel::tokenize_word(std::string_view piece, std::vector<int32_t>& out) const {
  const bool cacheable = piece.size() <= kMaxCachedBytes;
  CacheShard* shard = nullptr;
  if (cacheable) {
    const size_t h = StringHash{}(piece);
    shard = &cache_[h % kCacheShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->map.find(piece);
    if (it != shard->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(before), out.end());
    std::lock_guard<std::mutex> lock(shard->mu);
    if (shard->map.size() >= kCacheShardCapacity) shard->map.clear();
    shard->map.emplace(std::string(piece), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  // 1. One symbol per character (or per byte through byte fallback, or unk).
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  auto add = [&](int32_t id) { sym.push_back({id, static_cast<int32_t>(sym.size()) - 1, -1}); };
  const bool plain = prefix_.empty() && suffix_.empty();
  bool unk_pending = false;
  std::string scratch;
  size_t i = 0;
  while (i < w.size()) {
    const size_t start = i;
    const char32_t c = utf8_next(w, i);
    std::string_view s = w.substr(start, i - start);
    int32_t id = -1;
    if (plain) {
      id = c < kCharTableSize ? char_id_[c] : token_to_id(s);
    } else {
      scratch.clear();
      if (start != 0) scratch += prefix_;
      scratch += s;
      if (i == w.size()) scratch += suffix_;
      s = scratch;
      id = token_to_id(s);
    }
    if (id >= 0) {
      if (unk_pending) {
        add(unk_id_);
        unk_pending = false;
      }
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_id_[b] >= 0;
      if (all) {
        for (unsigned char b : s) add(byte_id_[b]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) add(unk_id_);
      unk_pending = true;
    }
  }
  if (unk_pending) add(unk_id_);
  const int32_t n = static_cast<int32_t>(sym.size());
  if (n == 0) return;
  for (int32_t k = 0; k < n; ++k) sym[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;

  // 2. Apply merges, lowest rank first, leftmost first among equals.
  if (n <= kLinearScanMax) {
    int32_t rank[kLinearScanMax];
    int32_t new_id[kLinearScanMax];
    auto refresh = [&](int32_t k) {
      const int32_t nx = sym[static_cast<size_t>(k)].next;
      if (nx < 0) {
        rank[k] = -1;
        return;
      }
      const Merge mg = find_merge(sym[static_cast<size_t>(k)].id, sym[static_cast<size_t>(nx)].id);
      rank[k] = mg.rank;
      new_id[k] = mg.new_id;
    };
    for (int32_t k = 0; k < n; ++k) refresh(k);
    for (;;) {
      int32_t best = -1;
      for (int32_t k = 0; k >= 0; k = sym[static_cast<size_t>(k)].next)
        if (rank[k] >= 0 && (best < 0 || rank[k] < rank[best])) best = k;
      if (best < 0) break;
      Symbol& left = sym[static_cast<size_t>(best)];
      const int32_t right = left.next;
      left.id = new_id[best];
      left.next = sym[static_cast<size_t>(right)].next;
      if (left.next >= 0) sym[static_cast<size_t>(left.next)].prev = best;
      refresh(best);
      if (left.prev >= 0) refresh(left.prev);
    }
  } else {
    // Min-heap of (rank << 32 | position); stale entries are skipped when popped.
    std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
    std::vector<uint8_t> dead(static_cast<size_t>(n), 0);
    auto push = [&](int32_t k) {
      const int32_t nx = sym[static_cast<size_t>(k)].next;
      if (nx < 0) return;
      const Merge mg = find_merge(sym[static_cast<size_t>(k)].id, sym[static_cast<size_t>(nx)].id);
      if (mg.rank >= 0) heap.push((static_cast<uint64_t>(mg.rank) << 32) | static_cast<uint32_t>(k));
    };
    for (int32_t k = 0; k + 1 < n; ++k) push(k);
    while (!heap.empty()) {
      const uint64_t top = heap.top();
      heap.pop();
      const auto r = static_cast<int32_t>(top >> 32);
      const auto k = static_cast<int32_t>(top & 0xFFFFFFFFu);
      if (dead[static_cast<size_t>(k)]) continue;
      Symbol& left = sym[static_cast<size_t>(k)];
      if (left.next < 0) continue;
      const Merge mg = find_merge(left.id, sym[static_cast<size_t>(left.next)].id);
      if (mg.rank != r) continue;  // the pair changed since this entry was pushed
      const int32_t right = left.next;
      dead[static_cast<size_t>(right)] = 1;
      left.id = mg.new_id;
      left.next = sym[static_cast<size_t>(right)].next;
      if (left.next >= 0) sym[static_cast<size_t>(left.next)].prev = k;
      push(k);
      if (left.prev >= 0) push(left.prev);
    }
  }
  for (int32_t k = 0; k >= 0; k = sym[static_cast<size_t>(k)].next) out.push_back(sym[static_cast<size_t>(k)].id);
}

}  // namespace fg::tok
