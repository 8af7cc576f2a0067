// Parity of every CUDA backend op except attention against the CPU reference backend, on random
// inputs (never zeros), odd sizes and strided views, with NaN-poisoned outputs and guard checks
// (parity_harness.h). bf16 ops must agree to a relative error ||gpu - cpu|| / ||cpu|| below 1e-2;
// data movement, conversions and the seeded fill must agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "parity_harness.h"

namespace fg::parity {
namespace {

// A view of a fused [n, width] row buffer: [n, heads, head_dim] at column `col0`.
struct HeadsLayout {
  int64_t n, heads, head_dim, width, col0;
};
std::unique_ptr<Twin> heads_twin(const HeadsLayout& l, DType gpu_dtype = DType::kBF16) {
  return std::make_unique<Twin>(std::vector<int64_t>{l.n, l.heads, l.head_dim}, gpu_dtype, DType::kF32,
                                std::vector<int64_t>{l.width, l.head_dim, 1}, l.n * l.width, l.col0);
}

// ---- conversions and fills (bit-exact)

TEST(BackendParity, ConvertEveryDtypePairBitExact) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType s : types) {
    for (DType d : types) {
      SCOPED_TRACE(std::string(dtype_name(s)) + " -> " + std::string(dtype_name(d)));
      Twin src({37, 129}, s, s, {141, 1});
      src.fill_random(rng, -70000.0f, 70000.0f);  // past the f16 range too: overflow rounds to inf
      Twin dst({37, 129}, d, d);
      dst.poison();
      cpu().convert(src.cpu, dst.cpu);
      gpu().convert(src.gpu, dst.gpu);
      gpu().synchronize();
      std::vector<float> g = dst.gpu_values(), c = dst.cpu_values();
      int64_t diff = 0;
      for (size_t i = 0; i < g.size(); ++i) diff += !(g[i] == c[i]);
      EXPECT_EQ(diff, 0);
      dst.check_guards("convert dst", true);
      src.check_unchanged("convert src");
    }
  }
}

TEST(BackendParity, FillUniformBitIdenticalToCpu) {
  FG_REQUIRE_GPU();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    // A strided 3D view: the counter is the logical element index, whatever the layout.
    Twin a({5, 7, 33}, t, t, {7 * 40, 40, 1});
    a.poison();
    cpu().fill_uniform(a.cpu, -1.5f, 2.25f, 1234567);
    gpu().fill_uniform(a.gpu, -1.5f, 2.25f, 1234567);
    gpu().synchronize();
    std::vector<float> g = a.gpu_values(), c = a.cpu_values();
    int64_t diff = 0;
    for (size_t i = 0; i < g.size(); ++i) diff += !(g[i] == c[i]);
    EXPECT_EQ(diff, 0);
    a.check_guards("fill_uniform", true);
    // Values span the range and are not constant.
    auto [mn, mx] = std::minmax_element(g.begin(), g.end());
    EXPECT_GE(*mn, -1.5f);
    EXPECT_LE(*mx, 2.25f);
    EXPECT_GT(*mx - *mn, 3.0f);
  }
}

// ---- row movement (bit-exact)

TEST(BackendParity, EmbeddingAndGatherRowsExact) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(2);
  for (int64_t hidden : {97, 128, 1}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    const int64_t vocab = 1001, n = 45;
    Twin table({vocab, hidden}, DType::kBF16, DType::kF32, {hidden + 3, 1});
    table.fill_random(rng, -1.0f, 1.0f);
    Twin ids({n}, DType::kI32, DType::kI32);
    ids.fill_random(rng, 0.0f, float(vocab));
    Twin out({n, hidden}, DType::kBF16);
    out.poison();
    cpu().embedding(ids.cpu, table.cpu, out.cpu);
    gpu().embedding(ids.gpu, table.gpu, out.gpu);
    gpu().synchronize();
    EXPECT_EQ(out.gpu_values(), out.cpu_values());
    out.check_guards("embedding out", true);
    table.check_unchanged("embedding table");

    Twin idx({23}, DType::kI32, DType::kI32);
    idx.fill_random(rng, 0.0f, float(n));
    Twin gathered({23, hidden}, DType::kBF16, DType::kF32, {hidden + 8, 1});
    gathered.poison();
    cpu().gather_rows(out.cpu, idx.cpu, gathered.cpu);
    gpu().gather_rows(out.gpu, idx.gpu, gathered.gpu);
    gpu().synchronize();
    EXPECT_EQ(gathered.gpu_values(), gathered.cpu_values());
    gathered.check_guards("gather_rows out", true);
  }
}

// A vocabulary shard's lookup (tensor parallelism): ids outside [first, first + rows) give zero
// rows, ids inside their row, bit for bit; and the strided row copy that assembles logits columns.
TEST(BackendParity, EmbeddingShardAndCopyRowsExact) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  const int64_t rows = 333, hidden = 96, n = 61, first = 400;
  Twin table({rows, hidden}, DType::kBF16, DType::kF32);
  table.fill_random(rng, -1.0f, 1.0f);
  Twin ids({n}, DType::kI32, DType::kI32);
  ids.fill_random(rng, 0.0f, 1001.0f);  // about a third inside the shard
  Twin out({n, hidden}, DType::kBF16);
  out.poison();
  cpu().embedding_shard(ids.cpu, table.cpu, first, out.cpu);
  gpu().embedding_shard(ids.gpu, table.gpu, first, out.gpu);
  gpu().synchronize();
  const std::vector<float> got = out.gpu_values();
  EXPECT_EQ(got, out.cpu_values());
  int64_t zero_rows = 0;
  for (int64_t i = 0; i < n; ++i)
    zero_rows +=
        std::all_of(got.begin() + i * hidden, got.begin() + (i + 1) * hidden, [](float v) { return v == 0.0f; });
  EXPECT_GT(zero_rows, 0);
  EXPECT_LT(zero_rows, n);
  out.check_guards("embedding_shard out", true);

  // Columns [5, 5 + 37) of 9 rows of 64 f32 from a packed [9, 40] source at column 2.
  Twin src({9, 40}, DType::kF32, DType::kF32);
  src.fill_random(rng, -1.0f, 1.0f);
  Twin dst({9, 64}, DType::kF32, DType::kF32);
  dst.poison();
  cpu().copy_rows(dst.cpu.ptr<float>() + 5, 64 * 4, src.cpu.ptr<float>() + 2, 40 * 4, 37 * 4, 9);
  gpu().copy_rows(dst.gpu.ptr<float>() + 5, 64 * 4, src.gpu.ptr<float>() + 2, 40 * 4, 37 * 4, 9);
  gpu().synchronize();
  const std::vector<float> g = dst.gpu_values(), c = dst.cpu_values();
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(g[i] == c[i] || (std::isnan(g[i]) && std::isnan(c[i]))) << i;
}

