// CPU backend: RMSNorm (plain and with the fused residual add) and rotary embedding.
// Both follow Hugging Face transformers' f32 arithmetic operation by operation, so model parity
// on CPU is limited only by reduction order:
//   rms_norm: r = 1 / sqrt(mean(x^2) + eps) in f32; out = weight * (x * r). The sum of squares is
//             accumulated in double (cheap, and closer to torch's pairwise f32 sum than a
//             sequential f32 sum), then rounded to f32 for the mean.
//   rope:     angle = f32(position) * inv_freq[i] in f32; cos/sin of that f32 angle, correctly
//             rounded to f32 (computed in double), times attention_scaling in f32;
//             x1' = x1 * cos - x2 * sin, x2' = x2 * cos + x1 * sin.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_checks.h"

namespace fg {

using cpu::check_dim;
using cpu::check_view;
using cpu::kParallelMinWork;
using cpu::row;

namespace {

// out[c] = weight[c] * (x[c] * r), r = 1 / sqrt(mean(x^2) + eps). out may alias x.
inline void rms_norm_row(const float* x, const float* weight, int64_t hidden, float eps, float* out) {
  double sum_sq = 0.0;
  for (int64_t c = 0; c < hidden; ++c) sum_sq += double(x[c]) * double(x[c]);
  const float mean = float(sum_sq / double(hidden));
  const float r = 1.0f / std::sqrt(mean + eps);
  for (int64_t c = 0; c < hidden; ++c) out[c] = weight[c] * (x[c] * r);
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  FG_CHECK(x.ndim == 2 || x.ndim == 3,
           cpu::arg_message("rms_norm", "x", "2-d [n, hidden] or 3-d [n, heads, head_dim]", x));
  check_view("rms_norm", "x", x, DType::kF32, x.ndim);
  check_view("rms_norm", "out", out, DType::kF32, x.ndim);
  for (int d = 0; d < x.ndim; ++d) check_dim("rms_norm", "out", out, d, x.shape[d]);
  const int64_t hidden = x.shape[x.ndim - 1];
  check_view("rms_norm", "weight", weight, DType::kF32, 1);
  check_dim("rms_norm", "weight", weight, 0, hidden);
  const int64_t n = x.shape[0], heads = x.ndim == 3 ? x.shape[1] : 1;
  const float* w = weight.ptr<float>();
  cpu::parallel_items(pool_, n * heads, n * heads * hidden, kParallelMinWork, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r / heads, h = r % heads;
      if (x.ndim == 3) {
        rms_norm_row(row<float>(x, i, h), w, hidden, eps, row<float>(out, i, h));
      } else {
        rms_norm_row(row<float>(x, i), w, hidden, eps, row<float>(out, i));
      }
    }
  });
}

void CpuBackend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out) {
  check_view("add_rms_norm", "residual", residual, DType::kF32, 2);
  check_view("add_rms_norm", "delta", delta, DType::kF32, 2);
  check_view("add_rms_norm", "out", out, DType::kF32, 2);
  check_view("add_rms_norm", "weight", weight, DType::kF32, 1);
  const int64_t n = residual.shape[0], hidden = residual.shape[1];
  for (int d = 0; d < 2; ++d) {
    check_dim("add_rms_norm", "delta", delta, d, residual.shape[d]);
    check_dim("add_rms_norm", "out", out, d, residual.shape[d]);
  }
  check_dim("add_rms_norm", "weight", weight, 0, hidden);
  const float* w = weight.ptr<float>();
  cpu::parallel_items(pool_, n, n * hidden, kParallelMinWork, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* res = row<float>(residual, i);
      const float* d = row<float>(delta, i);
      for (int64_t c = 0; c < hidden; ++c) res[c] += d[c];
      rms_norm_row(res, w, hidden, eps, row<float>(out, i));  // out may alias delta: read above
    }
  });
}

namespace {

// Rotates the first 2 * half channels of one head in place with the token's cos/sin tables.
inline void rotate_head(float* x, const float* cos, const float* sin, int64_t half, bool neox) {
  if (neox) {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[i], x2 = x[i + half];
      x[i] = x1 * cos[i] - x2 * sin[i];
      x[i + half] = x2 * cos[i] + x1 * sin[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[2 * i], x2 = x[2 * i + 1];
      x[2 * i] = x1 * cos[i] - x2 * sin[i];
      x[2 * i + 1] = x2 * cos[i] + x1 * sin[i];
    }
  }
}

}  // namespace

