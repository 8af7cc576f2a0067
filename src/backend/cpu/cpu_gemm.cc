// CPU backend: the ops that read weight matrices, gemm and embedding, over weights kept as stored
// (f32, f16, bf16 or block-quantized; cpu_weight_kernels.h). Every weight value used is exactly
// its core/dequant.h value; only the order of the f32 accumulation depends on the path:
//  - few activation rows (decode; up to the kernel set's gemv_max_batch): a GEMV that streams
//    each weight row once for up to kGemvMaxRows activation rows, decoding blocks in registers;
//  - many rows (prefill): chunks of weight rows decoded to f32 (f32 weights as they are), each
//    multiplied by a single-threaded OpenBLAS sgemm.
// In batch-invariant mode (BackendOptions) every m takes the GEMV path: a row's sums then never
// depend on how many rows share the call (the GEMV accumulates each activation row on its own, in
// the same order whatever the rows beside it; OpenBLAS promises nothing of the kind across m).
// Both hand out chunks of contiguous weight rows to the backend's WorkerPool (cpu_pool.h), only
// when the op is big enough to pay for it. OpenBLAS itself runs on one thread (set by the
// backend's constructor), so its own pool never competes with the backend's.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"
#include "backend/cpu/cpu_weight_kernels.h"

namespace fg {

using cpu::check_dim;
using cpu::check_view;
using cpu::row;

namespace {

// Weight values a GEMV decodes below which it runs on the calling thread alone, and per chunk
// otherwise (about 10 microseconds of work: claiming a chunk costs tens of nanoseconds, and a
// helper preempted inside one holds the caller up only that long).
constexpr int64_t kGemvParallelMinValues = int64_t(1) << 16;
constexpr int64_t kGemvChunkValues = int64_t(1) << 16;
// f32 values of one decoded tile on the sgemm path (256 KiB: stays in L2).
constexpr int64_t kTileValues = int64_t(1) << 16;

// Rows per chunk for chunks of about `values` values of rows of `row_values`: a multiple of 8.
int64_t rows_per_chunk(int64_t values, int64_t row_values) {
  const int64_t rows = std::max<int64_t>(1, values / std::max<int64_t>(1, row_values));
  return (rows + 7) / 8 * 8;
}

// The weight rows of w ([n, k], rows contiguous; a blocked dtype's rows start on block
// boundaries). A single-row view may carry any stride.
cpu::WeightRows weight_rows(const Tensor& w) {
  const int64_t k = w.shape[1];
  const int64_t stride = w.shape[0] > 1 ? w.stride[0] : k;
  return {static_cast<const uint8_t*>(w.data), int64_t(dtype_bytes(w.dtype, stride)), k, w.dtype};
}

void check_weight(const char* op, const char* name, const Tensor& w) {
  FG_CHECK(w.ndim == 2 && w.device == Device::kCpu && cpu::is_weight_dtype(w.dtype),
           cpu::arg_message(op, name, "a 2-d cpu weight (f32, f16, bf16 or block-quantized)", w));
  FG_CHECK(w.data != nullptr || w.numel() == 0, cpu::arg_message(op, name, "defined (it has no data)", w));
  FG_CHECK(w.stride[1] == 1 || w.shape[1] <= 1, cpu::arg_message(op, name, "contiguous in its last dim", w));
  FG_CHECK(w.shape[0] <= 1 || w.stride[0] >= w.shape[1], cpu::arg_message(op, name, "made of disjoint rows", w));
  const int64_t block = dtype_block_size(w.dtype);
  FG_CHECK(w.shape[1] % block == 0 && (w.shape[0] <= 1 || w.stride[0] % block == 0),
           cpu::arg_message(op, name, "made of whole blocks of " + std::to_string(block) + " values per row", w));
}

}  // namespace

DType CpuBackend::weight_dtype(DType stored) const {
  return cpu::is_weight_dtype(stored) ? stored : DType::kF32;
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_view("embedding", "ids", ids, DType::kI32, 1);
  const int32_t* idx = ids.ptr<int32_t>();
  for (int64_t i = 0; i < ids.shape[0]; ++i)
    FG_CHECK(idx[i] >= 0 && idx[i] < table.shape[0], "embedding: ids[" + std::to_string(i) +
                                                         "] = " + std::to_string(idx[i]) + " is outside table " +
                                                         table.describe());
  embedding_shard(ids, table, 0, out);
}

void CpuBackend::embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) {
  check_view("embedding_shard", "ids", ids, DType::kI32, 1);
  check_weight("embedding_shard", "table", table);
  check_view("embedding_shard", "out", out, DType::kF32, 2);
  const int64_t vocab = table.shape[0], h = table.shape[1], m = ids.shape[0];
  check_dim("embedding_shard", "out", out, 0, m);
  check_dim("embedding_shard", "out", out, 1, h);
  const int32_t* idx = ids.ptr<int32_t>();
  const cpu::WeightRows rows = weight_rows(table);
  const cpu::WeightKernels& kern = cpu::weight_kernels();
  cpu::parallel_items(pool_, m, m * h, cpu::kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = int64_t(idx[i]) - first_id;
      if (r >= 0 && r < vocab)
        kern.decode_row(rows, r, row<float>(out, i));
      else
        std::fill_n(row<float>(out, i), h, 0.0f);
    }
  });
}

