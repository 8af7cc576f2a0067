// Weight naming, validation, fusion and upload (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/dequant.h"

namespace fg {
namespace {

constexpr size_t kAlign = 256;  // every tensor starts on a 256-byte boundary of the arena

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One destination tensor assembled from one or more checkpoint tensors (or slices of them, for a
// tensor-parallel shard), concatenated along dim 0, then zero rows up to `shape`.
struct Assembly {
  Tensor* target = nullptr;
  bool matrix = false;  // a GEMM weight or the embedding table: kept in the backend's weight dtype
  std::vector<int64_t> shape;
  std::vector<WeightTensor> parts;
  std::vector<WeightSlice> slices;  // per part
  int64_t pad_numel = 0;            // zero elements after the parts
  bool quantize_fp8 = false;        // float parts become FP8 with per-channel scales (--quantization fp8)
  Tensor* fp8_scales = nullptr;     // where the [n] f32 scales go if the backend keeps the FP8 codes
  size_t scale_offset = 0;
  DType dtype = DType::kF32;  // what the target holds (set by upload)
  bool plus_one = false;      // store 1 + w (Gemma's RMSNorm weights)
  size_t arena_offset = 0;
};

// How add() transforms and shapes the assembly.
struct AddOptions {
  bool matrix = false;              // a GEMM weight or the embedding table (see Assembly)
  bool plus_one = false;            // see Assembly
  bool linear = false;              // a linear layer's weight (what --quantization fp8 quantizes)
  Tensor* fp8_scales = nullptr;     // the scales' target, for a linear weight without a bias
  std::vector<int64_t> view_shape;  // the target's shape when not the concatenation's (same numel)
  int64_t rows = 0;                 // > 0: the target's rows, zero-padded past the parts' (a vocabulary shard)
};

// A checkpoint tensor the planner reads, whole or sliced.
struct PartSpec {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's expected shape
  WeightSlice slice = {};
};

int64_t sliced_numel(const WeightTensor& t, const WeightSlice& s) {
  if (s.dim < 0) return t.numel();
  return t.numel() / t.shape[size_t(s.dim)] * (s.end - s.begin);
}

// The slice's values as stored: a pointer into the whole tensor `host` (rows), or into `buf`
// (columns, gathered row by row). Reads only the slice's bytes.
const void* read_slice(const WeightTensor& t, const WeightSlice& s, const void* host, std::vector<uint8_t>& buf) {
  if (s.dim < 0) return host;
  const DType dt = *t.dtype;
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  if (s.dim == 0) return static_cast<const char*>(host) + dtype_bytes(dt, s.begin * cols);
  const size_t row = dtype_bytes(dt, cols), skip = dtype_bytes(dt, s.begin), take = dtype_bytes(dt, s.end - s.begin);
  buf.resize(size_t(t.shape[0]) * take);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    std::memcpy(buf.data() + size_t(r) * take, static_cast<const char*>(host) + size_t(r) * row + skip, take);
  return buf.data();
}

// Moves the slice's elements of a row-major [rows, cols] tensor `v` to its front, in order (an FP8
// part is made whole on the host, then sliced: its scales span the whole tensor).
template <class T>
void compact_slice(T* v, const std::vector<int64_t>& shape, const WeightSlice& s) {
  if (s.dim < 0) return;
  const int64_t cols = shape.size() > 1 ? shape[1] : 1;
  if (s.dim == 0) {
    std::memmove(v, v + s.begin * cols, size_t((s.end - s.begin) * cols) * sizeof(T));
    return;
  }
  const int64_t take = s.end - s.begin;
  for (int64_t r = 0; r < shape[0]; ++r) std::memmove(v + r * take, v + r * cols + s.begin, size_t(take) * sizeof(T));
}

AddOptions matrix_options(bool linear) {
  AddOptions o;
  o.matrix = true;
  o.linear = linear;
  return o;
}

size_t stored_bytes(const WeightTensor& t, const WeightSlice& s) {
  return dtype_bytes(*t.dtype, sliced_numel(t, s));
}

// The dtype a part is kept as before the backend's choice: f8_e4m3 for the float parts an
// assembly quantizes, else as stored.
DType part_dtype(const Assembly& a, const WeightTensor& p) {
  return a.quantize_fp8 && !dtype_is_blocked(*p.dtype) ? DType::kF8E4M3 : *p.dtype;
}

// The scales an FP8 assembly's codes can be kept with for Backend::gemm_fp8 (a linear layer's
// weight without a bias, k a multiple of 16), or none: one per output channel when every part has
// them (or is quantized at load so); 128 x 128 blocks when every part is a fine-grained FP8 tensor
// whose kept rows and columns are whole blocks of it (the last part's rows and a slice that ends at
// the tensor's edge may end in a partial block), so the parts' blocks tile the assembly. Either
// only where the backend keeps codes of that scaling (Backend::keeps_fp8_codes).
std::optional<Fp8Blocks> kept_fp8_scaling(const Assembly& a, const Backend& backend) {
  if (a.fp8_scales == nullptr || a.shape.size() != 2 || a.shape[1] % 16 != 0 || a.pad_numel != 0) return std::nullopt;
  bool per_channel = true, blocks = true;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const WeightTensor& p = a.parts[i];
    const WeightSlice& s = a.slices[i];
    per_channel = per_channel && (*p.dtype != DType::kF8E4M3 || p.fp8_blocks.rows == 1);
    const bool square = *p.dtype == DType::kF8E4M3 && p.fp8_blocks.rows == kFp8Block && p.fp8_blocks.cols == kFp8Block;
    const bool whole_slice =
        s.dim < 0 || (s.begin % kFp8Block == 0 && (s.end % kFp8Block == 0 || s.end == p.shape[size_t(s.dim)]));
    const int64_t rows = s.dim == 0 ? s.end - s.begin : p.shape[0];
    blocks = blocks && square && whole_slice && (i + 1 == a.parts.size() || rows % kFp8Block == 0);
  }
  if (per_channel && backend.keeps_fp8_codes(Fp8Scaling::kPerChannel)) return Fp8Blocks{1, a.shape[1]};
  if (blocks && backend.keeps_fp8_codes(Fp8Scaling::kBlock128)) return Fp8Blocks{kFp8Block, kFp8Block};
  return std::nullopt;
}

// The dtype an assembly is kept in on `backend`: Gemma's 1 + w norm weights in f32 (as
// transformers computes them), other norms and biases in the activation dtype; a
// matrix in the backend's weight dtype for its stored dtype, or for f32 (the parts' exact values)
// when its parts are stored in different dtypes.
DType target_dtype(const Assembly& a, const Backend& backend) {
  if (a.plus_one) return DType::kF32;  // 1 + w would lose w's low bits in bf16
  if (!a.matrix) return backend.act_dtype();
  const DType first = part_dtype(a, a.parts.front());
  for (const WeightTensor& p : a.parts)
    if (part_dtype(a, p) != first) return backend.weight_dtype(DType::kF32);
  const DType kept = backend.weight_dtype(first);
  if (kept != DType::kF8E4M3) return kept;
  return kept_fp8_scaling(a, backend) ? kept : backend.weight_dtype(DType::kF32);
}

// Index of the first NaN or infinity among n values, or -1. Tests the exponent bits, so it reads
// each value once without converting it.
template <class Bits>
int64_t first_non_finite_bits(const void* data, int64_t n, Bits exponent_mask) {
  const auto* v = static_cast<const Bits*>(data);
  for (int64_t i = 0; i < n; ++i) {
    Bits x;
    std::memcpy(&x, v + i, sizeof(Bits));  // safetensors data need not be aligned
    if ((x & exponent_mask) == exponent_mask) return i;
  }
  return -1;
}

int64_t first_non_finite(const void* data, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32: return first_non_finite_bits<uint32_t>(data, n, 0x7f800000u);
    case DType::kF16: return first_non_finite_bits<uint16_t>(data, n, uint16_t(0x7c00));
    case DType::kBF16: return first_non_finite_bits<uint16_t>(data, n, uint16_t(0x7f80));
    case DType::kF8E4M3: return first_non_finite_bits<uint8_t>(data, n, uint8_t(0x7f));  // S.1111.111 is NaN
    default: return -1;
  }
}

class Planner {
 public:
  Planner(const WeightSource& source, const WeightLoadOptions& options) : source_(source), options_(options) {}