// n distinct cache slots of `capacity` in random order; every `skip_every`-th from `skip_from`
// is -1 (a token the write skips).
std::vector<float> random_slots(std::mt19937_64& rng, int64_t capacity, int64_t n, size_t skip_from,
                                size_t skip_every) {
  std::vector<float> slots(static_cast<size_t>(capacity));
  std::iota(slots.begin(), slots.end(), 0.0f);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(n));
  for (size_t i = skip_from; i < slots.size(); i += skip_every) slots[i] = -1.0f;
  return slots;
}

TEST(BackendParity, KvWriteEveryPageSizeExact) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  for (int page_size : {1, 3, 16, 64}) {
    for (int64_t head_dim : {64, 128, 6}) {
      SCOPED_TRACE("page_size " + std::to_string(page_size) + " head_dim " + std::to_string(head_dim));
      const int64_t heads = 2, n = 29, pages = (n + 7 + page_size - 1) / page_size + 2;
      const int64_t width = (4 + 2 * heads) * head_dim;
      auto k = heads_twin({n, heads, head_dim, width, 4 * head_dim});
      auto v = heads_twin({n, heads, head_dim, width, (4 + heads) * head_dim});
      k->fill_random(rng, -2.0f, 2.0f);
      v->fill_random(rng, -2.0f, 2.0f);
      Twin kc({pages, page_size, heads, head_dim}, DType::kBF16);
      Twin vc({pages, page_size, heads, head_dim}, DType::kBF16);
      kc.fill_random(rng, -1.0f, 1.0f);
      vc.fill_random(rng, -1.0f, 1.0f);
      Twin slot_map({n}, DType::kI32, DType::kI32);
      slot_map.set(random_slots(rng, pages * page_size, n, 0, 5));  // every fifth token skipped
      KvCacheLayer cache_cpu{kc.cpu, vc.cpu}, cache_gpu{kc.gpu, vc.gpu};
      cpu().kv_write(k->cpu, v->cpu, slot_map.cpu, cache_cpu);
      gpu().kv_write(k->gpu, v->gpu, slot_map.gpu, cache_gpu);
      gpu().synchronize();
      EXPECT_EQ(kc.gpu_values(), kc.cpu_values());
      EXPECT_EQ(vc.gpu_values(), vc.cpu_values());
      kc.check_guards("k cache", false);
      vc.check_guards("v cache", false);
      k->check_unchanged("k");
    }
  }
}

// ---- normalization

TEST(BackendParity, RmsNorm2DOddSizes) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(4);
  // Odd strides take the general kernel; rows of 8-element multiples (hidden sizes) the vectorized
  // one, with 1, 2 and 4 vectors per thread.
  for (auto [hidden, pad] : {std::pair<int64_t, int64_t>{17, 5},
                             {1000, 5},
                             {2051, 5},
                             {5120, 5},
                             {4096, 0},
                             {5120, 8},
                             {8192, 0},
                             {12288, 0}}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden) + " pad " + std::to_string(pad));
    const int64_t n = 13;
    Twin x({n, hidden}, DType::kBF16, DType::kF32, {hidden + pad, 1});
    x.fill_random(rng, -3.0f, 3.0f);
    Twin w({hidden}, DType::kBF16);
    w.fill_random(rng, 0.5f, 1.5f);
    Twin out({n, hidden}, DType::kBF16);
    out.poison();
    cpu().rms_norm(x.cpu, w.cpu, 1e-5f, out.cpu);
    gpu().rms_norm(x.gpu, w.gpu, 1e-5f, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("rms_norm out", true);
    x.check_unchanged("rms_norm x");
  }
}

TEST(BackendParity, RmsNormPerHeadStridedInPlace) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  for (int64_t head_dim : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    // The k heads of a fused qkv row buffer, normalized in place (Qwen3-style q/k norm).
    const int64_t n = 11, hq = 8, hk = 3, width = (hq + 2 * hk) * head_dim;
    auto k = heads_twin({n, hk, head_dim, width, hq * head_dim});
    k->fill_random(rng, -2.0f, 2.0f);
    Twin w({head_dim}, DType::kBF16);
    w.fill_random(rng, 0.5f, 1.5f);
    cpu().rms_norm(k->cpu, w.cpu, 1e-6f, k->cpu);
    gpu().rms_norm(k->gpu, w.gpu, 1e-6f, k->gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(k->gpu_values(), k->cpu_values()), kBf16Tol);
    k->check_guards("per-head rms_norm (q and v columns must be untouched)", true);
  }
}

TEST(BackendParity, AddRmsNormUpdatesResidualAndNormalizes) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(6);
  for (auto [hidden, pad] : {std::pair<int64_t, int64_t>{31, 1}, {4096, 1}, {4096, 0}, {8192, 8}, {2056, 0}}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden) + " delta pad " + std::to_string(pad));
    const int64_t n = 9;
    Twin residual({n, hidden}, DType::kBF16);
    residual.fill_random(rng, -2.0f, 2.0f);
    Twin delta({n, hidden}, DType::kBF16, DType::kF32, {hidden + pad, 1});
    delta.fill_random(rng, -2.0f, 2.0f);
    Twin w({hidden}, DType::kBF16);
    w.fill_random(rng, 0.5f, 1.5f);
    Twin out({n, hidden}, DType::kBF16);
    out.poison();
    cpu().add_rms_norm(residual.cpu, delta.cpu, w.cpu, 1e-5f, out.cpu);
    gpu().add_rms_norm(residual.gpu, delta.gpu, w.gpu, 1e-5f, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(residual.gpu_values(), residual.cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("add_rms_norm out", true);
    residual.check_guards("add_rms_norm residual", true);
    delta.check_unchanged("add_rms_norm delta");
  }
}

