// Parity harness (parity_harness.h): twin tensors with guard regions on the CPU and GPU backends.
#include "parity_harness.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace fg::parity {

namespace {

constexpr int64_t kGuardBytes = 512;

uint8_t sentinel_byte(int64_t i) {
  return uint8_t(0x5a ^ (i * 37));
}

float decode(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    case DType::kI32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return float(i);
    }
    default: ADD_FAILURE() << "parity harness: unsupported dtype"; return 0.0f;
  }
}

void encode(DType t, uint8_t* p, float v) {
  switch (t) {
    case DType::kF32: std::memcpy(p, &v, 4); return;
    case DType::kF16: {
      uint16_t h = f32_to_f16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kBF16: {
      uint16_t h = f32_to_bf16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kI32: {
      int32_t i = std::isnan(v) ? std::numeric_limits<int32_t>::min() : int32_t(v);
      std::memcpy(p, &i, 4);
      return;
    }
    default: ADD_FAILURE() << "parity harness: unsupported dtype"; return;
  }
}

bool is_unwritten(DType t, const uint8_t* p) {
  if (t == DType::kI32) {
    int32_t i;
    std::memcpy(&i, p, 4);
    return i == std::numeric_limits<int32_t>::min();
  }
  return std::isnan(decode(t, p));
}

}  // namespace

Backends& backends() {
  static Backends b = [] {
    Backends r;
    r.cpu = make_cpu_backend();
    auto gpu = make_cuda_backend(0);
    if (gpu.is_ok()) {
      r.gpu = std::move(gpu).value();
    } else {
      const std::string prefix = "no CUDA GPU found: ";
      const std::string& m = gpu.status().message();
      r.skip_reason = m.rfind(prefix, 0) == 0 ? m : prefix + m;
    }
    return r;
  }();
  return b;
}

std::unique_ptr<Backend> another_gpu(const BackendOptions& options) {
  auto made = make_cuda_backend(0, options);
  EXPECT_TRUE(made.is_ok()) << made.status().to_string();
  return made.is_ok() ? std::move(made).value() : nullptr;
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::kF16: return f16_to_f32(f32_to_f16(v));
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

Twin::Twin(std::vector<int64_t> shape, DType gpu_dtype, DType cpu_dtype, std::vector<int64_t> strides,
           int64_t storage_elems, int64_t offset)
    : shape_(std::move(shape)),
      strides_(std::move(strides)),
      gpu_dtype_(gpu_dtype),
      cpu_dtype_(cpu_dtype),
      offset_(offset) {
  const int nd = int(shape_.size());
  if (strides_.empty()) {
    strides_.assign(size_t(nd), 1);
    for (int d = nd - 2; d >= 0; --d) strides_[size_t(d)] = strides_[size_t(d + 1)] * shape_[size_t(d + 1)];
  }
  // Element offsets in logical row-major order.
  int64_t numel = 1;
  for (int64_t s : shape_) numel *= s;
  offsets_.reserve(size_t(numel));
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t max_off = offset_;
  for (int64_t e = 0; e < numel; ++e) {
    int64_t off = offset_;
    for (int d = 0; d < nd; ++d) off += idx[size_t(d)] * strides_[size_t(d)];
    offsets_.push_back(off);
    max_off = std::max(max_off, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < shape_[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  storage_elems_ = std::max(storage_elems, numel == 0 ? offset_ : max_off + 1);
  const int64_t gs = int64_t(dtype_size(gpu_dtype_)), cs = int64_t(dtype_size(cpu_dtype_));
  cpu_storage_.assign(size_t(storage_elems_ * cs), 0);
  gpu_image_.resize(size_t(2 * kGuardBytes + storage_elems_ * gs));
  for (size_t i = 0; i < gpu_image_.size(); ++i) gpu_image_[i] = sentinel_byte(int64_t(i));

  Backends& b = backends();
  gpu_buffer_ = b.gpu->alloc(gpu_image_.size());
  auto make_view = [&](void* base, DType dt, Device dev) {
    Tensor t;
    t.data = static_cast<uint8_t*>(base) + offset_ * int64_t(dtype_size(dt));
    t.dtype = dt;
    t.device = dev;
    t.ndim = nd;
    for (int d = 0; d < nd; ++d) {
      t.shape[size_t(d)] = shape_[size_t(d)];
      t.stride[size_t(d)] = strides_[size_t(d)];
    }
    return t;
  };
  cpu = make_view(cpu_storage_.data(), cpu_dtype_, Device::kCpu);
  gpu = make_view(static_cast<uint8_t*>(gpu_buffer_.data()) + kGuardBytes, gpu_dtype_, Device::kCuda);
  sync_to_gpu();
}

void Twin::store_host(int64_t elem, float v) {
  encode(cpu_dtype_, cpu_storage_.data() + elem * int64_t(dtype_size(cpu_dtype_)), v);
  encode(gpu_dtype_, gpu_image_.data() + kGuardBytes + elem * int64_t(dtype_size(gpu_dtype_)), v);
}

void Twin::fill_random(std::mt19937_64& rng, float lo, float hi) {
  if (gpu_dtype_ == DType::kI32) {
    std::uniform_int_distribution<int32_t> dist(int32_t(lo), int32_t(hi) - 1);
    for (int64_t e = 0; e < storage_elems_; ++e) store_host(e, float(dist(rng)));
  } else {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t e = 0; e < storage_elems_; ++e) store_host(e, round_to(gpu_dtype_, dist(rng)));
  }
  sync_to_gpu();
}

void Twin::set(const std::vector<float>& values) {
  ASSERT_EQ(values.size(), offsets_.size());
  for (size_t i = 0; i < values.size(); ++i) store_host(offsets_[i], round_to(gpu_dtype_, values[i]));
  sync_to_gpu();
}

void Twin::poison() {
  for (int64_t off : offsets_) store_host(off, std::numeric_limits<float>::quiet_NaN());
  sync_to_gpu();
}

void Twin::sync_to_gpu() {
  Backend& g = *backends().gpu;
  g.copy_from_host(gpu_buffer_.data(), gpu_image_.data(), gpu_image_.size());
  g.synchronize();
}

std::vector<uint8_t> Twin::download() const {
  std::vector<uint8_t> out(gpu_image_.size());
  Backend& g = *backends().gpu;
  g.copy_to_host(out.data(), gpu_buffer_.data(), out.size());
  g.synchronize();
  return out;
}

std::vector<float> Twin::gpu_values() const {
  std::vector<uint8_t> bytes = download();
  std::vector<float> v;
  v.reserve(offsets_.size());
  for (int64_t off : offsets_)
    v.push_back(decode(gpu_dtype_, bytes.data() + kGuardBytes + off * int64_t(dtype_size(gpu_dtype_))));
  return v;
}

std::vector<float> Twin::cpu_values() const {
  std::vector<float> v;
  v.reserve(offsets_.size());
  for (int64_t off : offsets_)
    v.push_back(decode(cpu_dtype_, cpu_storage_.data() + off * int64_t(dtype_size(cpu_dtype_))));
  return v;
}

void Twin::check_guards(const std::string& what, bool expect_written) const {
  std::vector<uint8_t> bytes = download();
  const int64_t gs = int64_t(dtype_size(gpu_dtype_));
  std::vector<bool> in_view(bytes.size(), false);
  int64_t unwritten = 0;
  for (int64_t off : offsets_) {
    int64_t at = kGuardBytes + off * gs;
    for (int64_t i = 0; i < gs; ++i) in_view[size_t(at + i)] = true;
    if (expect_written && is_unwritten(gpu_dtype_, bytes.data() + at)) ++unwritten;
  }
  int64_t clobbered = 0, first = -1;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!in_view[i] && bytes[i] != gpu_image_[i]) {
      if (first < 0) first = int64_t(i);
      ++clobbered;
    }
  }
  EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " of " << offsets_.size()
                          << " output elements left unwritten (still poisoned)";
  EXPECT_EQ(clobbered, 0) << what << ": " << clobbered << " bytes outside the view were overwritten (first at byte "
                          << first - kGuardBytes << " of the storage; guards are " << kGuardBytes << " bytes)";
}

void Twin::check_unchanged(const std::string& what) const {
  std::vector<uint8_t> bytes = download();
  int64_t changed = 0;
  for (size_t i = 0; i < bytes.size(); ++i) changed += bytes[i] != gpu_image_[i];
  EXPECT_EQ(changed, 0) << what << ": a read-only input changed (" << changed << " bytes)";
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  }
  return m;
}

}  // namespace fg::parity