  // Requires each named tensor with its expected shape; the target gets the row concatenation of
  // their slices.
  Status add(Tensor* target, const std::vector<PartSpec>& parts, const AddOptions& options = {}) {
    Assembly a;
    a.target = target;
    a.matrix = options.matrix;
    a.plus_one = options.plus_one;
    a.quantize_fp8 = options.linear && options_.quantization == LoadQuantization::kFp8;
    a.fp8_scales = options.fp8_scales;
    for (const auto& [name, shape, slice] : parts) {
      FG_ASSIGN_OR_RETURN(WeightTensor t, source_.find(name));
      if (!t.dtype)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has dtype " + t.dtype_name + ", expected " +
                                source_.loadable_types());
      if (t.shape != shape)
        return invalid_argument(t.file + ": tensor '" + t.name + "' has shape " + t.shape_string() + ", expected " +
                                shape_str(shape) + " for this " + source_.config_name());
      FG_CHECK(t.shape.back() % dtype_block_size(*t.dtype) == 0,
               "weight source gave " + t.name + " rows that are not whole blocks");
      std::vector<int64_t> part_shape = shape;
      if (slice.dim >= 0) {
        FG_CHECK(slice.dim < int(shape.size()) && slice.begin >= 0 && slice.begin <= slice.end &&
                     slice.end <= shape[size_t(slice.dim)],
                 "weight slice outside " + t.name);
        const int64_t block = dtype_block_size(*t.dtype);
        if (slice.dim == 1 && (slice.begin % block != 0 || slice.end % block != 0))
          return invalid_argument(
              t.file + ": tensor '" + t.name + "' (" + t.dtype_name + ") cannot be split at column " +
              std::to_string(slice.begin % block ? slice.begin : slice.end) + ": its quantized blocks hold " +
              std::to_string(block) + " columns; use a smaller --tensor-parallel-size");
        part_shape[size_t(slice.dim)] = slice.end - slice.begin;
      }
      a.parts.push_back(std::move(t));
      a.slices.push_back(slice);
      if (a.shape.empty())
        a.shape = part_shape;
      else
        a.shape[0] += part_shape[0];
    }
    if (options.rows > 0) {
      FG_CHECK(options.rows >= a.shape[0], "padded weight rows below its parts'");
      a.pad_numel = (options.rows - a.shape[0]) * (a.shape.size() > 1 ? a.shape[1] : 1);
      a.shape[0] = options.rows;
    }
    if (!options.view_shape.empty()) a.shape = options.view_shape;
    assemblies_.push_back(std::move(a));
    return Status::ok();
  }