// Gemma's 1 + w norm weights are kept in f32: every path (warp rows, vector rows, general rows)
// reads them as f32 next to bf16 activations.
TEST(BackendParity, RmsNormTakesF32Weights) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(16);
  for (auto [hidden, pad] : {std::pair<int64_t, int64_t>{256, 0}, {2051, 5}, {4096, 0}, {12288, 0}}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden) + " pad " + std::to_string(pad));
    const int64_t n = 7;
    Twin x({n, hidden}, DType::kBF16, DType::kF32, {hidden + pad, 1});
    x.fill_random(rng, -3.0f, 3.0f);
    Twin w({hidden}, DType::kF32);
    w.fill_random(rng, 0.99f, 1.01f);  // 1 + small w: the low bits bf16 would lose
    Twin out({n, hidden}, DType::kBF16);
    out.poison();
    cpu().rms_norm(x.cpu, w.cpu, 1e-6f, out.cpu);
    gpu().rms_norm(x.gpu, w.gpu, 1e-6f, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);

    Twin residual({n, hidden}, DType::kBF16);
    residual.fill_random(rng, -2.0f, 2.0f);
    Twin delta({n, hidden}, DType::kBF16);
    delta.fill_random(rng, -2.0f, 2.0f);
    Twin out2({n, hidden}, DType::kBF16);
    out2.poison();
    cpu().add_rms_norm(residual.cpu, delta.cpu, w.cpu, 1e-6f, out2.cpu);
    gpu().add_rms_norm(residual.gpu, delta.gpu, w.gpu, 1e-6f, out2.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out2.gpu_values(), out2.cpu_values()), kBf16Tol);
    out2.check_guards("add_rms_norm out", true);
  }
}

// ---- rotary embedding

struct RopeCase {
  int64_t head_dim;
  int rotary_dim;
  bool neox;
  bool per_token_base;
  float scaling;
};

// RoPE arguments of n tokens for both backends: random positions, inv_freq from `theta` or random
// per-token bases. Owns the tensors the arguments point into.
struct RopeInputs {
  RopeInputs(std::mt19937_64& rng, int64_t n, const RopeCase& rc, float theta)
      : pos({n}, DType::kI32, DType::kI32), inv_freq({rc.rotary_dim / 2}, DType::kF32), base({n}, DType::kF32) {
    pos.fill_random(rng, 0.0f, 32768.0f);
    const int half = rc.rotary_dim / 2;
    auto f = std::vector<float>(size_t(half));
    for (int i = 0; i < half; ++i) f[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(rc.rotary_dim));
    inv_freq.set(f);
    base.fill_random(rng, 10000.0f, 500000.0f);
    cpu.positions = pos.cpu;
    gpu.positions = pos.gpu;
    if (rc.per_token_base) {
      cpu.per_token_base = base.cpu;
      gpu.per_token_base = base.gpu;
    } else {
      cpu.inv_freq = inv_freq.cpu;
      gpu.inv_freq = inv_freq.gpu;
    }
    for (RopeArgs* a : {&cpu, &gpu}) {
      a->rotary_dim = rc.rotary_dim;
      a->neox = rc.neox;
      a->attention_scaling = rc.scaling;
    }
  }
  Twin pos, inv_freq, base;
  RopeArgs cpu, gpu;
};

TEST(BackendParity, RopeEveryVariant) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  const RopeCase cases[] = {
      {128, 128, true, false, 1.0f}, {128, 128, false, false, 1.0f}, {128, 64, true, false, 1.0f},
      {64, 32, false, false, 1.25f}, {64, 64, true, true, 1.0f},     {128, 96, false, true, 1.1f},
  };
  for (const RopeCase& rc : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(rc.head_dim) + " rotary " + std::to_string(rc.rotary_dim) +
                 (rc.neox ? " neox" : " interleaved") + (rc.per_token_base ? " per-token base" : " inv_freq") +
                 " scaling " + std::to_string(rc.scaling));
    const int64_t n = 19, hq = 6, hk = 2, width = (hq + 2 * hk) * rc.head_dim;
    auto q = heads_twin({n, hq, rc.head_dim, width, 0});
    auto k = heads_twin({n, hk, rc.head_dim, width, hq * rc.head_dim});
    q->fill_random(rng, -2.0f, 2.0f);
    k->fill_random(rng, -2.0f, 2.0f);
    const RopeInputs r(rng, n, rc, 10000.0f);
    cpu().rope(q->cpu, k->cpu, r.cpu);
    gpu().rope(q->gpu, k->gpu, r.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(q->gpu_values(), q->cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(k->gpu_values(), k->cpu_values()), kBf16Tol);
    q->check_guards("rope q", true);
    k->check_guards("rope k", true);
  }
}

// One layer's new q/k/v rows (views of a fused [n, (hq + 2 hk) * head_dim] qkv buffer) and a paged
// bf16 KV cache with random old contents, on both backends; slots skip some tokens.
struct QkvAndCache {
  int64_t n, hk, head_dim;
  std::unique_ptr<Twin> q, k, v;
  Twin kc, vc, slot_map;
  std::vector<float> slots;
  KvCacheLayer cache_cpu, cache_gpu;
  QkvAndCache(std::mt19937_64& rng, int64_t n_, int64_t hq, int64_t hk_, int64_t head_dim_, int page_size,
              float k_range)
      : n(n_),
        hk(hk_),
        head_dim(head_dim_),
        q(heads_twin({n_, hq, head_dim_, (hq + 2 * hk_) * head_dim_, 0})),
        k(heads_twin({n_, hk_, head_dim_, (hq + 2 * hk_) * head_dim_, hq * head_dim_})),
        v(heads_twin({n_, hk_, head_dim_, (hq + 2 * hk_) * head_dim_, (hq + hk_) * head_dim_})),
        kc({pages(n_, page_size), page_size, hk_, head_dim_}, DType::kBF16),
        vc({pages(n_, page_size), page_size, hk_, head_dim_}, DType::kBF16),
        slot_map({n_}, DType::kI32, DType::kI32),
        slots(random_slots(rng, pages(n_, page_size) * page_size, n_, 2, 7)),
        cache_cpu{kc.cpu, vc.cpu},
        cache_gpu{kc.gpu, vc.gpu} {
    q->fill_random(rng, -2.0f, 2.0f);
    k->fill_random(rng, -k_range, k_range);
    v->fill_random(rng, -2.0f, 2.0f);
    kc.fill_random(rng, -1.0f, 1.0f);
    vc.fill_random(rng, -1.0f, 1.0f);
    slot_map.set(slots);
  }
  static int64_t pages(int64_t n, int page_size) { return (n + page_size - 1) / page_size + 3; }
  // Both backends' q, k and caches alike (k and the K cache within bf16 error), nothing written
  // outside them, v read only.
  void expect_same(const char* op) const {
    EXPECT_LT(rel_error(q->gpu_values(), q->cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(k->gpu_values(), k->cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(kc.gpu_values(), kc.cpu_values()), kBf16Tol);
    EXPECT_EQ(vc.gpu_values(), vc.cpu_values());
    // Cache rows the slots do not name keep their old contents on both backends.
    const auto k_gpu = kc.gpu_values(), k_cpu = kc.cpu_values();
    size_t untouched_equal = 0, untouched = 0;
    std::vector<bool> written(k_gpu.size() / size_t(hk * head_dim), false);
    for (float sl : slots)
      if (sl >= 0) written[size_t(sl)] = true;
    const size_t row = size_t(hk * head_dim);
    for (size_t sl = 0; sl < written.size(); ++sl) {
      if (written[sl]) continue;
      for (size_t e = 0; e < row; ++e, ++untouched) untouched_equal += k_gpu[sl * row + e] == k_cpu[sl * row + e];
    }
    EXPECT_EQ(untouched_equal, untouched);
    q->check_guards(std::string(op) + " q", true);
    k->check_guards(std::string(op) + " k", true);
    kc.check_guards("k cache", false);
    vc.check_guards("v cache", false);
    v->check_unchanged("v");
  }
};

// The fused rope + KV write (one CUDA launch) against the CPU's two ops: partial rotary (the
// channels past rotary_dim are copied, not rotated), both pair layouts, page sizes 1/3/16, skipped
// slots.
TEST(BackendParity, RopeKvWriteMatchesRopeThenKvWrite) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(17);
  struct Case {
    int64_t head_dim;
    int rotary_dim;
    bool neox;
    int page_size;
  };
  const Case cases[] = {{128, 128, true, 16}, {128, 64, false, 1}, {64, 32, true, 3}, {6, 4, false, 16}};
  for (const Case& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " rotary " + std::to_string(c.rotary_dim) +
                 (c.neox ? " neox" : " interleaved") + " page " + std::to_string(c.page_size));
    const int64_t n = 21, hk = 2;
    QkvAndCache t(rng, n, 8, hk, c.head_dim, c.page_size, 2.0f);
    const RopeInputs r(rng, n, {c.head_dim, c.rotary_dim, c.neox, false, 1.0f}, 500000.0f);
    cpu().rope(t.q->cpu, t.k->cpu, r.cpu);
    cpu().kv_write(t.k->cpu, t.v->cpu, t.slot_map.cpu, t.cache_cpu);
    gpu().rope_kv_write(t.q->gpu, t.k->gpu, t.v->gpu, r.gpu, t.slot_map.gpu, t.cache_gpu);
    gpu().synchronize();
    t.expect_same("rope_kv_write");
  }
}

