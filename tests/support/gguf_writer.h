// A small GGUF writer for tests: builds the bytes of a GGUF file (metadata of every value type,
// tensors of any ggml type with caller-given bytes) so parser tests can write valid files and
// then break them, and model tests can turn a fixture checkpoint into a GGUF file.
// Version 3, little-endian, `general.alignment` honoured (32 by default).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace fg::test {

class GgufWriter {
 public:
  // ---- metadata (in insertion order)
  void u8(const std::string& k, uint8_t v) { scalar(k, GgufValueType::kU8, &v, 1); }
  void i8(const std::string& k, int8_t v) { scalar(k, GgufValueType::kI8, &v, 1); }
  void u16(const std::string& k, uint16_t v) { scalar(k, GgufValueType::kU16, &v, 2); }
  void i16(const std::string& k, int16_t v) { scalar(k, GgufValueType::kI16, &v, 2); }
  void u32(const std::string& k, uint32_t v) { scalar(k, GgufValueType::kU32, &v, 4); }
  void i32(const std::string& k, int32_t v) { scalar(k, GgufValueType::kI32, &v, 4); }
  void f32(const std::string& k, float v) { scalar(k, GgufValueType::kF32, &v, 4); }
  void u64(const std::string& k, uint64_t v) { scalar(k, GgufValueType::kU64, &v, 8); }
  void i64(const std::string& k, int64_t v) { scalar(k, GgufValueType::kI64, &v, 8); }
  void f64(const std::string& k, double v) { scalar(k, GgufValueType::kF64, &v, 8); }
  void boolean(const std::string& k, bool v) {
    uint8_t b = v ? 1 : 0;
    scalar(k, GgufValueType::kBool, &b, 1);
  }
  void str(const std::string& k, const std::string& v) {
    key(k, GgufValueType::kString);
    put_string(kv_, v);
    ++kv_count_;
  }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, GgufValueType::kArray);
    put(kv_, uint32_t(GgufValueType::kString));
    put(kv_, uint64_t(v.size()));
    for (const std::string& s : v) put_string(kv_, s);
    ++kv_count_;
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    array(k, GgufValueType::kI32, v.data(), v.size(), 4);
  }
  void f32s(const std::string& k, const std::vector<float>& v) { array(k, GgufValueType::kF32, v.data(), v.size(), 4); }

  // ---- tensors. ne: ggml order (ne[0] = row length). bytes: the encoded data.
  void tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, const std::string& bytes) {
    tensors_.push_back({name, type, ne, bytes});
  }
  // An f32 tensor from row-major values of shape (rows, cols) or (n).
  void tensor_f32(const std::string& name, const std::vector<int64_t>& row_major_shape, const float* values) {
    std::vector<int64_t> ne(row_major_shape.rbegin(), row_major_shape.rend());
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    tensor(name, GgmlType::kF32, ne, std::string(reinterpret_cast<const char*>(values), size_t(n) * 4));
  }

  uint32_t version = 3;
  uint64_t alignment = 32;  // used for the data section; write general.alignment yourself to change it

  // The whole file.
  std::string bytes() const {
    std::string out;
    put(out, uint32_t(0x46554747));  // "GGUF"
    put(out, version);
    put(out, uint64_t(tensors_.size()));
    put(out, kv_count_);
    out += kv_;
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const Tensor& t : tensors_) {
      offsets.push_back(off);
      off = (off + t.bytes.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      put_string(out, t.name);
      put(out, uint32_t(t.ne.size()));
      for (int64_t d : t.ne) put(out, uint64_t(d));
      put(out, uint32_t(t.type));
      put(out, offsets[i]);
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out += tensors_[i].bytes;
      if (i + 1 < tensors_.size())
        out.resize(out.size() + (offsets[i + 1] - offsets[i] - tensors_[i].bytes.size()), '\0');
    }
    return out;
  }

  void write(const std::string& path) const {
    const std::string b = bytes();
    std::ofstream(path, std::ios::binary).write(b.data(), std::streamsize(b.size()));
  }

  template <class T>
  static void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put(out, uint64_t(s.size()));
    out += s;
  }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::string bytes;
  };
  void key(const std::string& k, GgufValueType t) {
    put_string(kv_, k);
    put(kv_, uint32_t(t));
  }
  void scalar(const std::string& k, GgufValueType t, const void* v, size_t n) {
    key(k, t);
    kv_.append(static_cast<const char*>(v), n);
    ++kv_count_;
  }
  void array(const std::string& k, GgufValueType t, const void* v, size_t count, size_t esize) {
    key(k, GgufValueType::kArray);
    put(kv_, uint32_t(t));
    put(kv_, uint64_t(count));
    kv_.append(static_cast<const char*>(v), count * esize);
    ++kv_count_;
  }

  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace fg::test