  // Bytes read out of the source's tensors (the slices) by upload.
  int64_t bytes_read() const { return bytes_read_; }

  Status upload(Backend& backend, Buffer& arena) {
    size_t total = 0, staging_bytes = 0, f32_values = 0, zero_bytes = 0;
    for (Assembly& a : assemblies_) {
      a.dtype = target_dtype(a, backend);
      a.arena_offset = total;
      int64_t numel = 1;
      for (int64_t d : a.shape) numel *= d;
      total += align_up(dtype_bytes(a.dtype, numel));
      if (a.dtype == DType::kF8E4M3) {
        a.scale_offset = total;
        const Fp8Blocks b = *kept_fp8_scaling(a, backend);
        const int64_t scales =
            b.rows == 1 ? a.shape[0] : fp8_scale_rows(a.shape[0], b) * fp8_block_scale_stride(a.shape[1]);
        total += align_up(size_t(scales) * 4);
        for (const WeightTensor& p : a.parts) f32_values = std::max(f32_values, size_t(p.numel()));
        continue;
      }
      for (size_t i = 0; i < a.parts.size(); ++i) {
        const WeightTensor& p = a.parts[i];
        if (as_stored(a, p)) continue;
        const size_t numel = size_t(sliced_numel(p, a.slices[i]));
        // Converted on the device from the stored form, or from f32 values made on the host (an
        // FP8 part's for the whole tensor).
        if (host_values(a, p)) {
          f32_values = std::max(f32_values, fp8_values(a, p) ? size_t(p.numel()) : numel);
          if (a.dtype != DType::kF32) staging_bytes = std::max(staging_bytes, numel * 4);
        } else {
          staging_bytes = std::max(staging_bytes, stored_bytes(p, a.slices[i]));
        }
      }
      zero_bytes = std::max(zero_bytes, dtype_bytes(a.dtype, a.pad_numel));
    }
    arena = backend.alloc(std::max<size_t>(total, kAlign));
    if (!arena.data() && total > 0)
      return Status(ErrorCode::kResourceExhausted,
                    "cannot allocate " + std::to_string(total) + " bytes for the weights on " + backend.name());
    Buffer staging;
    if (staging_bytes > 0) staging = backend.alloc(staging_bytes);
    std::vector<uint8_t> scratch;           // tensors the source reorders on the host (GGUF q/k rows)
    std::vector<float> values(f32_values);  // blocks or FP8 dequantized (or 1 + w) on the host
    std::vector<float> scales;              // an FP8 part's scales
    std::vector<uint8_t> columns;           // a column slice gathered from the source's rows
    const std::vector<uint8_t> zeros(zero_bytes);
    char* base = static_cast<char*>(arena.data());
    for (Assembly& a : assemblies_) {
      char* dst = base + a.arena_offset;
      if (a.dtype == DType::kF8E4M3) {
        FG_RETURN_IF_ERROR(upload_fp8_codes(backend, a, base, scratch, values, scales));
        continue;
      }
      for (size_t part = 0; part < a.parts.size(); ++part) {
        const WeightTensor& p = a.parts[part];
        const int64_t numel = sliced_numel(p, a.slices[part]);
        const DType stored = *p.dtype;
        const void* whole = source_.read(p, scratch);
        const void* host = read_slice(p, a.slices[part], whole, columns);
        // (An FP8 part's values are made for the whole tensor, then sliced.)
        bytes_read_ += int64_t(dtype_bytes(stored, fp8_values(a, p) ? p.numel() : numel));
        // A NaN or infinity in a weight poisons every activation it touches; refuse the file.
        if (const int64_t bad = first_non_finite(host, stored, numel); bad >= 0) {
          backend.synchronize();  // copies already queued still read the staging buffer
          return invalid_argument(p.file + ": tensor '" + p.name + "' holds a NaN or infinite value at element " +
                                  std::to_string(bad) + " (of " + std::to_string(numel) +
                                  "); the checkpoint is corrupt");
        }
        if (as_stored(a, p)) {
          backend.copy_from_host(dst, host, dtype_bytes(stored, numel));
        } else {
          DType from = stored;
          if (host_values(a, p)) {
            if (fp8_values(a, p)) {
              // The whole tensor's FP8 values (its block or channel scales, or the per-channel
              // quantization, span it), then the slice's: the same values every split keeps.
              const int64_t rows = p.shape[0], cols = p.numel() / rows;
              if (stored == DType::kF8E4M3) {
                if (Status s = source_.read_fp8_scales(p, scales); !s.is_ok()) {
                  backend.synchronize();
                  return s;
                }
                fp8_dequantize(static_cast<const uint8_t*>(whole), scales.data(), rows, cols, p.fp8_blocks,
                               values.data());
              } else {
                dequantize(stored, whole, values.data(), p.numel());
                fp8_quantize_rows(values.data(), rows, cols, nullptr, nullptr);
              }
              compact_slice(values.data(), p.shape, a.slices[part]);
            } else {
              dequantize(stored, host, values.data(), numel);
            }
            // 1 + w in f32, as transformers computes (1.0 + weight.float())
            if (a.plus_one)
              for (int64_t i = 0; i < numel; ++i) values[size_t(i)] += 1.0f;
            host = values.data();
            from = DType::kF32;
          }
          if (from == a.dtype) {
            backend.copy_from_host(dst, host, size_t(numel) * 4);
          } else {
            backend.copy_from_host(staging.data(), host, dtype_bytes(from, numel));
            Tensor src = Tensor::contiguous(staging.data(), from, backend.device(), {numel});
            Tensor out = Tensor::contiguous(dst, a.dtype, backend.device(), {numel});
            backend.convert(src, out);
          }
        }
        // Copies are asynchronous: the host buffers are rewritten by the next part.
        if (whole == scratch.data() || host == columns.data() || host == values.data()) backend.synchronize();
        dst += dtype_bytes(a.dtype, numel);
      }
      if (a.pad_numel > 0) {  // a vocabulary shard's padding rows: zero bytes are zero values in every dtype
        backend.copy_from_host(dst, zeros.data(), dtype_bytes(a.dtype, a.pad_numel));
      }
      set_view(*a.target, base + a.arena_offset, a.dtype, a.shape, backend.device());
    }
    backend.synchronize();  // the staging buffer and the file mapping may go after this
    return Status::ok();
  }