// The q/k RMSNorms + rope + KV write (one CUDA launch where head_dim is 64, 128 or 256) against
// the CPU's four ops: weights in the act dtype and in f32 (Gemma 3's 1 + w), partial rotary (the
// normalized channels past rotary_dim are not rotated), both pair layouts; head_dim 6 takes the
// unfused ops.
TEST(BackendParity, QkNormRopeKvWriteMatchesTheFourOps) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(18);
  struct Case {
    int64_t head_dim;
    int rotary_dim;
    bool neox;
    int page_size;
    bool f32_weights;
  };
  const Case cases[] = {{128, 128, true, 16, false},
                        {128, 64, false, 1, true},
                        {64, 64, true, 3, false},
                        {256, 256, true, 16, true},
                        {6, 4, false, 16, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " rotary " + std::to_string(c.rotary_dim) +
                 (c.neox ? " neox" : " interleaved") + " page " + std::to_string(c.page_size) +
                 (c.f32_weights ? " f32 weights" : ""));
    const int64_t n = 13;
    QkvAndCache t(rng, n, 8, 2, c.head_dim, c.page_size, 3.0f);
    const DType wd = c.f32_weights ? DType::kF32 : DType::kBF16;
    Twin qw({c.head_dim}, wd), kw({c.head_dim}, wd);
    qw.fill_random(rng, 0.5f, 1.5f);
    kw.fill_random(rng, 0.5f, 1.5f);
    const RopeInputs r(rng, n, {c.head_dim, c.rotary_dim, c.neox, false, 1.0f}, 1000000.0f);
    cpu().rms_norm(t.q->cpu, qw.cpu, 1e-6f, t.q->cpu);
    cpu().rms_norm(t.k->cpu, kw.cpu, 1e-6f, t.k->cpu);
    cpu().rope_kv_write(t.q->cpu, t.k->cpu, t.v->cpu, r.cpu, t.slot_map.cpu, t.cache_cpu);
    gpu().qk_norm_rope_kv_write(t.q->gpu, t.k->gpu, t.v->gpu, qw.gpu, kw.gpu, 1e-6f, r.gpu, t.slot_map.gpu,
                                t.cache_gpu);
    gpu().synchronize();
    t.expect_same("qk_norm_rope_kv_write");
  }
}

// The qkv projection with RoPE and the KV write in one op (CUDA: in the decode-sized GEMM's
// epilogue, up to 8 rows) against the same GPU's gemm then rope_kv_write, bit for bit (qkv and
// both caches), and against the CPU's ops within bf16 error: heads of 64 and 128, a bias, pages of
// 1, 3 and 16, skipped slots; 12 rows take the two ops.
TEST(BackendParity, QkvRopeKvWriteIsGemmThenRopeKvWrite) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(19);
  struct Case {
    int64_t m, head_dim;
    int page_size;
    bool bias;
  };
  const Case cases[] = {{1, 128, 16, false}, {5, 128, 1, true}, {8, 64, 3, false}, {12, 128, 16, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.m) + " head_dim " + std::to_string(c.head_dim) + " page " +
                 std::to_string(c.page_size) + (c.bias ? " bias" : ""));
    const int hq = 8, hk = 2;
    const int64_t hidden = 512, width = (hq + 2 * hk) * c.head_dim, pages = c.m / c.page_size + 3;
    Twin x({c.m, hidden}, DType::kBF16), w({width, hidden}, DType::kBF16), bias({width}, DType::kBF16);
    x.fill_random(rng, -1.0f, 1.0f);
    w.fill_random(rng, -0.1f, 0.1f);
    bias.fill_random(rng, -0.5f, 0.5f);
    const std::vector<int64_t> cache_shape = {pages, c.page_size, hk, c.head_dim};
    Twin kc(cache_shape, DType::kBF16), vc(cache_shape, DType::kBF16);
    Twin kc2(cache_shape, DType::kBF16), vc2(cache_shape, DType::kBF16);  // the two ops' caches
    kc.fill_random(rng, -1.0f, 1.0f);
    vc.fill_random(rng, -1.0f, 1.0f);
    kc2.set(kc.cpu_values());
    vc2.set(vc.cpu_values());
    Twin slot_map({c.m}, DType::kI32, DType::kI32);
    slot_map.set(random_slots(rng, pages * c.page_size, c.m, 1, 3));
    const RopeInputs r(rng, c.m, {c.head_dim, int(c.head_dim), true, false, 1.0f}, 500000.0f);
    Twin qkv({c.m, width}, DType::kBF16), qkv2({c.m, width}, DType::kBF16);
    qkv.poison();
    qkv2.poison();
    KvCacheLayer cache_cpu{kc.cpu, vc.cpu}, cache_gpu{kc.gpu, vc.gpu}, cache_gpu2{kc2.gpu, vc2.gpu};
    cpu().qkv_rope_kv_write(x.cpu, w.cpu, c.bias ? &bias.cpu : nullptr, hq, hk, r.cpu, slot_map.cpu, cache_cpu,
                            qkv.cpu);
    gpu().qkv_rope_kv_write(x.gpu, w.gpu, c.bias ? &bias.gpu : nullptr, hq, hk, r.gpu, slot_map.gpu, cache_gpu,
                            qkv.gpu);
    gpu().gemm(x.gpu, w.gpu, c.bias ? &bias.gpu : nullptr, qkv2.gpu);
    Tensor q, k, v;
    qkv_head_views(qkv2.gpu, hq, hk, q, k, v);
    gpu().rope_kv_write(q, k, v, r.gpu, slot_map.gpu, cache_gpu2);
    gpu().synchronize();
    EXPECT_EQ(qkv.gpu_values(), qkv2.gpu_values());
    EXPECT_EQ(kc.gpu_values(), kc2.gpu_values());
    EXPECT_EQ(vc.gpu_values(), vc2.gpu_values());
    EXPECT_LT(rel_error(qkv.gpu_values(), qkv.cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(kc.gpu_values(), kc.cpu_values()), kBf16Tol);
    EXPECT_LT(rel_error(vc.gpu_values(), vc.cpu_values()), kBf16Tol);
    qkv.check_guards("qkv", true);
    kc.check_guards("k cache", false);
    vc.check_guards("v cache", false);
  }
}

