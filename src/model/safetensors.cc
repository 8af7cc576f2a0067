// Safetensors parsing and validation (see safetensors.h).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/config.h"

namespace fg {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

struct DTypeInfo {
  const char* name;
  size_t bits;
  std::optional<DType> dtype;
};

// Every dtype the safetensors format defines; flashgen reads the floats (and ints for validation).
constexpr DTypeInfo kDTypes[] = {
    {"F64", 64, std::nullopt},    {"F32", 32, DType::kF32},       {"F16", 16, DType::kF16},
    {"BF16", 16, DType::kBF16},   {"I64", 64, DType::kI64},       {"I32", 32, DType::kI32},
    {"I16", 16, std::nullopt},    {"I8", 8, std::nullopt},        {"U64", 64, std::nullopt},
    {"U32", 32, std::nullopt},    {"U16", 16, std::nullopt},      {"U8", 8, DType::kU8},
    {"BOOL", 8, std::nullopt},    {"F8_E4M3", 8, DType::kF8E4M3}, {"F8_E5M2", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt},
};

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- MappedFile

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": file not found");
    return Status(ErrorCode::kIo, path + ": cannot open (" + errno_text() + ")");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s(ErrorCode::kIo, path + ": cannot stat (" + errno_text() + ")");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s(ErrorCode::kIo, path + ": cannot map (" + errno_text() + ")");
      ::close(fd);
      return s;
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---- header

Result<std::map<std::string, SafetensorsTensor>> parse_safetensors_header(const std::string& header_json,
                                                                          const uint8_t* data, size_t data_size,
                                                                          const std::string& path) {
  Json root = Json::parse(header_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument(path + ": invalid safetensors header (not valid JSON)");
  if (!root.is_object()) return invalid_argument(path + ": invalid safetensors header (not a JSON object)");

  std::map<std::string, SafetensorsTensor> out;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const Json& e = it.value();
    std::string where = path + ": tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return invalid_argument(where + ": header entry needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) return invalid_argument(where + ": dtype must be a string");
    SafetensorsTensor t;
    t.name = name;
    t.file = path;
    t.dtype_name = e["dtype"].get<std::string>();
    const DTypeInfo* info = find_dtype(t.dtype_name);
    if (!info) return invalid_argument(where + ": unknown dtype '" + t.dtype_name + "'");
    t.dtype = info->dtype;

    const Json& shape = e["shape"];
    if (!shape.is_array() || shape.size() > 8)
      return invalid_argument(where + ": shape must be a list of at most 8 sizes");
    uint64_t numel = 1;
    for (const Json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
        return invalid_argument(where + ": shape " + shape.dump() + " has an invalid size");
      uint64_t v = d.get<uint64_t>();
      t.shape.push_back(int64_t(v));
      if (v != 0 && numel > (1ull << 50) / v)
        return invalid_argument(where + ": shape " + shape.dump() + " is too large");
      numel *= v;
    }

    const Json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return invalid_argument(where + ": data_offsets must be two non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      return invalid_argument(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") lie outside the data section of " + std::to_string(data_size) +
                              " bytes (file truncated or header corrupt)");
    uint64_t need_bits = numel * info->bits;
    if ((end - begin) * 8 != need_bits)
      return invalid_argument(where + ": dtype " + t.dtype_name + " and shape " + t.shape_string() + " need " +
                              std::to_string((need_bits + 7) / 8) + " bytes but data_offsets give " +
                              std::to_string(end - begin));
    t.data = data ? data + begin : nullptr;
    t.nbytes = size_t(end - begin);
    out.emplace(name, std::move(t));
  }

  // Tensors must not share bytes: sort by begin and check each starts after the previous ends.
  std::vector<std::pair<uint64_t, const SafetensorsTensor*>> spans;
  for (const auto& [name, t] : out)
    spans.push_back({t.data ? uint64_t(static_cast<const uint8_t*>(t.data) - data) : 0, &t});
  if (data) {
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 1; i < spans.size(); ++i) {
      const auto& prev = spans[i - 1];
      if (prev.second->nbytes > 0 && spans[i].second->nbytes > 0 && spans[i].first < prev.first + prev.second->nbytes)
        return invalid_argument(path + ": tensors '" + prev.second->name + "' and '" + spans[i].second->name +
                                "' overlap in the data section (header offsets are corrupt)");
    }
  }
  return out;
}

// ---- SafetensorsFile

Result<std::map<std::string, SafetensorsTensor>> parse_safetensors_image(const uint8_t* bytes, size_t size,
                                                                         const std::string& path) {
  if (size < 8)
    return invalid_argument(path + ": file is truncated (" + std::to_string(size) +
                            " bytes, shorter than the 8-byte header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8)
    return invalid_argument(path + ": header length " + std::to_string(header_len) + " exceeds the file size (" +
                            std::to_string(size) + " bytes); file truncated or corrupt");
  if (header_len > kMaxHeaderBytes)
    return invalid_argument(path + ": header length " + std::to_string(header_len) + " is larger than 100 MB");
  if (header_len < 2 || bytes[8] != '{')
    return invalid_argument(path + ": invalid safetensors header (does not start with '{')");
  std::string header(reinterpret_cast<const char*>(bytes + 8), size_t(header_len));
  const uint8_t* data = bytes + 8 + header_len;
  size_t data_size = size - 8 - size_t(header_len);
  return parse_safetensors_header(header, data, data_size, path);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mf, MappedFile::open(path));
  FG_ASSIGN_OR_RETURN(auto tensors, parse_safetensors_image(mf->data(), mf->size(), path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = std::move(mf);
  f->tensors_ = std::move(tensors);
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// ---- SafetensorsCheckpoint

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ckpt;
  std::string single = dir + "/model.safetensors";
  std::string index_path = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) {
    FG_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(single));
    for (const auto& [name, t] : f->tensors()) ckpt.index_[name] = &t;
    ckpt.files_.push_back(std::move(f));
    ckpt.source_path_ = single;
    return ckpt;
  }
  if (!fs::exists(index_path, ec))
    return not_found(dir + ": no model.safetensors or model.safetensors.index.json in this directory");

  ckpt.source_path_ = index_path;
  FG_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return invalid_argument(index_path + ": invalid JSON");
  if (!root.contains("weight_map") || !root["weight_map"].is_object())
    return invalid_argument(index_path + ": missing object 'weight_map'");
  std::map<std::string, SafetensorsFile*> shards;
  for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      return invalid_argument(index_path + ": weight_map entry for '" + it.key() + "' must be a file name");
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      return invalid_argument(index_path + ": shard name '" + shard +
                              "' must be a plain file name in the model directory");
    auto sit = shards.find(shard);
    if (sit == shards.end()) {
      FG_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(dir + "/" + shard));
      sit = shards.emplace(shard, f.get()).first;
      ckpt.files_.push_back(std::move(f));
    }
    const SafetensorsTensor* t = sit->second->find(it.key());
    if (!t)
      return invalid_argument(sit->second->path() + ": does not contain tensor '" + it.key() +
                              "' that model.safetensors.index.json maps to it");
    ckpt.index_[it.key()] = t;
  }
  return ckpt;
}

Result<const SafetensorsTensor*> SafetensorsCheckpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return not_found(source_path_ + ": missing tensor '" + name + "'");
  return it->second;
}

}  // namespace fg
