// GGUF container parsing and validation (see gguf.h). The Cursor below never reads a byte it has
// not first checked is inside the file, and every count that sizes an allocation is first bounded
// by the bytes that could hold it.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fg {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;                    // the format's limit
constexpr int64_t kMaxDim = int64_t(1) << 40;  // far beyond any real tensor, small enough to multiply
constexpr int kMaxArrayDepth = 4;              // arrays of arrays of ...: refuse deeper nesting

size_t value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool known_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::kF64);
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64: return true;
    default: return false;
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// An integer element as int64; false when a u64 does not fit.
bool load_integer(GgufValueType t, const uint8_t* p, int64_t& out) {
  switch (t) {
    case GgufValueType::kU8: out = load<uint8_t>(p); return true;
    case GgufValueType::kI8: out = load<int8_t>(p); return true;
    case GgufValueType::kU16: out = load<uint16_t>(p); return true;
    case GgufValueType::kI16: out = load<int16_t>(p); return true;
    case GgufValueType::kU32: out = load<uint32_t>(p); return true;
    case GgufValueType::kI32: out = load<int32_t>(p); return true;
    case GgufValueType::kI64: out = load<int64_t>(p); return true;
    case GgufValueType::kU64: {
      const uint64_t u = load<uint64_t>(p);
      if (u > uint64_t(INT64_MAX)) return false;
      out = int64_t(u);
      return true;
    }
    default: return false;
  }
}

// Reads the file front to back; every read is bounds-checked and errors say what was being read
// and at which byte.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  Status truncated(const std::string& what) const {
    return invalid_argument(path_ + ": truncated GGUF file: " + what + " at byte " + std::to_string(pos_) +
                            " runs past the end of the file (" + std::to_string(size_) + " bytes)");
  }

  Status skip(uint64_t n, const std::string& what) {
    if (n > remaining()) return truncated(what);
    pos_ += size_t(n);
    return Status::ok();
  }

  template <class T>
  Status read(T& out, const std::string& what) {
    if (sizeof(T) > remaining()) return truncated(what);
    std::memcpy(&out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string_view& out, const std::string& what) {
    uint64_t len = 0;
    FG_RETURN_IF_ERROR(read(len, what + " (length)"));
    if (len > remaining())
      return invalid_argument(path_ + ": " + what + " at byte " + std::to_string(pos_ - 8) + " claims " +
                              std::to_string(len) + " bytes but only " + std::to_string(remaining()) +
                              " remain in the file");
    out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += size_t(len);
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  const std::string& path_;
  size_t pos_ = 0;
};

// Printable form of a name for messages: control bytes and quotes escaped, cut at 80 bytes.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'') {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: return "uint8";
    case GgufValueType::kI8: return "int8";
    case GgufValueType::kU16: return "uint16";
    case GgufValueType::kI16: return "int16";
    case GgufValueType::kU32: return "uint32";
    case GgufValueType::kI32: return "int32";
    case GgufValueType::kF32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "uint64";
    case GgufValueType::kI64: return "int64";
    case GgufValueType::kF64: return "float64";
  }
  return "?";
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return std::vector<int64_t>(ne.rbegin(), ne.rend());
}

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  const std::vector<int64_t> sh = shape();
  for (size_t i = 0; i < sh.size(); ++i) s += (i ? ", " : "") + std::to_string(sh[i]);
  return s + "]";
}

// ---- open / parse

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": file not found");
    return Status(ErrorCode::kIo, path + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const size_t size = size_t(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s(ErrorCode::kIo, path + ": cannot map (" + std::strerror(errno) + ")");
      ::close(fd);
      return s;
    }
    f->map_ = static_cast<const uint8_t*>(p);
    f->map_size_ = size;
  }
  ::close(fd);
  FG_RETURN_IF_ERROR(f->parse_all(f->map_, size));
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* bytes, size_t size, const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  FG_RETURN_IF_ERROR(f->parse_all(bytes, size));
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