// ---- GEMM

struct GemmCase {
  int64_t m, n, k;
  bool bias;
  DType out;
  int64_t x_pad;  // extra elements per row of x (a strided view)
};

// What check_gemm_case asks beyond the CPU's result: kRowsAlone, each row of x multiplied alone (m =
// 1) gives the same bits as inside the whole product.
enum class GemmCheck { kCpu, kRowsAlone };

// One GEMM case on the CPU and on the CUDA backend against each other, then `check`.
void check_gemm_case(std::mt19937_64& rng, const GemmCase& gc, GemmCheck check) {
  Backend& be = gpu();
  SCOPED_TRACE("m " + std::to_string(gc.m) + " n " + std::to_string(gc.n) + " k " + std::to_string(gc.k) +
               (gc.bias ? " bias" : "") + " out " + std::string(dtype_name(gc.out)) + " x pad " +
               std::to_string(gc.x_pad));
  Twin x({gc.m, gc.k}, DType::kBF16, DType::kF32, {gc.k + gc.x_pad, 1});
  Twin w({gc.n, gc.k}, DType::kBF16);
  Twin b({gc.n}, DType::kBF16);
  x.fill_random(rng, -1.0f, 1.0f);
  w.fill_random(rng, -1.0f, 1.0f);
  b.fill_random(rng, -1.0f, 1.0f);
  Twin out({gc.m, gc.n}, gc.out);
  out.poison();
  cpu().gemm(x.cpu, w.cpu, gc.bias ? &b.cpu : nullptr, out.cpu);
  be.gemm(x.gpu, w.gpu, gc.bias ? &b.gpu : nullptr, out.gpu);
  be.synchronize();
  EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), gc.out == DType::kF32 ? 1e-4 : kBf16Tol);
  out.check_guards("gemm out", true);
  x.check_unchanged("gemm x");
  w.check_unchanged("gemm w");
  if (check != GemmCheck::kRowsAlone) return;
  std::vector<float> alone;
  for (int64_t r = 0; r < gc.m; ++r) {
    Tensor xr = x.gpu;
    xr.data = static_cast<char*>(x.gpu.data) + r * x.gpu.stride[0] * int64_t(dtype_size(x.gpu.dtype));
    xr.shape[0] = 1;
    Twin one({1, gc.n}, gc.out);
    one.poison();
    be.gemm(xr, w.gpu, gc.bias ? &b.gpu : nullptr, one.gpu);
    be.synchronize();
    const std::vector<float> v = one.gpu_values();
    alone.insert(alone.end(), v.begin(), v.end());
  }
  EXPECT_EQ(alone, out.gpu_values());
}

TEST(BackendParity, GemmShapesBiasAndOutputs) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  const GemmCase cases[] = {
      {1, 17, 64, false, DType::kBF16, 0},       {7, 33, 96, true, DType::kBF16, 8},
      {64, 256, 512, true, DType::kF32, 0},      {130, 1000, 384, false, DType::kF32, 16},
      {3, 50, 17, true, DType::kBF16, 0},        {5, 31, 33, true, DType::kF32, 1},
      {300, 512, 1024, false, DType::kBF16, 64}, {1, 32003, 256, false, DType::kF32, 0},
  };
  for (const GemmCase& gc : cases) check_gemm_case(rng, gc, GemmCheck::kCpu);
}

// Decode-sized products (gemv.h's kernel on sm_80 and newer: m <= 8, ragged n and k, strided x,
// bias, f32 out): a token's row is the same bits whatever m it is computed in (unless FG_GEMV=0
// hands them to cuBLASLt, whose kernels change with m).
TEST(BackendParity, DecodeSizedGemmRowsIndependentOfM) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  const char* gemv_env = std::getenv("FG_GEMV");
  const bool ours = gemv_env == nullptr || std::string(gemv_env) != "0";
  const GemmCase cases[] = {
      {8, 1000, 4096, true, DType::kBF16, 8},
      {7, 77, 264, false, DType::kF32, 0},
      {5, 4096, 520, false, DType::kBF16, 24},
      {2, 129, 8, true, DType::kF32, 0},
  };
  for (const GemmCase& gc : cases) check_gemm_case(rng, gc, ours ? GemmCheck::kRowsAlone : GemmCheck::kCpu);
}

TEST(BackendParity, GemmRepeatedShapeReusesCachedPlan) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  // The same shape twice with different data: the cached algorithm must still compute this data.
  for (int round = 0; round < 2; ++round) {
    Twin x({48, 320}, DType::kBF16);
    Twin w({192, 320}, DType::kBF16);
    x.fill_random(rng, -1.0f, 1.0f);
    w.fill_random(rng, -1.0f, 1.0f);
    Twin out({48, 192}, DType::kBF16);
    out.poison();
    cpu().gemm(x.cpu, w.cpu, nullptr, out.cpu);
    gpu().gemm(x.gpu, w.gpu, nullptr, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol) << "round " << round;
  }
}

