// The CPU backend's paged attention against a naive dense attention written here (double
// precision, K/V in one contiguous array per sequence). The test scatters K/V into pages in a
// random permutation of page ids (unused slots hold NaN, so reading one shows), builds ragged
// batches mixing decode (q_len 1), prefill (q_len == kv_len) and chunked continuations, and covers
// page sizes 1/3/16/256, GQA ratios 1/4/8, sliding window, softcap and non-causal rows. Outputs
// are poisoned before each call and must come back fully written with their guards intact.
// Also: results do not depend on page size or on what else shares the batch (bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"

namespace fg {
namespace {

using test::PaddedF32;

struct Shape {
  int64_t q_heads, kv_heads, head_dim;
};

// One sequence's data: its new queries and its whole K/V history (dense).
struct SeqData {
  int64_t q_len, kv_len;
  std::vector<float> q;     // [q_len, q_heads, head_dim]
  std::vector<float> k, v;  // [kv_len, kv_heads, head_dim]
};

SeqData random_seq(int64_t q_len, int64_t kv_len, const Shape& sh, uint32_t seed, float q_amp) {
  SeqData s{q_len, kv_len, test::random_floats(size_t(q_len * sh.q_heads * sh.head_dim), seed, -q_amp, q_amp),
            test::random_floats(size_t(kv_len * sh.kv_heads * sh.head_dim), seed + 1),
            test::random_floats(size_t(kv_len * sh.kv_heads * sh.head_dim), seed + 2)};
  return s;
}

struct Outputs {
  std::vector<float> out;  // [total_q, q_heads, head_dim]
  std::vector<float> lse;  // [total_q, q_heads]
};

// Dense reference in double: every (token, head) row over the visible keys of its sequence.
Outputs naive_attention(const std::vector<const SeqData*>& seqs, const Shape& sh, const AttentionParams& p) {
  Outputs r;
  const int64_t group = sh.q_heads / sh.kv_heads, dim = sh.head_dim;
  std::vector<double> scores, acc(static_cast<size_t>(dim));
  for (const SeqData* s : seqs) {
    for (int64_t i = 0; i < s->q_len; ++i) {
      const int64_t pos = s->kv_len - s->q_len + i;
      for (int64_t h = 0; h < sh.q_heads; ++h) {
        const float* q = &s->q[size_t((i * sh.q_heads + h) * dim)];
        const int64_t g = h / group;
        scores.assign(size_t(s->kv_len), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < s->kv_len; ++j) {
          if (p.causal && j > pos) continue;
          if (p.sliding_window > 0 && pos - j >= p.sliding_window) continue;
          const float* k = &s->k[size_t((j * sh.kv_heads + g) * dim)];
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) dot += double(q[d]) * double(k[d]);
          double score = double(p.scale) * dot;
          if (p.softcap > 0.0f) score = double(p.softcap) * std::tanh(score / double(p.softcap));
          scores[size_t(j)] = score;
          m = std::max(m, score);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0.0;
        for (int64_t j = 0; j < s->kv_len; ++j) {
          if (scores[size_t(j)] == -std::numeric_limits<double>::infinity()) continue;
          const double e = std::exp(scores[size_t(j)] - m);
          l += e;
          const float* v = &s->v[size_t((j * sh.kv_heads + g) * dim)];
          for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += e * double(v[d]);
        }
        for (int64_t d = 0; d < dim; ++d) r.out.push_back(float(acc[size_t(d)] / l));
        r.lse.push_back(float(std::log(l) + m));
      }
    }
  }
  return r;
}

// Runs the backend on the sequences as one ragged batch over a paged cache with `page_size`.
// q is a head view of a fused qkv buffer. Checks that out and lse are fully written and that
// nothing around them changed.
Outputs run_paged(Backend& be, const std::vector<const SeqData*>& seqs, const Shape& sh, int64_t page_size,
                  const AttentionParams& params, uint32_t page_seed) {
  const int64_t num_seqs = int64_t(seqs.size()), dim = sh.head_dim;
  std::vector<int32_t> cu_seqlens(1, 0), seqlens_kv;
  int64_t max_q = 0, max_kv = 0, max_pages = 0, total_pages = 0;
  for (const SeqData* s : seqs) {
    cu_seqlens.push_back(int32_t(cu_seqlens.back() + s->q_len));
    seqlens_kv.push_back(int32_t(s->kv_len));
    max_q = std::max(max_q, s->q_len);
    max_kv = std::max(max_kv, s->kv_len);
    const int64_t pages = (s->kv_len + page_size - 1) / page_size;
    max_pages = std::max(max_pages, pages);
    total_pages += pages;
  }
  const int64_t total_q = cu_seqlens.back();
  // Pages in a random order, a few spare ones; unused slots and spare pages hold NaN.
  const int64_t num_pages = total_pages + 3;
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::mt19937 rng(page_seed);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  const int64_t bt_cols = max_pages + 2;  // extra columns hold garbage that must never be read
  std::vector<int32_t> block_table(size_t(num_seqs * bt_cols), -12345);
  const int64_t slot_elems = sh.kv_heads * dim;
  std::vector<float> kc(size_t(num_pages * page_size * slot_elems), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> vc = kc;
  int64_t next_page = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t j = 0; j < seqs[size_t(s)]->kv_len; ++j) {
      if (j % page_size == 0) block_table[size_t(s * bt_cols + j / page_size)] = page_ids[size_t(next_page++)];
      const int64_t slot = int64_t(block_table[size_t(s * bt_cols + j / page_size)]) * page_size + j % page_size;
      std::copy_n(&seqs[size_t(s)]->k[size_t(j * slot_elems)], slot_elems, &kc[size_t(slot * slot_elems)]);
      std::copy_n(&seqs[size_t(s)]->v[size_t(j * slot_elems)], slot_elems, &vc[size_t(slot * slot_elems)]);
    }
  }
  KvCacheLayer cache{
      Tensor::contiguous(kc.data(), DType::kF32, Device::kCpu, {num_pages, page_size, sh.kv_heads, dim}),
      Tensor::contiguous(vc.data(), DType::kF32, Device::kCpu, {num_pages, page_size, sh.kv_heads, dim})};