void CpuBackend::gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  check_view("gemm", "x", x, DType::kF32, 2);
  check_weight("gemm", "w", w);
  check_view("gemm", "out", out, DType::kF32, 2);
  const int64_t m = x.shape[0], k = x.shape[1], n = w.shape[0];
  check_dim("gemm", "w", w, 1, k);
  check_dim("gemm", "out", out, 0, m);
  check_dim("gemm", "out", out, 1, n);
  if (bias != nullptr) {
    check_view("gemm", "bias", *bias, DType::kF32, 1);
    check_dim("gemm", "bias", *bias, 0, n);
  }
  if (m == 0 || n == 0) return;
  const float* b = bias != nullptr ? bias->ptr<float>() : nullptr;
  // A single-row view may carry any stride; BLAS wants a leading dim of at least the row length.
  const int64_t ldx = m > 1 ? x.stride[0] : k;
  const int64_t ldo = m > 1 ? out.stride[0] : n;
  FG_CHECK(ldx >= k && ldo >= n, "gemm: overlapping rows in x " + x.describe() + " or out " + out.describe());
  if (k == 0) {  // out = bias (or zero)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) row<float>(out, i)[j] = b != nullptr ? b[j] : 0.0f;
    return;
  }
  const cpu::WeightRows rows = weight_rows(w);
  const cpu::WeightKernels& kern = cpu::weight_kernels();
  const float* xp = x.ptr<float>();
  float* op = out.ptr<float>();

  if (m <= kern.gemv_max_batch || options_.batch_invariant) {
    const int64_t passes = (m + cpu::kGemvMaxRows - 1) / cpu::kGemvMaxRows;
    auto gemv = [&](int64_t j0, int64_t j1, int) {
      for (int64_t r0 = 0; r0 < m; r0 += cpu::kGemvMaxRows) {
        cpu::GemvArgs a;
        a.x = xp + r0 * ldx;
        a.ldx = ldx;
        a.out = op + r0 * ldo;
        a.ldo = ldo;
        a.bias = b;
        a.m = int(std::min<int64_t>(cpu::kGemvMaxRows, m - r0));
        kern.gemv(rows, j0, j1, a);
      }
    };
    if (n * k * passes < kGemvParallelMinValues) {
      gemv(0, n, 0);
    } else {
      pool_.parallel_for(n, rows_per_chunk(kGemvChunkValues, k * passes), gemv);
    }
    return;
  }

  // sgemm over tiles of weight rows, decoded to f32 into the worker's scratch unless they already
  // are f32. Like torch's addmm, out is pre-filled with the bias (or zero) and the product added.
  const bool decode = w.dtype != DType::kF32;
  const int64_t tile = rows_per_chunk(kTileValues, k);
  const size_t per_worker = size_t(tile * k);
  if (decode && gemm_scratch_.size() < size_t(pool_.threads()) * per_worker)
    gemm_scratch_.resize(size_t(pool_.threads()) * per_worker);
  float* scratch = gemm_scratch_.data();
  pool_.parallel_for(n, tile, [&](int64_t j0, int64_t j1, int worker) {
    const int64_t cols = j1 - j0;
    const float* wt;
    int64_t ldw;
    if (decode) {
      float* mine = scratch + size_t(worker) * per_worker;
      for (int64_t j = 0; j < cols; ++j) kern.decode_row(rows, j0 + j, mine + j * k);
      wt = mine;
      ldw = k;
    } else {
      wt = reinterpret_cast<const float*>(rows.data + j0 * rows.row_bytes);
      ldw = cols > 1 ? rows.row_bytes / 4 : k;
    }
    for (int64_t i = 0; i < m; ++i) {
      float* o = op + i * ldo + j0;
      if (b != nullptr) {
        std::memcpy(o, b + j0, size_t(cols) * 4);
      } else {
        std::memset(o, 0, size_t(cols) * 4);
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(cols), int(k), 1.0f, xp, int(ldx), wt, int(ldw),
                1.0f, op + j0, int(ldo));
  });
}

}  // namespace fg