// ---- SiLU and mul

TEST(BackendParity, SiluMulOddSizesStrided) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(10);
  for (int64_t inter : {11, 1376}) {
    SCOPED_TRACE("inter " + std::to_string(inter));
    const int64_t n = 21;
    Twin x({n, 2 * inter}, DType::kBF16, DType::kF32, {2 * inter + 6, 1});
    x.fill_random(rng, -6.0f, 6.0f);
    Twin out({n, inter}, DType::kBF16, DType::kF32, {inter + 3, 1});
    out.poison();
    cpu().silu_mul(x.cpu, out.cpu);
    gpu().silu_mul(x.gpu, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("silu_mul out", true);
  }
  // Rows whose layout allows 16-byte vectors (the MLP's own case): contiguous and strided by 8.
  for (auto [inter, pad] : {std::pair<int64_t, int64_t>{1376, 0}, {4104, 8}, {24, 16}}) {
    SCOPED_TRACE("vectorized inter " + std::to_string(inter) + " pad " + std::to_string(pad));
    const int64_t n = 37;
    Twin x({n, 2 * inter}, DType::kBF16, DType::kF32, {2 * inter + pad, 1});
    x.fill_random(rng, -6.0f, 6.0f);
    Twin out({n, inter}, DType::kBF16, DType::kF32, {inter + pad, 1});
    out.poison();
    cpu().silu_mul(x.cpu, out.cpu);
    gpu().silu_mul(x.gpu, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("silu_mul out", true);
  }
}

// ---- sampling

std::vector<SamplingRow> sampling_rows(int m, std::mt19937_64& rng) {
  auto rows = std::vector<SamplingRow>(size_t(m));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < m; ++i) {
    SamplingRow& r = rows[size_t(i)];
    r.seed = rng();
    r.counter = uint64_t(i) * 7 + 3;
    switch (i % 8) {
      case 0: r.temperature = 0.0f; break;  // greedy
      case 1: r.temperature = 1.0f; break;
      case 2:
        r.temperature = 0.7f;
        r.top_k = 1 + int(unit(rng) * 50);
        break;
      case 3:
        r.temperature = 1.3f;
        r.top_p = 0.5f + 0.45f * unit(rng);
        break;
      case 4:
        r.temperature = 0.9f;
        r.min_p = 0.02f + 0.2f * unit(rng);
        break;
      case 5:
        r.temperature = 1.0f;
        r.top_k = 40;
        r.top_p = 0.9f;
        r.min_p = 0.05f;
        break;
      case 6:
        r.temperature = 2.0f;
        r.top_k = 5000;
        break;
      default:
        r.temperature = 0.5f;
        r.top_p = 0.99f;
        break;
    }
  }
  return rows;
}

void expect_same_tokens(const Twin& logits, std::span<const SamplingRow> rows, int allowed_mismatches) {
  const int m = int(rows.size());
  Twin out_tokens({m}, DType::kI32, DType::kI32);
  out_tokens.poison();
  cpu().sample(logits.cpu, rows, out_tokens.cpu);
  gpu().sample(logits.gpu, rows, out_tokens.gpu);
  gpu().synchronize();
  std::vector<float> g = out_tokens.gpu_values(), c = out_tokens.cpu_values();
  int mismatches = 0;
  for (int i = 0; i < m; ++i) {
    if (g[size_t(i)] == c[size_t(i)]) continue;
    ++mismatches;
    const SamplingRow& r = rows[size_t(i)];
    EXPECT_GT(r.temperature, 0.0f) << "greedy row " << i << ": gpu " << g[size_t(i)] << " cpu " << c[size_t(i)];
    std::printf("sample row %d differs (gpu %d, cpu %d): T %g top_k %d top_p %g min_p %g\n", i, int(g[size_t(i)]),
                int(c[size_t(i)]), r.temperature, r.top_k, r.top_p, r.min_p);
  }
  EXPECT_LE(mismatches, allowed_mismatches) << "of " << m << " rows";
  out_tokens.check_guards("sample out", true);
  logits.check_unchanged("sample logits");
}

TEST(BackendParity, SampleMatchesCpuOnRandomLogits) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (int64_t vocab : {13, 1000, 32003, 151936}) {  // 13: some CTAs of a row's cluster have no slice
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int m = 64;
    Twin logits({m, vocab}, DType::kF32, DType::kF32, {vocab + 5, 1});
    logits.fill_random(rng, -8.0f, 8.0f);
    std::vector<SamplingRow> rows = sampling_rows(m, rng);
    expect_same_tokens(logits, rows, 1);
    // Launches of arg-maxes alone: a CTA a row at 64 rows, a cluster a row at 4 (on sm_90).
    for (SamplingRow& r : rows) r.temperature = 0.0f;
    expect_same_tokens(logits, rows, 0);
    Tensor first4 = logits.gpu.slice(0, 4);
    Twin out4({4}, DType::kI32, DType::kI32);
    gpu().sample(first4, std::span<const SamplingRow>(rows.data(), 4), out4.gpu);
    gpu().synchronize();
    const std::vector<float> all = [&] {
      Twin out({m}, DType::kI32, DType::kI32);
      cpu().sample(logits.cpu, rows, out.cpu);
      return out.cpu_values();
    }();
    const std::vector<float> got4 = out4.gpu_values();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got4[size_t(i)], all[size_t(i)]) << "greedy row " << i << " of 4";
  }
}