 private:
  // An assembly kept as e4m3 codes with its scales (kept_fp8_scaling): checkpoint codes copied as
  // stored, float parts quantized on the host (fp8_quantize_rows); the scales of all parts, in row
  // order, into its scale tensor. A part is made whole, then sliced: a row slice (column-parallel)
  // keeps its rows' (or row blocks') scales, a column slice (row-parallel) every row's scale, or
  // its column blocks' of every row block.
  Status upload_fp8_codes(Backend& backend, Assembly& a, char* base, std::vector<uint8_t>& scratch,
                          std::vector<float>& values, std::vector<float>& scales) {
    const Fp8Blocks kept = *kept_fp8_scaling(a, backend);
    const bool blocks = kept.rows != 1;
    // Block scales: [ceil(n / 128), ceil(k / 128)] at Backend::gemm_fp8's padded row stride (the
    // padding holds 1s, never read).
    const int64_t stride = blocks ? fp8_block_scale_stride(a.shape[1]) : 1;
    std::vector<float> kept_scales;
    if (blocks) kept_scales.assign(size_t(fp8_scale_rows(a.shape[0], kept) * stride), 1.0f);
    int64_t block_row = 0;  // the next part's first row of kept_scales (blocks)
    std::vector<uint8_t> codes;
    char* dst = base + a.arena_offset;
    for (size_t part = 0; part < a.parts.size(); ++part) {
      const WeightTensor& p = a.parts[part];
      const WeightSlice& slice = a.slices[part];
      const int64_t numel = p.numel(), n = p.shape[0], k = numel / n;
      const void* host = source_.read(p, scratch);
      bytes_read_ += int64_t(dtype_bytes(*p.dtype, numel));
      if (const int64_t bad = first_non_finite(host, *p.dtype, numel); bad >= 0) {
        backend.synchronize();
        return invalid_argument(p.file + ": tensor '" + p.name + "' holds a NaN or infinite value at element " +
                                std::to_string(bad) + " (of " + std::to_string(numel) + "); the checkpoint is corrupt");
      }
      codes.resize(size_t(numel));
      if (*p.dtype == DType::kF8E4M3) {
        if (Status s = source_.read_fp8_scales(p, scales); !s.is_ok()) {
          backend.synchronize();
          return s;
        }
        FG_CHECK(int64_t(scales.size()) == fp8_scale_rows(n, p.fp8_blocks) * fp8_scale_cols(k, p.fp8_blocks),
                 "FP8 scales of " + p.name + " do not match its blocks");
        std::memcpy(codes.data(), host, size_t(numel));
      } else {
        dequantize(*p.dtype, host, values.data(), numel);
        scales.resize(size_t(n));
        fp8_quantize_rows(values.data(), n, k, codes.data(), scales.data());
      }
      compact_slice(codes.data(), p.shape, slice);
      const int64_t kept_numel = sliced_numel(p, slice);
      backend.copy_from_host(dst, codes.data(), size_t(kept_numel));
      if (blocks) {
        // The slice's blocks: whole ones, by kept_fp8_scaling.
        const int64_t scale_cols = fp8_scale_cols(k, p.fp8_blocks);
        const int64_t r0 = slice.dim == 0 ? slice.begin / kFp8Block : 0;
        const int64_t r1 = slice.dim == 0 ? (slice.end + kFp8Block - 1) / kFp8Block : fp8_scale_rows(n, p.fp8_blocks);
        const int64_t c0 = slice.dim == 1 ? slice.begin / kFp8Block : 0;
        const int64_t c1 = slice.dim == 1 ? (slice.end + kFp8Block - 1) / kFp8Block : scale_cols;
        for (int64_t r = r0; r < r1; ++r, ++block_row)
          std::copy(scales.begin() + r * scale_cols + c0, scales.begin() + r * scale_cols + c1,
                    kept_scales.begin() + block_row * stride);
      } else if (slice.dim == 0) {
        kept_scales.insert(kept_scales.end(), scales.begin() + slice.begin, scales.begin() + slice.end);
      } else {
        kept_scales.insert(kept_scales.end(), scales.begin(), scales.end());
      }
      backend.synchronize();  // the host buffers are rewritten by the next part
      dst += kept_numel;
    }
    FG_CHECK(blocks ? block_row == fp8_scale_rows(a.shape[0], kept) : int64_t(kept_scales.size()) == a.shape[0],
             "FP8 scales do not match the rows of the assembly");
    backend.copy_from_host(base + a.scale_offset, kept_scales.data(), kept_scales.size() * 4);
    backend.synchronize();
    set_view(*a.target, base + a.arena_offset, a.dtype, a.shape, backend.device());
    if (blocks) {
      set_view(*a.fp8_scales, base + a.scale_offset, DType::kF32,
               {fp8_scale_rows(a.shape[0], kept), fp8_scale_cols(a.shape[1], kept)}, backend.device());
      a.fp8_scales->stride[0] = stride;
    } else {
      set_view(*a.fp8_scales, base + a.scale_offset, DType::kF32, {a.shape[0]}, backend.device());
    }
    return Status::ok();
  }