Status GgufFile::parse_all(const uint8_t* bytes, size_t size) {
  size_ = size;
  Cursor c(bytes, size, path_);
  uint32_t magic = 0;
  if (size < 4) return invalid_argument(path_ + ": not a GGUF file (" + std::to_string(size) + " bytes, no magic)");
  FG_RETURN_IF_ERROR(c.read(magic, "magic"));
  if (magic != kMagic)
    return invalid_argument(path_ + ": not a GGUF file (bad magic: the file does not start with GGUF)");
  FG_RETURN_IF_ERROR(c.read(version_, "version"));
  if (version_ != 2 && version_ != 3)
    return unsupported(path_ + ": GGUF version " + std::to_string(version_) +
                       " is not supported (flashgen reads versions 2 and 3, little-endian)");
  uint64_t tensor_count = 0, kv_count = 0;
  FG_RETURN_IF_ERROR(c.read(tensor_count, "tensor count"));
  FG_RETURN_IF_ERROR(c.read(kv_count, "metadata count"));
  // Smallest entries: a metadata pair is an empty key (8) + type (4) + a one-byte value; a tensor
  // is an empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  if (kv_count > c.remaining() / 13)
    return invalid_argument(path_ + ": metadata count " + std::to_string(kv_count) + " cannot fit in the " +
                            std::to_string(c.remaining()) + " bytes left in the file (truncated or corrupt?)");
  if (tensor_count > c.remaining() / 32)
    return invalid_argument(path_ + ": tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
                            std::to_string(c.remaining()) + " bytes left in the file (truncated or corrupt?)");

  // ---- metadata
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = "metadata entry " + std::to_string(i);
    std::string_view key;
    FG_RETURN_IF_ERROR(c.read_string(key, where + " key"));
    const std::string key_s(key);
    const std::string at = "metadata '" + printable(key) + "'";
    uint32_t type = 0;
    FG_RETURN_IF_ERROR(c.read(type, at + " type"));
    if (!known_value_type(type))
      return invalid_argument(path_ + ": " + at + " has unknown value type " + std::to_string(type));
    GgufValue v;
    v.type = GgufValueType(type);
    if (v.type == GgufValueType::kString) {
      FG_RETURN_IF_ERROR(c.read_string(v.str, at));
    } else if (v.type == GgufValueType::kArray) {
      // Nested arrays are walked (to find where they end) but their contents are not kept.
      struct Level {
        GgufValueType elem;
        uint64_t left;
      };
      std::vector<Level> stack;
      uint32_t elem = 0;
      uint64_t count = 0;
      FG_RETURN_IF_ERROR(c.read(elem, at + " element type"));
      FG_RETURN_IF_ERROR(c.read(count, at + " element count"));
      if (!known_value_type(elem))
        return invalid_argument(path_ + ": " + at + " has unknown array element type " + std::to_string(elem));
      v.elem_type = GgufValueType(elem);
      v.count = count;
      const size_t esize = value_size(v.elem_type);
      if (esize > 0) {
        if (count > c.remaining() / esize)
          return invalid_argument(path_ + ": " + at + " claims " + std::to_string(count) + " elements of " +
                                  gguf_value_type_name(v.elem_type) + " but the file ends first");
        v.data = c.here();
        FG_RETURN_IF_ERROR(c.skip(count * esize, at));
      } else if (v.elem_type == GgufValueType::kString) {
        if (count > c.remaining() / 8)
          return invalid_argument(path_ + ": " + at + " claims " + std::to_string(count) +
                                  " strings but the file ends first");
        v.strings.resize(size_t(count));
        for (uint64_t k = 0; k < count; ++k)
          FG_RETURN_IF_ERROR(c.read_string(v.strings[size_t(k)], at + " element " + std::to_string(k)));
      } else {  // array of arrays
        stack.push_back({GgufValueType::kArray, count});
        while (!stack.empty()) {
          if (stack.back().left == 0) {
            stack.pop_back();
            continue;
          }
          --stack.back().left;
          const GgufValueType t = stack.back().elem;
          if (t == GgufValueType::kString) {
            std::string_view s;
            FG_RETURN_IF_ERROR(c.read_string(s, at + " nested string"));
          } else if (t == GgufValueType::kArray) {
            if (stack.size() >= size_t(kMaxArrayDepth))
              return invalid_argument(path_ + ": " + at + " nests arrays more than " + std::to_string(kMaxArrayDepth) +
                                      " deep");
            uint32_t e = 0;
            uint64_t n = 0;
            FG_RETURN_IF_ERROR(c.read(e, at + " nested element type"));
            FG_RETURN_IF_ERROR(c.read(n, at + " nested element count"));
            if (!known_value_type(e))
              return invalid_argument(path_ + ": " + at + " has unknown array element type " + std::to_string(e));
            const size_t es = value_size(GgufValueType(e));
            if (es > 0) {
              if (n > c.remaining() / es) return c.truncated(at + " nested array");
              FG_RETURN_IF_ERROR(c.skip(n * es, at + " nested array"));
            } else {
              if (n > c.remaining() / 8) return c.truncated(at + " nested array");
              stack.push_back({GgufValueType(e), n});
            }
          } else {
            FG_RETURN_IF_ERROR(c.skip(value_size(t), at + " nested value"));
          }
        }
      }
    } else {
      v.data = c.here();
      FG_RETURN_IF_ERROR(c.skip(value_size(v.type), at));
    }
    if (!kv_.emplace(key_s, std::move(v)).second)
      return invalid_argument(path_ + ": metadata key '" + printable(key) + "' appears twice");
  }

  if (const GgufValue* a = find("general.alignment")) {
    int64_t align = 0;
    if (!is_integer(a->type) || !load_integer(a->type, a->data, align) || align <= 0 || align > (1 << 20) ||
        (align & (align - 1)) != 0)
      return invalid_argument(path_ + ": general.alignment must be a power of two up to 1 MiB");
    alignment_ = uint64_t(align);
  } else {
    alignment_ = kDefaultAlignment;
  }

  // ---- tensor table
  tensors_.reserve(size_t(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    std::string_view name;
    FG_RETURN_IF_ERROR(c.read_string(name, "tensor " + std::to_string(i) + " name"));
    t.name = std::string(name);
    const std::string at = "tensor '" + printable(name) + "'";
    uint32_t n_dims = 0;
    FG_RETURN_IF_ERROR(c.read(n_dims, at + " dimension count"));
    if (n_dims < 1 || n_dims > uint32_t(kMaxDims))
      return invalid_argument(path_ + ": " + at + " has " + std::to_string(n_dims) + " dimensions (1 to " +
                              std::to_string(kMaxDims) + " allowed)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      FG_RETURN_IF_ERROR(c.read(ne, at + " dimension"));
      if (ne == 0 || ne > uint64_t(kMaxDim))
        return invalid_argument(path_ + ": " + at + " has dimension " + std::to_string(ne) + " (must be 1 to 2^40)");
      if (numel > (int64_t(1) << 50) / int64_t(ne))
        return invalid_argument(path_ + ": " + at + " has more than 2^50 elements");
      numel *= int64_t(ne);
      t.ne.push_back(int64_t(ne));
    }
    uint32_t type = 0;
    FG_RETURN_IF_ERROR(c.read(type, at + " type"));
    t.type_info = ggml_type_info(type);
    if (!t.type_info) return invalid_argument(path_ + ": " + at + " has unknown ggml type id " + std::to_string(type));
    t.type = t.type_info->type;
    if (t.ne[0] % t.type_info->block_size != 0)
      return invalid_argument(path_ + ": " + at + " of type " + t.type_info->name + " has rows of " +
                              std::to_string(t.ne[0]) + " elements, not a multiple of its block size " +
                              std::to_string(t.type_info->block_size));
    t.nbytes = size_t(numel / t.type_info->block_size * t.type_info->block_bytes);
    FG_RETURN_IF_ERROR(c.read(t.offset, at + " offset"));
    if (t.offset % alignment_ != 0)
      return invalid_argument(path_ + ": " + at + " starts at data offset " + std::to_string(t.offset) +
                              ", not a multiple of the alignment " + std::to_string(alignment_));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      return invalid_argument(path_ + ": tensor '" + printable(name) + "' appears twice");
    tensors_.push_back(std::move(t));
  }

  // ---- data section: every tensor inside the file, none overlapping
  const uint64_t data_start = (uint64_t(c.pos()) + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_start <= size ? size - data_start : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return invalid_argument(path_ + ": tensor '" + printable(t.name) + "' data [" +
                              std::to_string(data_start + t.offset) + ", " +
                              std::to_string(data_start + t.offset + t.nbytes) + ") lies past the end of the file (" +
                              std::to_string(size) + " bytes): truncated?");
    t.data = bytes + data_start + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* prev = by_offset[i - 1];
    if (prev->offset + prev->nbytes > by_offset[i]->offset)
      return invalid_argument(path_ + ": tensors '" + printable(prev->name) + "' and '" +
                              printable(by_offset[i]->name) + "' overlap in the data section");
  }
  return Status::ok();
}