// Backend::sample's distributions (speculative decoding verifies sampled drafts against them): the
// CPU backend's within f32 rounding of the softmax's sum and the kept mass, zero on the same
// tokens (a near-tie at a top-p or min-p boundary may move one row's cut), a point mass on the
// arg-max for greedy rows; tokens as without distributions; rows that ask for none leave theirs.
TEST(BackendParity, SampleDistributionsMatchCpu) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(17);
  for (int64_t vocab : {1000, 128256}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int m = 24;
    Twin logits({m, vocab}, DType::kF32);
    logits.fill_random(rng, -6.0f, 6.0f);
    std::vector<SamplingRow> rows = sampling_rows(m, rng);
    for (int i = 0; i < m; ++i) rows[size_t(i)].dist_row = i == 5 ? -1 : m - 1 - i;  // reversed, one without
    Twin dist({m, vocab}, DType::kF32);
    dist.set(std::vector<float>(size_t(m * vocab), -7.0f));
    Twin with({m}, DType::kI32, DType::kI32), without({m}, DType::kI32, DType::kI32);
    cpu().sample(logits.cpu, rows, with.cpu, &dist.cpu);
    gpu().sample(logits.gpu, rows, with.gpu, &dist.gpu);
    gpu().sample(logits.gpu, rows, without.gpu);
    gpu().synchronize();
    EXPECT_EQ(with.gpu_values(), without.gpu_values());
    const std::vector<float> g = dist.gpu_values(), c = dist.cpu_values(), tok = with.gpu_values();
    int cut_differs = 0;
    for (int i = 0; i < m; ++i) {
      const int32_t d = rows[size_t(i)].dist_row;
      const size_t base = size_t(d < 0 ? m - 1 - i : d) * size_t(vocab);
      if (d < 0) {
        EXPECT_TRUE(std::all_of(g.begin() + base, g.begin() + base + vocab, [](float x) { return x == -7.0f; }));
        continue;
      }
      EXPECT_GT(g[base + size_t(tok[size_t(i)])], 0.0f) << "row " << i << ": its token is outside its distribution";
      bool same_cut = true;
      double sum = 0.0, worst = 0.0;
      for (int64_t t = 0; t < vocab; ++t) {
        const float gv = g[base + size_t(t)], cv = c[base + size_t(t)];
        same_cut = same_cut && ((gv > 0.0f) == (cv > 0.0f));
        sum += gv;
        worst = std::max(worst, std::fabs(double(gv) - double(cv)) / std::max(double(cv), 1e-30));
      }
      EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << i;
      if (rows[size_t(i)].temperature <= 0.0f) {
        EXPECT_EQ(g[base + size_t(tok[size_t(i)])], 1.0f) << "greedy row " << i;
        EXPECT_TRUE(same_cut) << "greedy row " << i;
        continue;
      }
      if (!same_cut) {
        ++cut_differs;
        continue;
      }
      EXPECT_LT(worst, 1e-5) << "row " << i << ": T " << rows[size_t(i)].temperature << " top_k "
                             << rows[size_t(i)].top_k << " top_p " << rows[size_t(i)].top_p;
    }
    EXPECT_LE(cut_differs, 1) << "of " << m << " rows";
  }
}

// Every logit equal over a large vocabulary: the descents' candidates share p, so only the id bits
// of the keys separate them and a descent narrows to at most the gathered list's size late (after
// six of its eight passes); a few rows with a small vocabulary gather after the first pass.
TEST(BackendParity, SampleFlatRowsNarrowLate) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(13);
  for (int64_t vocab : {151936, 1000}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int m = 16;
    Twin logits({m, vocab}, DType::kF32);
    logits.set(std::vector<float>(size_t(m * vocab), 0.25f));
    std::vector<SamplingRow> rows = sampling_rows(m, rng);
    expect_same_tokens(logits, rows, 0);
  }
}

TEST(BackendParity, SampleTiesAndMaskedLogits) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(12);
  const int m = 48;
  const int64_t vocab = 4099;
  // Logits on a coarse grid (many exact ties) with a third of the vocabulary masked to -inf.
  std::vector<float> v(size_t(m * vocab));
  std::uniform_int_distribution<int> grid(-8, 4);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = float(grid(rng)) * 0.5f;
    if (i % 3 == 1) v[i] = -std::numeric_limits<float>::infinity();
  }
  Twin logits({m, vocab}, DType::kF32);
  logits.set(v);
  std::vector<SamplingRow> rows = sampling_rows(m, rng);
  expect_same_tokens(logits, rows, 1);
}

// mask_logits: the same -inf pattern on both backends, every other logit untouched (bit-exact).
TEST(BackendParity, MaskLogitsBitExact) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(21);
  const int m = 7;
  const int64_t vocab = 1000, words = (vocab + 31) / 32;
  Twin logits({m, vocab}, DType::kF32);
  logits.fill_random(rng, -5.0f, 5.0f);
  const std::vector<int32_t> rows = {0, 3, 6};
  std::vector<uint32_t> masks(rows.size() * size_t(words));
  for (size_t i = 0; i < masks.size(); ++i) masks[i] = uint32_t(rng());
  masks[1] = 0xffffffffu;  // a whole word allowed
  masks[2] = 0;            // a whole word masked
  auto upload = [&](Backend& b, const void* src, size_t bytes) {
    Buffer buf = b.alloc(bytes);
    b.copy_from_host(buf.data(), src, bytes);
    b.synchronize();
    return buf;
  };
  for (Backend* b : {&cpu(), &gpu()}) {
    Buffer r = upload(*b, rows.data(), rows.size() * 4), k = upload(*b, masks.data(), masks.size() * 4);
    Tensor rt = Tensor::contiguous(r.data(), DType::kI32, b->device(), {int64_t(rows.size())});
    Tensor kt = Tensor::contiguous(k.data(), DType::kI32, b->device(), {int64_t(rows.size()), words});
    b->mask_logits(b == &cpu() ? logits.cpu : logits.gpu, rt, kt);
    b->synchronize();
  }
  const std::vector<float> g = logits.gpu_values(), c = logits.cpu_values();
  ASSERT_EQ(g.size(), c.size());
  int masked = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i] == c[i] || (std::isinf(g[i]) && std::isinf(c[i]))) << "element " << i;
    masked += std::isinf(g[i]) ? 1 : 0;
  }
  EXPECT_GT(masked, 1000);
  EXPECT_LT(masked, 3 * 1000);
}