  static void set_view(Tensor& t, char* data, DType dtype, const std::vector<int64_t>& shape, Device device) {
    t = Tensor{};
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.ndim = int(shape.size());
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.shape[size_t(d)] = shape[size_t(d)];
      t.stride[size_t(d)] = stride;
      stride *= shape[size_t(d)];
    }
  }

  // Whether a part is copied as its stored bytes.
  static bool as_stored(const Assembly& a, const WeightTensor& p) {
    return *p.dtype == a.dtype && part_dtype(a, p) == a.dtype && !a.plus_one;
  }
  // Whether a part that is not kept as stored gets its values made on the host as f32 (then
  // copied or converted on the device): dequantized blocks or FP8, FP8 quantization, 1 + w.
  static bool host_values(const Assembly& a, const WeightTensor& p) {
    return dtype_is_blocked(*p.dtype) || fp8_values(a, p) || a.plus_one;
  }
  // Whether a part's host values are FP8 values: stored as e4m3, or quantized to it at load.
  static bool fp8_values(const Assembly& a, const WeightTensor& p) {
    return *p.dtype == DType::kF8E4M3 || part_dtype(a, p) == DType::kF8E4M3;
  }

  const WeightSource& source_;
  const WeightLoadOptions& options_;
  std::vector<Assembly> assemblies_;
  int64_t bytes_read_ = 0;
};

}  // namespace