void CpuBackend::rope(Tensor& q, Tensor& k, const RopeArgs& args) {
  check_view("rope", "q", q, DType::kF32, 3);
  check_view("rope", "k", k, DType::kF32, 3);
  check_view("rope", "positions", args.positions, DType::kI32, 1);
  const int64_t n = q.shape[0];
  check_dim("rope", "k", k, 0, n);
  check_dim("rope", "positions", args.positions, 0, n);
  const int64_t rot = args.rotary_dim, half = rot / 2;
  FG_CHECK(rot > 0 && rot % 2 == 0 && rot <= q.shape[2] && rot <= k.shape[2],
           "rope: rotary_dim " + std::to_string(rot) + " must be even, positive and at most the head dim of q " +
               q.describe() + " and k " + k.describe());
  const bool per_token = args.per_token_base.data != nullptr;
  const bool tables = args.per_token_table.data != nullptr;
  int64_t num_tables = 1;
  if (per_token) {
    check_view("rope", "per_token_base", args.per_token_base, DType::kF32, 1);
    check_dim("rope", "per_token_base", args.per_token_base, 0, n);
  } else if (tables) {
    check_view("rope", "per_token_table", args.per_token_table, DType::kI32, 1);
    check_dim("rope", "per_token_table", args.per_token_table, 0, n);
    check_view("rope", "inv_freq", args.inv_freq, DType::kF32, 2);
    check_dim("rope", "inv_freq", args.inv_freq, 1, half);
    num_tables = args.inv_freq.shape[0];
    FG_CHECK(args.inv_freq.stride[0] == half, cpu::arg_message("rope", "inv_freq", "contiguous", args.inv_freq));
  } else {
    check_view("rope", "inv_freq", args.inv_freq, DType::kF32, 1);
    check_dim("rope", "inv_freq", args.inv_freq, 0, half);
  }
  if (n == 0) return;
  const int32_t* pos = args.positions.ptr<int32_t>();
  const float* inv_freq_tables = per_token ? nullptr : args.inv_freq.ptr<float>();
  const float* bases = per_token ? args.per_token_base.ptr<float>() : nullptr;
  const int32_t* table_of = tables && !per_token ? args.per_token_table.ptr<int32_t>() : nullptr;
  if (table_of != nullptr)
    for (int64_t t = 0; t < n; ++t)
      FG_CHECK(table_of[t] >= 0 && table_of[t] < num_tables, "rope: per_token_table[" + std::to_string(t) +
                                                                 "] = " + std::to_string(table_of[t]) +
                                                                 " is outside inv_freq " + args.inv_freq.describe());
  const int64_t q_heads = q.shape[1], k_heads = k.shape[1];
  const float scaling = args.attention_scaling;
  const int64_t work = n * (q_heads + k_heads) * rot;
  cpu::parallel_items(pool_, n, work, kParallelMinWork, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      const float position = float(pos[t]);
      const float* inv_freq_table = per_token ? nullptr : inv_freq_tables + (table_of ? table_of[t] * half : 0);
      for (int64_t i = 0; i < half; ++i) {
        // Dynamic NTK: the same formula HF uses for its default inv_freq, with this token's base.
        const float inv_freq = per_token ? 1.0f / std::pow(bases[t], float(2 * i) / float(rot)) : inv_freq_table[i];
        const float angle = position * inv_freq;
        cos_t[size_t(i)] = float(std::cos(double(angle))) * scaling;
        sin_t[size_t(i)] = float(std::sin(double(angle))) * scaling;
      }
      for (int64_t h = 0; h < q_heads; ++h)
        rotate_head(row<float>(q, t, h), cos_t.data(), sin_t.data(), half, args.neox);
      for (int64_t h = 0; h < k_heads; ++h)
        rotate_head(row<float>(k, t, h), cos_t.data(), sin_t.data(), half, args.neox);
    }
  });
}

}  // namespace fg