// logprobs: the CUDA kernel against the CPU reference on a large vocabulary, on rows with many
// exact ties (top lists ordered by id there) and on rows with masked (-inf) tokens, fewer
// unmasked tokens than the list asks for, and a selection of rows out of order.
TEST(BackendParity, LogprobsMatchCpu) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  const int m = 9, n = Backend::kMaxTopLogprobs;
  const int64_t vocab = 128256;
  std::vector<float> v(size_t(m) * size_t(vocab));
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  std::uniform_int_distribution<int> grid(-6, 3);
  for (int r = 0; r < m; ++r) {
    for (int64_t t = 0; t < vocab; ++t) {
      float x = r % 3 == 1 ? float(grid(rng)) * 0.25f : u(rng);                   // rows 1, 4, 7: coarse grid (ties)
      if (r % 3 == 2 && t % 5 != 0) x = -std::numeric_limits<float>::infinity();  // 2, 5, 8: masked
      v[size_t(r) * size_t(vocab) + size_t(t)] = x;
    }
  }
  // Row 8: only 7 tokens left, fewer than the 20 asked for.
  for (int64_t t = 0; t < vocab; ++t)
    if (t % 5 == 0 && t >= 35) v[size_t(8) * size_t(vocab) + size_t(t)] = -std::numeric_limits<float>::infinity();
  Twin logits({m, vocab}, DType::kF32);
  logits.set(v);
  const std::vector<int32_t> rows = {8, 0, 1, 2, 4, 7, 5, 3};
  std::vector<int32_t> tokens(static_cast<size_t>(m));
  for (int r = 0; r < m; ++r) tokens[size_t(r)] = int32_t(r * 977 % vocab) / 5 * 5;  // unmasked
  tokens[8] = 10;
  const auto r = int64_t(rows.size());
  struct Out {
    std::vector<float> stats, top_lp;
    std::vector<int32_t> top_ids;
  };
  auto run = [&](Backend& b, const Tensor& lg) {
    auto upload = [&](const void* src, size_t bytes) {
      Buffer buf = b.alloc(bytes);
      b.copy_from_host(buf.data(), src, bytes);
      return buf;
    };
    Buffer rb = upload(rows.data(), rows.size() * 4), tb = upload(tokens.data(), tokens.size() * 4);
    Buffer sb = b.alloc(size_t(r) * 8), ib = b.alloc(size_t(r * n) * 4), lb = b.alloc(size_t(r * n) * 4);
    const Device d = b.device();
    Tensor rt = Tensor::contiguous(rb.data(), DType::kI32, d, {r});
    Tensor tt = Tensor::contiguous(tb.data(), DType::kI32, d, {int64_t(m)});
    Tensor st = Tensor::contiguous(sb.data(), DType::kF32, d, {r, 2});
    Tensor it = Tensor::contiguous(ib.data(), DType::kI32, d, {r, int64_t(n)});
    Tensor lt = Tensor::contiguous(lb.data(), DType::kF32, d, {r, int64_t(n)});
    b.logprobs(lg, rt, tt, n, st, it, lt);
    Out o{std::vector<float>(size_t(r) * 2), std::vector<float>(size_t(r * n)), std::vector<int32_t>(size_t(r * n))};
    b.copy_to_host(o.stats.data(), sb.data(), size_t(r) * 8);
    b.copy_to_host(o.top_lp.data(), lb.data(), size_t(r * n) * 4);
    b.copy_to_host(o.top_ids.data(), ib.data(), size_t(r * n) * 4);
    b.synchronize();
    return o;
  };
  const Out c = run(cpu(), logits.cpu), g = run(gpu(), logits.gpu);
  for (int64_t i = 0; i < r; ++i) {
    // The normalizer's double sum runs in another order: a few f32 ulps at most.
    for (int k = 0; k < 2; ++k)
      EXPECT_NEAR(g.stats[size_t(2 * i + k)], c.stats[size_t(2 * i + k)],
                  4e-6f * std::fabs(c.stats[size_t(2 * i + 1)]) + 1e-6f)
          << "row " << rows[size_t(i)] << (k == 0 ? " chosen" : " lse");
    for (int j = 0; j < n; ++j) {
      const size_t e = size_t(i * n + j);
      ASSERT_EQ(g.top_ids[e], c.top_ids[e]) << "row " << rows[size_t(i)] << " entry " << j;
      if (c.top_ids[e] < 0) {
        EXPECT_TRUE(std::isinf(g.top_lp[e]) && g.top_lp[e] < 0);
      } else {
        EXPECT_NEAR(g.top_lp[e], c.top_lp[e], 4e-6f * std::fabs(c.stats[size_t(2 * i + 1)]) + 1e-6f);
      }
    }
  }
  // Row 8 (first selected) lists its 7 tokens, then none; a tie row lists equal values by id.
  for (int j = 0; j < 7; ++j) EXPECT_TRUE(c.top_ids[size_t(j)] % 5 == 0 && c.top_ids[size_t(j)] < 35);
  EXPECT_EQ(c.top_ids[7], -1);
  for (int j = 1; j < n; ++j) {
    const size_t e = size_t(2 * n + j);  // row 1
    const float a = v[size_t(vocab) + size_t(c.top_ids[e - 1])], b = v[size_t(vocab) + size_t(c.top_ids[e])];
    EXPECT_TRUE(a > b || (a == b && c.top_ids[e - 1] < c.top_ids[e]));
  }
}

TEST(BackendParity, SampleIsDeterministicAndSeeded) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(13);
  const int m = 32;
  const int64_t vocab = 50000;
  Twin logits({m, vocab}, DType::kF32);
  logits.fill_random(rng, -3.0f, 3.0f);
  auto rows = std::vector<SamplingRow>(size_t(m));
  for (int i = 0; i < m; ++i) {
    rows[size_t(i)].temperature = 1.0f;
    rows[size_t(i)].seed = 42;
    rows[size_t(i)].counter = uint64_t(i);
  }
  Twin a({m}, DType::kI32, DType::kI32), b({m}, DType::kI32, DType::kI32);
  gpu().sample(logits.gpu, rows, a.gpu);
  gpu().sample(logits.gpu, rows, b.gpu);
  gpu().synchronize();
  std::vector<float> ta = a.gpu_values(), tb = b.gpu_values();
  EXPECT_EQ(ta, tb) << "same seeds and logits gave different tokens";
  // A row sampled alone gives the token it gets among others (nothing a row's CTAs compute
  // depends on its batch).
  for (int i : {0, 17, 31}) {
    Tensor row = logits.gpu.slice(i, i + 1);
    Twin one({1}, DType::kI32, DType::kI32);
    gpu().sample(row, std::span<const SamplingRow>(&rows[size_t(i)], 1), one.gpu);
    gpu().synchronize();
    EXPECT_EQ(one.gpu_values()[0], ta[size_t(i)]) << "row " << i << " alone";
  }
  // Different counters over flat-ish logits must not all pick one token.
  std::sort(ta.begin(), ta.end());
  EXPECT_GT(std::unique(ta.begin(), ta.end()) - ta.begin(), m / 2);
}

// ---- memory

TEST(BackendParity, ArenaReusesFreedMemory) {
  FG_REQUIRE_GPU();
  void* first = nullptr;
  {
    Buffer a = gpu().alloc(size_t(3) << 20);
    first = a.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 256, 0u);
  }
  Buffer b = gpu().alloc(size_t(3) << 20);
  EXPECT_EQ(b.data(), first) << "a freed block of the same size should be handed out again";
  Buffer pinned = gpu().alloc_host(4096);
  ASSERT_NE(pinned.data(), nullptr);
  std::memset(pinned.data(), 0x3c, 4096);
  gpu().copy_from_host(b.data(), pinned.data(), 4096);
  std::vector<uint8_t> back(4096, 0);
  gpu().copy_to_host(back.data(), b.data(), 4096);
  gpu().synchronize();
  EXPECT_EQ(back[0], 0x3c);
  EXPECT_EQ(back[4095], 0x3c);
}

}  // namespace
}  // namespace fg::parity