  // q as the first q_heads heads of a fused [total_q, q_heads + 2 * kv_heads, head_dim] buffer.
  PaddedF32 fused({total_q, sh.q_heads + 2 * sh.kv_heads, dim}, 1, page_seed + 7);
  int64_t t = 0;
  for (const SeqData* s : seqs)
    for (int64_t i = 0; i < s->q_len; ++i, ++t)
      for (int64_t h = 0; h < sh.q_heads; ++h)
        for (int64_t d = 0; d < dim; ++d) fused.at(t, h, d) = s->q[size_t((i * sh.q_heads + h) * dim + d)];
  Tensor q = fused.view;
  q.shape[1] = sh.q_heads;

  AttentionBatch batch;
  batch.cu_seqlens_q = Tensor::contiguous(cu_seqlens.data(), DType::kI32, Device::kCpu, {num_seqs + 1});
  batch.seqlens_kv = Tensor::contiguous(seqlens_kv.data(), DType::kI32, Device::kCpu, {num_seqs});
  batch.block_table = Tensor::contiguous(block_table.data(), DType::kI32, Device::kCpu, {num_seqs, bt_cols});
  batch.num_seqs = int(num_seqs);
  batch.total_q = int(total_q);
  batch.max_q_len = int(max_q);
  batch.max_kv_len = int(max_kv);
  batch.page_size = int(page_size);
  batch.host_cu_seqlens_q = cu_seqlens;
  batch.host_seqlens_kv = seqlens_kv;

  PaddedF32 out({total_q, sh.q_heads, dim}, 0, page_seed + 8), lse({total_q, sh.q_heads}, 0, page_seed + 9);
  out.poison();
  lse.poison();
  auto plan = make_attention_plan(be, {int(sh.q_heads), int(sh.kv_heads), int(dim), int(total_q), int(num_seqs)});
  be.plan_attention(*plan, batch);
  be.attention(*plan, q, cache, batch, params, out.view, &lse.view);
  EXPECT_TRUE(out.all_finite());
  EXPECT_TRUE(lse.all_finite());
  EXPECT_TRUE(out.untouched_outside());
  EXPECT_TRUE(lse.untouched_outside());

