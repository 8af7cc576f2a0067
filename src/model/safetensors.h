// Safetensors checkpoints, memory-mapped and strictly validated.
//
// A file is: 8 bytes little-endian u64 N, N bytes of JSON header {name: {dtype, shape,
// data_offsets: [begin, end)}, "__metadata__": {...}}, then the data section (offsets are relative
// to its start). Opening checks everything that could make a later read go out of bounds or
// return garbage: truncated files, header length beyond the file, invalid JSON, unknown dtypes,
// offsets outside the data section, overlapping tensors, byte sizes that disagree with dtype and
// shape. Every error is one line naming the file and the problem.
//
// A checkpoint is a directory with `model.safetensors`, or with `model.safetensors.index.json`
// whose weight_map names the shard of each tensor.
// The mapping lives as long as the SafetensorsFile; tensor data pointers point into it.
// Never depends on a backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace fg {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as written in the header: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // set for F32, F16, BF16, F8_E4M3, I32, I64, U8; nullopt for others
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the file mapping; nbytes bytes
  size_t nbytes = 0;
  std::string file;  // the file it lives in (for messages)

  int64_t numel() const;
  std::string shape_string() const;  // "[64, 128]"
};

// A read-only memory mapping of one whole file.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// Validates a whole file image (length prefix, header, data section) of `size` bytes; the tensors'
// data pointers point into `bytes`. Used by SafetensorsFile::open on its mapping, and by the fuzz
// target on bytes in memory. `path` names the file in messages.
Result<std::map<std::string, SafetensorsTensor>> parse_safetensors_image(const uint8_t* bytes, size_t size,
                                                                         const std::string& path);

// Parses and validates a header against a data section of `data_size` bytes; used by
// parse_safetensors_image and by tests. `data` may be null when only validation is wanted.
Result<std::map<std::string, SafetensorsTensor>> parse_safetensors_header(const std::string& header_json,
                                                                          const uint8_t* data, size_t data_size,
                                                                          const std::string& path);

// All tensors of a checkpoint directory (single file or sharded).
class SafetensorsCheckpoint {
 public:
  static Result<SafetensorsCheckpoint> open(const std::string& dir);

  // The tensor, or NotFound naming the checkpoint file that should have held it.
  Result<const SafetensorsTensor*> get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  size_t num_tensors() const { return index_.size(); }

 private:
  std::string source_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> index_;
};

}  // namespace fg
