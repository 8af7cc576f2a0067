// GGUF files (llama.cpp's single-file model format), memory-mapped and strictly validated.
//
// Layout (little-endian, versions 2 and 3): "GGUF", u32 version, u64 tensor count, u64 metadata
// count; the metadata as (string key, u32 value type, value); the tensor table as (string name,
// u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); padding to `general.alignment` (32 by
// default); the data section, which tensor offsets index. Strings are u64 length + bytes; arrays
// are u32 element type + u64 count + elements.
//
// Opening checks everything a later read could trip over, before it allocates anything whose size
// comes from the file: every length, count and offset against the bytes that remain, tensor
// shapes and types, byte sizes, alignment, overlaps and duplicate names. Every error is one line
// naming the file and the problem. Metadata strings and tensor data are views into the mapping,
// valid as long as the GgufFile lives.
//
// This layer only reads the container: it knows nothing of architectures, tokenizers or backends
// (model/gguf_model.h and tokenizer/gguf_tokenizer.h interpret the contents).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_quant.h"

namespace fg {

// Metadata value types of the format.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars and arrays of numbers point at their bytes in the mapping.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType elem_type = GgufValueType::kU8;  // arrays only
  uint64_t count = 0;                            // arrays only: number of elements
  const uint8_t* data = nullptr;                 // scalars and arrays of numbers/bools: the packed bytes
  std::string_view str;                          // kString
  std::vector<std::string_view> strings;         // arrays of strings
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  const GgmlTypeInfo* type_info = nullptr;
  std::vector<int64_t> ne;        // ggml order: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;            // from the start of the data section
  const uint8_t* data = nullptr;  // into the mapping; nbytes bytes
  size_t nbytes = 0;

  int64_t numel() const;
  // Row-major shape, outermost first (ne reversed): a [rows, cols] matrix has ne = {cols, rows}.
  std::vector<int64_t> shape() const;
  std::string shape_string() const;  // "[576, 49152]" (row-major)
};

class GgufFile {
 public:
  // Maps and validates `path`.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Validates a file image already in memory (tests); `bytes` must outlive the result. `path`
  // names it in messages.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* bytes, size_t size, const std::string& path);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }

  // ---- metadata
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed reads; a missing key is NotFound, a value of another type InvalidArgument, both naming
  // the file and the key. Integers accept every integer type (not bool) that fits int64; floats
  // accept f32, f64 and integers.
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  Result<std::span<const std::string_view>> get_string_array(std::string_view key) const;
  // Arrays of numbers, converted (integers: any integer element type; floats: f32/f64).
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;

  // ---- tensors, in file order
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status parse_all(const uint8_t* bytes, size_t size);
  Status wrong_type(std::string_view key, const GgufValue& v, const char* expected) const;

  std::string path_;
  const uint8_t* map_ = nullptr;  // the mapping when open() made one (unmapped on destruction)
  size_t map_size_ = 0;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// True when `path` names a file ending in ".gguf".
bool is_gguf_path(const std::string& path);

// Where a --model path leads: the .gguf file itself, or the one .gguf file of a folder that has no
// config.json (a Hugging Face folder wins). Returns "" when the path is no GGUF model (a Hugging
// Face folder, or a folder without .gguf files); InvalidArgument when a folder holds several
// .gguf files, naming them.
Result<std::string> find_gguf_model(const std::string& path);

}  // namespace fg