std::string weight_name_layer(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string WeightTensor::shape_string() const {
  return shape_str(shape);
}

Result<WeightTensor> SafetensorsWeightSource::find(const std::string& hf_name) const {
  FG_ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_.get(hf_name));
  WeightTensor w;
  w.name = t->name;
  w.file = t->file;
  w.dtype_name = t->dtype_name;
  w.shape = t->shape;
  if (t->dtype && (*t->dtype == DType::kF32 || *t->dtype == DType::kF16 || *t->dtype == DType::kBF16))
    w.dtype = *t->dtype;
  w.handle = t;
  if (t->dtype != DType::kF8E4M3) return w;

  // An FP8 weight: its scales must be there, in the shape config.json's format gives them.
  const std::string where = t->file + ": tensor '" + t->name + "' is F8_E4M3";
  if (!quant_.quantized()) return invalid_argument(where + " but config.json has no FP8 quantization_config");
  if (quant_.is_ignored(hf_name))
    return invalid_argument(where + " but quantization_config lists its module as not quantized");
  if (t->shape.size() != 2) return invalid_argument(where + " with shape " + t->shape_string() + "; expected a matrix");
  const int64_t n = t->shape[0], k = t->shape[1];
  w.fp8_blocks = quant_.method == WeightQuantization::kFp8Block ? Fp8Blocks{quant_.block_rows, quant_.block_cols}
                                                                : Fp8Blocks{1, k};
  const std::vector<int64_t> scale_shape = {fp8_scale_rows(n, w.fp8_blocks), fp8_scale_cols(k, w.fp8_blocks)};
  auto scale = ckpt_.get(quant_.scale_name(hf_name));
  if (!scale.is_ok()) return invalid_argument(where + " and has no scale tensor: " + scale.status().message());
  const SafetensorsTensor* st = scale.value();
  // compressed-tensors writes per-channel scales as [n, 1]; [n] is the same values.
  const bool shape_ok = st->shape == scale_shape ||
                        (quant_.method == WeightQuantization::kFp8Channel && st->shape == std::vector<int64_t>{n});
  if (!shape_ok)
    return invalid_argument(st->file + ": scale tensor '" + st->name + "' has shape " + st->shape_string() +
                            ", expected " + shape_str(scale_shape) + " for " + weight_quantization_name(quant_.method) +
                            " of a " + t->shape_string() + " weight");
  if (!(st->dtype == DType::kF32 || st->dtype == DType::kBF16 || st->dtype == DType::kF16))
    return invalid_argument(st->file + ": scale tensor '" + st->name + "' has dtype " + st->dtype_name +
                            ", expected F32, BF16 or F16");
  w.dtype = DType::kF8E4M3;
  w.scale_handle = st;
  return w;
}

const void* SafetensorsWeightSource::read(const WeightTensor& t, std::vector<uint8_t>&) const {
  return static_cast<const SafetensorsTensor*>(t.handle)->data;
}

std::string SafetensorsWeightSource::loadable_types() const {
  return quant_.quantized() ? "F32, F16, BF16 or F8_E4M3" : "F32, F16 or BF16";
}

Status WeightSource::read_fp8_scales(const WeightTensor& t, std::vector<float>&) const {
  return internal_error(t.file + ": tensor '" + t.name + "' is FP8 but its source has no scales");
}

Status SafetensorsWeightSource::read_fp8_scales(const WeightTensor& t, std::vector<float>& scales) const {
  const auto& s = *static_cast<const SafetensorsTensor*>(t.scale_handle);
  const int64_t n = s.numel();
  scales.resize(size_t(n));
  dequantize(*s.dtype, s.data, scales.data(), n);
  for (int64_t i = 0; i < n; ++i)
    if (!(std::isfinite(scales[size_t(i)]) && scales[size_t(i)] > 0.0f))
      return invalid_argument(s.file + ": tensor '" + s.name + "' holds the scale " +
                              std::to_string(scales[size_t(i)]) + " at element " + std::to_string(i) +
                              "; FP8 scales must be finite and positive");
  return Status::ok();
}

int64_t weight_bytes(const ModelWeights& w) {
  int64_t total = int64_t(w.embed.nbytes() + w.final_norm.nbytes());
  if (w.lm_head.data != w.embed.data) total += int64_t(w.lm_head.nbytes());
  for (const LayerWeights& L : w.layers)
    for (const Tensor* t :
         {&L.input_norm,    &L.qkv,           &L.qkv_bias,  &L.q_norm,         &L.k_norm,      &L.o,
          &L.o_bias,        &L.post_norm,     &L.gate_up,   &L.gate_up_bias,   &L.down,        &L.down_bias,
          &L.attn_out_norm, &L.mlp_out_norm,  &L.router,    &L.expert_gate_up, &L.expert_down, &L.qkv_scale,
          &L.o_scale,       &L.gate_up_scale, &L.down_scale})
      if (t->data != nullptr) total += int64_t(t->nbytes());
  return total;
}

Result<ModelWeights> load_model_weights(const ModelConfig& c, const SafetensorsCheckpoint& ckpt, Backend& backend,
                                        const WeightLoadOptions& options) {
  return load_model_weights(c, SafetensorsWeightSource(ckpt, c.quant), backend, options);
}

