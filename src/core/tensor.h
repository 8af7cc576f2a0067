// Tensor: a non-owning view (pointer, dtype, device, shape, strides in elements; for the
// block-quantized dtypes of core/dtype.h elements are values and views start on block boundaries).
// Buffer: owned memory on one device, released through the deleter of whoever allocated it.
// Views never own; every op states the shapes and layouts it accepts.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace fg {

enum class Device : uint8_t { kCpu, kCuda };

inline const char* device_name(Device d) {
  return d == Device::kCpu ? "cpu" : "cuda";
}

constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  // A contiguous row-major view of `data`.
  static Tensor contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);

  bool defined() const { return data != nullptr || numel() == 0; }
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t numel() const;
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
  bool is_contiguous() const;
  std::string describe() const;  // "bf16[3, 4] cuda"

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Address of element (i0, i1, ...) honouring strides (the start of a block for blocked dtypes).
  void* at(std::initializer_list<int64_t> idx) const;
  // Address `elems` elements past data: the offset must be a whole number of blocks (checked).
  void* offset_by(int64_t elems) const;

  // Same memory, new contiguous shape (numel must match; view must be contiguous).
  Tensor reshape(std::initializer_list<int64_t> new_shape) const;
  // Rows [begin, end) of dim 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // Columns [begin, end) of the last dim (keeps strides; result may be non-contiguous).
  Tensor narrow_last(int64_t begin, int64_t end) const;
};

// Owned device or host memory. Moves, never copies.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // A contiguous view of the start of the buffer; the shape must fit.
  Tensor view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::kCpu;
  std::function<void(void*)> deleter_;
};

}  // namespace fg
