// Tensor views and owned Buffers (see tensor.h): shape arithmetic, checked slicing, describe().
#include "core/tensor.h"

#include <sstream>

namespace fg {

Tensor Tensor::contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  FG_CHECK(shape.size() <= size_t(kMaxDims), "too many dims");
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = st;
    st *= t.shape[d];
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

std::string Tensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] " << device_name(device);
  return os.str();
}

void* Tensor::at(std::initializer_list<int64_t> idx) const {
  FG_CHECK(int(idx.size()) <= ndim);
  int64_t off = 0;
  int d = 0;
  for (int64_t i : idx) off += i * stride[d++];
  return offset_by(off);
}

void* Tensor::offset_by(int64_t elems) const {
  const int64_t block = dtype_block_size(dtype);
  FG_CHECK(elems % block == 0, "view of " + describe() + " starts inside a block of " + std::to_string(block) +
                                   " values (element offset " + std::to_string(elems) + ")");
  return static_cast<char*>(data) + int64_t(dtype_bytes(dtype, elems < 0 ? -elems : elems)) * (elems < 0 ? -1 : 1);
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  FG_CHECK(is_contiguous(), "reshape of a non-contiguous view: " + describe());
  Tensor t = contiguous(data, dtype, device, new_shape);
  FG_CHECK(t.numel() == numel(), "reshape " + describe() + " to " + t.describe());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  FG_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice out of range: " + describe());
  Tensor t = *this;
  t.data = offset_by(begin * stride[0]);
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::narrow_last(int64_t begin, int64_t end) const {
  FG_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[ndim - 1], "narrow out of range: " + describe());
  Tensor t = *this;
  t.data = offset_by(begin * stride[ndim - 1]);
  t.shape[ndim - 1] = end - begin;
  return t;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    deleter_ = std::move(o.deleter_);
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.deleter_ = nullptr;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && deleter_) deleter_(data_);
  data_ = nullptr;
  bytes_ = 0;
  deleter_ = nullptr;
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  Tensor t = Tensor::contiguous(data_, dtype, device_, shape);
  FG_CHECK(t.nbytes() <= bytes_,
           "view " + t.describe() + " larger than buffer of " + std::to_string(bytes_) + " bytes");
  return t;
}

}  // namespace fg