// ---- metadata access

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

Status GgufFile::wrong_type(std::string_view key, const GgufValue& v, const char* expected) const {
  std::string got = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::kArray) got += std::string(" of ") + gguf_value_type_name(v.elem_type);
  return invalid_argument(path_ + ": metadata '" + std::string(key) + "' must be " + expected + ", got " + got);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  int64_t out = 0;
  if (!is_integer(v->type)) return wrong_type(key, *v, "an integer");
  if (!load_integer(v->type, v->data, out)) return wrong_type(key, *v, "an integer below 2^63");
  return out;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type == GgufValueType::kF32) return double(load<float>(v->data));
  if (v->type == GgufValueType::kF64) return load<double>(v->data);
  int64_t i = 0;
  if (is_integer(v->type) && load_integer(v->type, v->data, i)) return double(i);
  return wrong_type(key, *v, "a number");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type != GgufValueType::kBool) return wrong_type(key, *v, "a bool");
  return v->data[0] != 0;
}

Result<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type != GgufValueType::kString) return wrong_type(key, *v, "a string");
  return v->str;
}

Result<std::span<const std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString)
    return wrong_type(key, *v, "an array of strings");
  return std::span<const std::string_view>(v->strings);
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type != GgufValueType::kArray || !is_integer(v->elem_type)) return wrong_type(key, *v, "an array of integers");
  std::vector<int64_t> out(size_t(v->count));
  const size_t es = value_size(v->elem_type);
  for (size_t i = 0; i < out.size(); ++i)
    if (!load_integer(v->elem_type, v->data + i * es, out[i])) return wrong_type(key, *v, "integers below 2^63");
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_ + ": metadata '" + std::string(key) + "' is missing");
  if (v->type != GgufValueType::kArray || (v->elem_type != GgufValueType::kF32 && v->elem_type != GgufValueType::kF64))
    return wrong_type(key, *v, "an array of float32");
  std::vector<float> out(size_t(v->count));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = v->elem_type == GgufValueType::kF32 ? load<float>(v->data + 4 * i) : float(load<double>(v->data + 8 * i));
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- model paths

bool is_gguf_path(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

Result<std::string> find_gguf_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) return is_gguf_path(path) ? path : std::string();
  if (!fs::is_directory(p, ec) || fs::exists(p / "config.json", ec)) return std::string();
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (is_gguf_path(e.path().filename().string()) && e.is_regular_file(ec)) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  if (found.size() <= 1) return found.empty() ? std::string() : found[0];
  std::string names;
  for (const std::string& f : found) names += (names.empty() ? "" : ", ") + fs::path(f).filename().string();
  return invalid_argument(path + ": the folder holds " + std::to_string(found.size()) + " .gguf files (" + names +
                          "); pass one of them with --model FILE");
}

}  // namespace fg