namespace {

// The checkpoint names of expert e's gate, up and down projections in layer l.
std::array<std::string, 3> expert_names(const ModelConfig& c, int l, int e) {
  const std::string E = std::to_string(e);
  if (c.architecture == "MixtralForCausalLM") {
    const std::string p = "block_sparse_moe.experts." + E + ".";
    return {weight_name_layer(l, (p + "w1.weight").c_str()), weight_name_layer(l, (p + "w3.weight").c_str()),
            weight_name_layer(l, (p + "w2.weight").c_str())};
  }
  const std::string p = "mlp.experts." + E + ".";
  return {weight_name_layer(l, (p + "gate_proj.weight").c_str()), weight_name_layer(l, (p + "up_proj.weight").c_str()),
          weight_name_layer(l, (p + "down_proj.weight").c_str())};
}

std::string router_name(const ModelConfig& c, int l) {
  return weight_name_layer(l,
                           c.architecture == "MixtralForCausalLM" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

}  // namespace

Result<ModelWeights> load_model_weights(const ModelConfig& c, const WeightSource& source, Backend& backend,
                                        const WeightLoadOptions& options) {
  FG_ASSIGN_OR_RETURN(TpShard whole, make_tp_shard(c, 0, 1));
  return load_model_weights(c, source, backend, whole, options);
}

Result<ModelWeights> load_model_weights(const ModelConfig& c, const WeightSource& source, Backend& backend,
                                        const TpShard& tp, const WeightLoadOptions& options) {
  ModelWeights w;
  w.layers.resize(size_t(c.num_layers));
  Planner plan(source, options);
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), head_dim = c.head_dim;
  const AddOptions matrix = matrix_options(false);
  // A linear layer's weight; `scales`: where its per-channel FP8 scales go when the backend keeps
  // the codes (only without a bias: gemm_fp8 adds none).
  auto linear = [](Tensor* scales) {
    AddOptions o = matrix_options(true);
    o.fp8_scales = scales;
    return o;
  };
  AddOptions norm;
  norm.plus_one = c.options.norm_plus_one;
  // The rank's slices (tensor_parallel.h): whole tensors when tp.size == 1.
  const bool split = tp.size > 1;
  auto rows = [&](int64_t begin, int64_t count) {
    return split ? WeightSlice{0, begin, begin + count} : WeightSlice{};
  };
  auto cols = [&](int64_t begin, int64_t count) {
    return split ? WeightSlice{1, begin, begin + count} : WeightSlice{};
  };
  const WeightSlice q_rows = rows(tp.q_head0 * head_dim, tp.q_heads * head_dim);
  const WeightSlice kv_rows = rows(tp.kv_head0 * head_dim, tp.kv_heads * head_dim);
  const WeightSlice o_cols = cols(tp.q_head0 * head_dim, tp.q_heads * head_dim);
  const WeightSlice inter_rows = rows(tp.inter0, tp.inter), inter_cols = cols(tp.inter0, tp.inter);
  // Rows of fused checkpoint tensors (Phi-3): the same slices at each part's offset.
  auto shifted = [](WeightSlice s, int64_t offset, int64_t count) {
    return s.dim < 0 ? WeightSlice{0, offset, offset + count} : WeightSlice{0, s.begin + offset, s.end + offset};
  };
  const bool bias_here = tp.rank == 0;  // row-parallel biases: added once, before the all-reduce
  AddOptions vocab = matrix;
  vocab.rows = split ? tp.vocab_rows : 0;
  const WeightSlice vocab_rows = rows(tp.vocab0, tp.vocab_valid);

  FG_RETURN_IF_ERROR(plan.add(&w.embed, {{"model.embed_tokens.weight", {c.vocab_size, hidden}, vocab_rows}}, vocab));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    auto n = [l](const char* s) { return weight_name_layer(l, s); };
    FG_RETURN_IF_ERROR(plan.add(&L.input_norm, {{n("input_layernorm.weight"), {hidden}}}, norm));
    if (c.options.fused_checkpoint) {
      const std::string qkv = n("self_attn.qkv_proj.weight");
      const std::vector<int64_t> shape = {c.qkv_dim(), hidden};
      FG_RETURN_IF_ERROR(plan.add(&L.qkv,
                                  {{qkv, shape, shifted(q_rows, 0, q_dim)},
                                   {qkv, shape, shifted(kv_rows, q_dim, kv_dim)},
                                   {qkv, shape, shifted(kv_rows, q_dim + kv_dim, kv_dim)}},
                                  linear(c.options.qkv_bias ? nullptr : &L.qkv_scale)));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.qkv,
                                  {{n("self_attn.q_proj.weight"), {q_dim, hidden}, q_rows},
                                   {n("self_attn.k_proj.weight"), {kv_dim, hidden}, kv_rows},
                                   {n("self_attn.v_proj.weight"), {kv_dim, hidden}, kv_rows}},
                                  linear(c.options.qkv_bias ? nullptr : &L.qkv_scale)));
    }
    if (c.options.qkv_bias)
      FG_RETURN_IF_ERROR(plan.add(&L.qkv_bias, {{n("self_attn.q_proj.bias"), {q_dim}, q_rows},
                                                {n("self_attn.k_proj.bias"), {kv_dim}, kv_rows},
                                                {n("self_attn.v_proj.bias"), {kv_dim}, kv_rows}}));
    if (c.options.qk_norm) {
      FG_RETURN_IF_ERROR(plan.add(&L.q_norm, {{n("self_attn.q_norm.weight"), {head_dim}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.k_norm, {{n("self_attn.k_norm.weight"), {head_dim}}}, norm));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.o, {{n("self_attn.o_proj.weight"), {hidden, q_dim}, o_cols}},
                                linear(c.options.o_bias ? nullptr : &L.o_scale)));
    if (c.options.o_bias && bias_here)
      FG_RETURN_IF_ERROR(plan.add(&L.o_bias, {{n("self_attn.o_proj.bias"), {hidden}}}));
    if (c.options.sandwich_norms) {
      FG_RETURN_IF_ERROR(plan.add(&L.attn_out_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("pre_feedforward_layernorm.weight"), {hidden}}}, norm));
      FG_RETURN_IF_ERROR(plan.add(&L.mlp_out_norm, {{n("post_feedforward_layernorm.weight"), {hidden}}}, norm));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.post_norm, {{n("post_attention_layernorm.weight"), {hidden}}}, norm));
    }
    if (c.is_moe_layer(l)) {
      FG_CHECK(!split, "tensor parallelism over experts (refused by make_tp_shard)");
      // The router and the stacked experts stay in the activation dtype: the MoE ops read them so.
      const int64_t E = c.moe.num_experts, mi = c.moe.intermediate_size;
      FG_RETURN_IF_ERROR(plan.add(&L.router, {{router_name(c, l), {E, hidden}}}));
      std::vector<PartSpec> gate_up, down;
      for (int e = 0; e < E; ++e) {
        auto [gate_name, up_name, down_name] = expert_names(c, l, e);
        gate_up.push_back({gate_name, {mi, hidden}});
        gate_up.push_back({up_name, {mi, hidden}});
        down.push_back({down_name, {hidden, mi}});
      }
      AddOptions stacked_gate_up, stacked_down;
      stacked_gate_up.linear = stacked_down.linear = true;
      stacked_gate_up.view_shape = {E, 2 * mi, hidden};
      stacked_down.view_shape = {E, hidden, mi};
      FG_RETURN_IF_ERROR(plan.add(&L.expert_gate_up, gate_up, stacked_gate_up));
      FG_RETURN_IF_ERROR(plan.add(&L.expert_down, down, stacked_down));
      continue;
    }
    if (c.options.fused_checkpoint) {
      const std::string gate_up = n("mlp.gate_up_proj.weight");
      const std::vector<int64_t> shape = {2 * inter, hidden};
      FG_RETURN_IF_ERROR(plan.add(
          &L.gate_up,
          {{gate_up, shape, shifted(inter_rows, 0, inter)}, {gate_up, shape, shifted(inter_rows, inter, inter)}},
          linear(c.options.mlp_bias ? nullptr : &L.gate_up_scale)));
    } else {
      FG_RETURN_IF_ERROR(plan.add(&L.gate_up,
                                  {{n("mlp.gate_proj.weight"), {inter, hidden}, inter_rows},
                                   {n("mlp.up_proj.weight"), {inter, hidden}, inter_rows}},
                                  linear(c.options.mlp_bias ? nullptr : &L.gate_up_scale)));
    }
    FG_RETURN_IF_ERROR(plan.add(&L.down, {{n("mlp.down_proj.weight"), {hidden, inter}, inter_cols}},
                                linear(c.options.mlp_bias ? nullptr : &L.down_scale)));
    if (c.options.mlp_bias) {
      FG_RETURN_IF_ERROR(plan.add(&L.gate_up_bias, {{n("mlp.gate_proj.bias"), {inter}, inter_rows},
                                                    {n("mlp.up_proj.bias"), {inter}, inter_rows}}));
      if (bias_here) FG_RETURN_IF_ERROR(plan.add(&L.down_bias, {{n("mlp.down_proj.bias"), {hidden}}}));
    }
  }
  FG_RETURN_IF_ERROR(plan.add(&w.final_norm, {{"model.norm.weight", {hidden}}}, norm));
  if (!c.tie_word_embeddings)
    FG_RETURN_IF_ERROR(plan.add(&w.lm_head, {{"lm_head.weight", {c.vocab_size, hidden}, vocab_rows}}, vocab));

  FG_RETURN_IF_ERROR(plan.upload(backend, w.arena));
  w.source_bytes = plan.bytes_read();
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

}  // namespace fg