  Outputs r;
  out.for_each([&](int64_t i, int64_t j, int64_t k) { r.out.push_back(out.at(i, j, k)); });
  lse.for_each([&](int64_t i, int64_t j, int64_t) { r.lse.push_back(lse.at(i, j)); });
  return r;
}

::testing::AssertionResult outputs_near(const Outputs& got, const Outputs& want) {
  if (got.out.size() != want.out.size() || got.lse.size() != want.lse.size())
    return ::testing::AssertionFailure() << "output sizes differ";
  for (size_t e = 0; e < want.out.size(); ++e) {
    auto r = test::near(got.out[e], want.out[e], 1e-5, 1e-5, "out", int64_t(e));
    if (!r) return r;
  }
  for (size_t e = 0; e < want.lse.size(); ++e) {
    auto r = test::near(got.lse[e], want.lse[e], 1e-5, 1e-5, "lse", int64_t(e));
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

TEST(CpuAttention, MatchesDenseReferenceOverRaggedPagedBatches) {
  auto be = make_cpu_backend();
  const int64_t page_sizes[] = {1, 3, 16, 256};
  const int64_t ratios[] = {1, 4, 8};
  const int64_t head_dims[] = {8, 24, 64, 40};
  int case_index = 0;
  for (int64_t page_size : page_sizes) {
    for (int64_t ratio : ratios) {
      for (int variant = 0; variant < 4; ++variant, ++case_index) {
        const bool window_on = variant & 1, softcap_on = variant & 2;
        const Shape sh{ratio * (ratio == 8 ? 1 : 2), ratio == 8 ? 1 : 2, head_dims[case_index % 4]};
        std::mt19937 rng(uint32_t(1000 + case_index));
        auto uniform = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
        AttentionParams params;
        params.scale = 1.0f / std::sqrt(float(sh.head_dim));
        params.causal = case_index % 5 != 3;
        params.sliding_window = window_on ? int(case_index % 3 == 0 ? 1 : uniform(2, 300)) : 0;
        params.softcap = softcap_on ? 3.0f : 0.0f;
        // Always a decode, a full prefill and a chunked continuation, plus up to two more of any kind.
        std::vector<std::pair<int64_t, int64_t>> lens;  // (q_len, kv_len)
        lens.push_back({1, case_index % 7 == 0 ? 1 : uniform(1, 2000)});
        const int64_t prefill = uniform(1, 64);
        lens.push_back({prefill, prefill});
        const int64_t chunk = uniform(2, 64);
        lens.push_back({chunk, uniform(chunk, 2000)});
        for (int64_t extra = uniform(0, 2); extra > 0; --extra) {
          const int64_t q_len = uniform(1, 64);
          lens.push_back({q_len, uniform(q_len, 2000)});
        }
        std::shuffle(lens.begin(), lens.end(), rng);
        std::vector<SeqData> data;
        for (size_t s = 0; s < lens.size(); ++s)
          data.push_back(random_seq(lens[s].first, lens[s].second, sh, uint32_t(case_index * 100 + s * 3), 6.0f));
        std::vector<const SeqData*> seqs;
        for (const SeqData& s : data) seqs.push_back(&s);

        std::string trace = "page_size=" + std::to_string(page_size) + " q_heads=" + std::to_string(sh.q_heads) +
                            " kv_heads=" + std::to_string(sh.kv_heads) + " head_dim=" + std::to_string(sh.head_dim) +
                            " causal=" + std::to_string(params.causal) +
                            " window=" + std::to_string(params.sliding_window) +
                            " softcap=" + std::to_string(params.softcap) + " seqs(q,kv):";
        for (auto [q_len, kv_len] : lens) trace += " (" + std::to_string(q_len) + "," + std::to_string(kv_len) + ")";
        SCOPED_TRACE(trace);
        const Outputs got = run_paged(*be, seqs, sh, page_size, params, uint32_t(case_index));
        ASSERT_TRUE(outputs_near(got, naive_attention(seqs, sh, params)));
      }
    }
  }
}

TEST(CpuAttention, ResultsDoNotDependOnPageSizeOrBatchMates) {
  auto be = make_cpu_backend();
  const Shape sh{8, 2, 32};
  AttentionParams params;
  params.scale = 0.2f;
  params.sliding_window = 100;
  std::vector<SeqData> data;
  data.push_back(random_seq(1, 777, sh, 1, 2.0f));
  data.push_back(random_seq(40, 40, sh, 2, 2.0f));
  data.push_back(random_seq(17, 301, sh, 3, 2.0f));
  std::vector<const SeqData*> all = {&data[0], &data[1], &data[2]};
  const Outputs ref = run_paged(*be, all, sh, 16, params, 5);
  for (int64_t page_size : {1, 3, 256}) {
    const Outputs other = run_paged(*be, all, sh, page_size, params, uint32_t(page_size));
    ASSERT_EQ(other.out, ref.out) << "page_size " << page_size;
    ASSERT_EQ(other.lse, ref.lse) << "page_size " << page_size;
  }
  // The third sequence alone gives exactly its rows of the batch.
  const Outputs alone = run_paged(*be, {&data[2]}, sh, 3, params, 9);
  const size_t row0 = size_t(1 + 40);
  ASSERT_EQ(alone.out, std::vector<float>(ref.out.begin() + long(row0 * 8 * 32), ref.out.end()));
  ASSERT_EQ(alone.lse, std::vector<float>(ref.lse.begin() + long(row0 * 8), ref.lse.end()));
}

// A sequence's rows are the same bits whether its tokens come as one prefill, in chunks (after
// cached keys), or one by one as decodes: what batch-invariant mode needs when a busy step cuts a
// prompt into other chunks or speculation verifies several tokens at once.
TEST(CpuAttention, ResultsDoNotDependOnChunking) {
  auto be = make_cpu_backend();
  for (int64_t group : {1, 3, 8}) {
    const Shape sh{2 * group, 2, 64};
    AttentionParams params;
    params.scale = 0.125f;
    params.sliding_window = group == 3 ? 90 : 0;
    params.softcap = group == 8 ? 20.0f : 0.0f;
    const SeqData whole = random_seq(150, 170, sh, uint32_t(40 + group), 3.0f);
    const Outputs ref = run_paged(*be, {&whole}, sh, 16, params, 1);
    // Chunks [a, b) of the 150 new tokens: one token, a short and a long chunk, a single decode.
    for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 1}, {1, 9}, {9, 149}, {149, 150}}) {
      SCOPED_TRACE("group " + std::to_string(group) + " chunk [" + std::to_string(a) + ", " + std::to_string(b) + ")");
      const int64_t row = sh.q_heads * sh.head_dim;
      SeqData chunk{b - a, whole.kv_len - whole.q_len + b,
                    std::vector<float>(whole.q.begin() + a * row, whole.q.begin() + b * row), whole.k, whole.v};
      const Outputs got = run_paged(*be, {&chunk}, sh, 16, params, uint32_t(a + 2));
      ASSERT_EQ(got.out, std::vector<float>(ref.out.begin() + a * row, ref.out.begin() + b * row));
      ASSERT_EQ(got.lse, std::vector<float>(ref.lse.begin() + a * sh.q_heads, ref.lse.begin() + b * sh.q_heads));
    }
  }
}

TEST(CpuAttention, LseIsOptional) {
  auto be = make_cpu_backend();
  const Shape sh{4, 1, 16};
  SeqData s = random_seq(5, 9, sh, 4, 1.0f);
  std::vector<int32_t> cu = {0, 5}, kv = {9}, bt = {1, 0, 2};
  std::vector<float> kc(size_t(3 * 4 * 16)), vc(kc.size());
  for (int64_t j = 0; j < 9; ++j) {  // page_size 4: pages 1, 0, 2
    const int64_t slot = int64_t(bt[size_t(j / 4)]) * 4 + j % 4;
    std::copy_n(&s.k[size_t(j * 16)], 16, &kc[size_t(slot * 16)]);
    std::copy_n(&s.v[size_t(j * 16)], 16, &vc[size_t(slot * 16)]);
  }
  KvCacheLayer cache{Tensor::contiguous(kc.data(), DType::kF32, Device::kCpu, {3, 4, 1, 16}),
                     Tensor::contiguous(vc.data(), DType::kF32, Device::kCpu, {3, 4, 1, 16})};
  AttentionBatch batch{test::view_of(cu),
                       test::view_of(kv),
                       Tensor::contiguous(bt.data(), DType::kI32, Device::kCpu, {1, 3}),
                       1,
                       5,
                       5,
                       9,
                       4,
                       cu,
                       kv};
  std::vector<float> out(5 * 4 * 16, std::numeric_limits<float>::quiet_NaN());
  Tensor q = Tensor::contiguous(s.q.data(), DType::kF32, Device::kCpu, {5, 4, 16});
  Tensor o = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {5, 4, 16});
  AttentionParams params;
  params.scale = 0.25f;
  auto plan = make_attention_plan(*be, {4, 1, 16, 5, 1});
  be->plan_attention(*plan, batch);
  be->attention(*plan, q, cache, batch, params, o, nullptr);
  const Outputs want = naive_attention({&s}, sh, params);
  for (size_t e = 0; e < out.size(); ++e) ASSERT_TRUE(test::near(out[e], want.out[e], 1e-5, 1e-5, "out", int64_t(e)));
}

TEST(CpuAttention, MalformedMetadataAbortsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_cpu_backend();
  std::vector<int32_t> cu = {0, 5}, kv = {4}, bt = {0, 1};
  AttentionBatch batch{test::view_of(cu),
                       test::view_of(kv),
                       Tensor::contiguous(bt.data(), DType::kI32, Device::kCpu, {1, 2}),
                       1,
                       5,
                       5,
                       5,
                       4,
                       cu,
                       kv};
  auto plan = make_attention_plan(*be, {4, 2, 16, 8, 2});
  EXPECT_DEATH(be->plan_attention(*plan, batch), "plan_attention: sequence 0 has q_len 5 and kv_len 4");
  kv[0] = 9;  // needs 3 pages of 4, the table holds 2
  batch.max_kv_len = 9;
  EXPECT_DEATH(be->plan_attention(*plan, batch), "more pages than block_table");
  EXPECT_DEATH(make_attention_plan(*be, {4, 3, 16, 8, 2}), "must be a positive multiple of num_kv_heads");
}

}  // namespace
}  // namespace fg
