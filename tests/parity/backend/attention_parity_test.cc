// Parity sweep of the CUDA attention op (through fg::Backend, so it checks whatever kernel the
// CUDA backend forwards to) against the CPU reference: varlen queries over a paged KV cache.
// Fixed edge cases plus a seeded random sweep over num_seqs 1..256, q_len 1..512, kv_len 1..32k,
// page sizes 1/3/16/48/64/256, GQA 1/4/8, head_dim 64/128/256, sliding window and softcap on/off,
// strided q, LSE output. The CPU reference's work per case is bounded (kMaxCaseMacs) so the whole
// sweep runs in about a minute on the GPU machine.
//
// fp8 KV rows (AttentionFp8*): the same cases over an fp8 cache (e4m3 codes, a power-of-two scale
// per kv head) whose codes both backends read; the CPU reference dequantizes them exactly, so the
// tolerances are the bf16 ones.
//
// Environment: FG_PARITY_SEED changes the random draw (default 2026); the seed of each case is
// printed with its failure so any case can be replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "parity_harness.h"

namespace fg::parity {
namespace {

constexpr double kOutTol = 1e-2;        // ||gpu - cpu|| / ||cpu|| of out (bf16)
constexpr double kLseTol = 2e-2;        // max |gpu - cpu| of lse (natural log)
constexpr double kMaxCaseMacs = 3e8;    // sum over (query, visible key, q head) of head_dim
constexpr double kMaxCacheElems = 8e6;  // per cache: bounds host memory and fill time
constexpr int kRandomCases = 200;

struct AttnCase {
  std::vector<int> q_lens;
  std::vector<int> kv_lens;
  int page_size = 16;
  int num_kv_heads = 1;
  int group = 1;  // q heads per kv head
  int head_dim = 128;
  int window = 0;
  float softcap = 0.0f;
  bool causal = true;
  bool lse = false;
  bool strided_q = false;
  bool fp8 = false;  // fp8 KV cache
  uint64_t seed = 0;

  std::string describe() const {
    std::ostringstream os;
    int max_q = *std::max_element(q_lens.begin(), q_lens.end());
    int max_kv = *std::max_element(kv_lens.begin(), kv_lens.end());
    os << "seqs " << q_lens.size() << " max_q " << max_q << " max_kv " << max_kv << " page " << page_size
       << " kv_heads " << num_kv_heads << " group " << group << " head_dim " << head_dim << " window " << window
       << " softcap " << softcap << (causal ? " causal" : " non-causal") << (lse ? " lse" : "")
       << (strided_q ? " strided-q" : "") << (fp8 ? " fp8-kv" : "") << " seed " << seed;
    return os.str();
  }

  // Multiply-adds of q.k over visible keys (the same again for p.v).
  double macs() const {
    double total = 0.0;
    for (size_t s = 0; s < q_lens.size(); ++s) {
      for (int i = 0; i < q_lens[s]; ++i) {
        double visible = kv_lens[s];
        if (causal) visible = kv_lens[s] - q_lens[s] + i + 1;
        if (window > 0) visible = std::min<double>(visible, window);
        total += visible;
      }
    }
    return total * num_kv_heads * group * head_dim;
  }

  // Elements of one of the two caches (whole pages).
  double cache_elems() const {
    double slots = 0.0;
    for (int kv : kv_lens) slots += double((kv + page_size - 1) / page_size) * page_size;
    return slots * num_kv_heads * head_dim;
  }
};

void run_case(const AttnCase& c) {
  SCOPED_TRACE(c.describe());
  std::mt19937_64 rng(c.seed);
  const int num_seqs = int(c.q_lens.size());
  const int hk = c.num_kv_heads, hq = c.num_kv_heads * c.group, d = c.head_dim;

  // Metadata and a shuffled page assignment (pages of a sequence are not contiguous).
  std::vector<int32_t> cu(size_t(num_seqs) + 1, 0);
  auto kv = std::vector<int32_t>(size_t(num_seqs));
  int max_pages = 1, needed = 0;
  for (int s = 0; s < num_seqs; ++s) {
    cu[size_t(s) + 1] = cu[size_t(s)] + c.q_lens[size_t(s)];
    kv[size_t(s)] = c.kv_lens[size_t(s)];
    int pages = (kv[size_t(s)] + c.page_size - 1) / c.page_size;
    max_pages = std::max(max_pages, pages);
    needed += pages;
  }
  const int total_q = cu.back();
  const int num_pages = needed + 3;
  auto page_ids = std::vector<int>(size_t(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  std::vector<float> table(size_t(num_seqs) * size_t(max_pages), -1.0f);  // unused entries: -1
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    int pages = (kv[size_t(s)] + c.page_size - 1) / c.page_size;
    for (int p = 0; p < pages; ++p) table[size_t(s) * size_t(max_pages) + size_t(p)] = float(page_ids[size_t(next++)]);
  }
  Twin cu_t({num_seqs + 1}, DType::kI32, DType::kI32), kv_t({num_seqs}, DType::kI32, DType::kI32);
  Twin table_t({num_seqs, max_pages}, DType::kI32, DType::kI32);
  cu_t.set(std::vector<float>(cu.begin(), cu.end()));
  kv_t.set(std::vector<float>(kv.begin(), kv.end()));
  table_t.set(table);

  // Cache contents everywhere (also slots no sequence owns: a kernel reading them gets garbage).
  Twin k_cache({num_pages, c.page_size, hk, d}, DType::kBF16), v_cache({num_pages, c.page_size, hk, d}, DType::kBF16);
  k_cache.fill_random(rng, -1.0f, 1.0f);
  v_cache.fill_random(rng, -1.0f, 1.0f);
  const int64_t q_row = c.strided_q ? int64_t(hq + 2 * hk) * d : int64_t(hq) * d;
  // fp8 pages: those values quantized with a power-of-two scale per kv head (2^-7 / 2^-8: values
  // below 1 use e4m3's whole range), the same codes on both backends; the arbiter below reads
  // the dequantized values.
  std::vector<float> kv_k = k_cache.cpu_values(), kv_v = v_cache.cpu_values();
  std::vector<uint8_t> k8, v8;
  std::vector<float> scales(2 * size_t(hk));
  Buffer k8_gpu, v8_gpu, scales_gpu;
  KvCacheLayer cache_c{k_cache.cpu, v_cache.cpu}, cache_g{k_cache.gpu, v_cache.gpu};
  if (c.fp8) {
    for (int h = 0; h < hk; ++h) {
      scales[size_t(h)] = std::ldexp(1.0f, -7 - h % 2);
      scales[size_t(hk + h)] = std::ldexp(1.0f, -8 + h % 2);
    }
    k8.resize(kv_k.size());
    v8.resize(kv_v.size());
    for (size_t e = 0; e < kv_k.size(); ++e) {
      const size_t h = (e / size_t(d)) % size_t(hk);
      k8[e] = f32_to_f8e4m3(kv_k[e] / scales[h]);
      v8[e] = f32_to_f8e4m3(kv_v[e] / scales[size_t(hk) + h]);
      kv_k[e] = f8e4m3_to_f32(k8[e]) * scales[h];
      kv_v[e] = f8e4m3_to_f32(v8[e]) * scales[size_t(hk) + h];
    }
    Backend& g = *backends().gpu;
    k8_gpu = g.alloc(k8.size());
    v8_gpu = g.alloc(v8.size());
    scales_gpu = g.alloc(scales.size() * 4);
    g.copy_from_host(k8_gpu.data(), k8.data(), k8.size());
    g.copy_from_host(v8_gpu.data(), v8.data(), v8.size());
    g.copy_from_host(scales_gpu.data(), scales.data(), scales.size() * 4);
    g.synchronize();
    const std::initializer_list<int64_t> shape = {num_pages, c.page_size, hk, d};
    cache_c = {Tensor::contiguous(k8.data(), DType::kF8E4M3, Device::kCpu, shape),
               Tensor::contiguous(v8.data(), DType::kF8E4M3, Device::kCpu, shape),
               Tensor::contiguous(scales.data(), DType::kF32, Device::kCpu, {hk}),
               Tensor::contiguous(scales.data() + hk, DType::kF32, Device::kCpu, {hk})};
    cache_g = {Tensor::contiguous(k8_gpu.data(), DType::kF8E4M3, Device::kCuda, shape),
               Tensor::contiguous(v8_gpu.data(), DType::kF8E4M3, Device::kCuda, shape),
               Tensor::contiguous(scales_gpu.data(), DType::kF32, Device::kCuda, {hk}),
               Tensor::contiguous(static_cast<float*>(scales_gpu.data()) + hk, DType::kF32, Device::kCuda, {hk})};
  }
  Twin q({total_q, hq, d}, DType::kBF16, DType::kF32, {q_row, d, 1});
  q.fill_random(rng, -2.0f, 2.0f);
  Twin out({total_q, hq, d}, DType::kBF16);
  Twin lse({total_q, hq}, DType::kF32);
  out.poison();
  lse.poison();

  int max_q = 0, max_kv = 0;
  for (int s = 0; s < num_seqs; ++s) {
    max_q = std::max(max_q, c.q_lens[size_t(s)]);
    max_kv = std::max(max_kv, c.kv_lens[size_t(s)]);
  }
  auto batch_for = [&](bool on_gpu) {
    AttentionBatch b;
    b.cu_seqlens_q = on_gpu ? cu_t.gpu : cu_t.cpu;
    b.seqlens_kv = on_gpu ? kv_t.gpu : kv_t.cpu;
    b.block_table = on_gpu ? table_t.gpu : table_t.cpu;
    b.num_seqs = num_seqs;
    b.total_q = total_q;
    b.max_q_len = max_q;
    b.max_kv_len = max_kv;
    b.page_size = c.page_size;
    b.host_cu_seqlens_q = std::span<const int32_t>(cu);
    b.host_seqlens_kv = std::span<const int32_t>(kv);
    return b;
  };
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(float(d));
  params.causal = c.causal;
  params.sliding_window = c.window;
  params.softcap = c.softcap;

  AttentionBatch bc = batch_for(false), bg = batch_for(true);
  Backend& cpu = *backends().cpu;
  Backend& gpu = *backends().gpu;
  const AttentionPlanShape plan_shape{hq, hk, d, std::max(1, bc.total_q), std::max(1, bc.num_seqs)};
  auto plan_c = make_attention_plan(cpu, plan_shape), plan_g = make_attention_plan(gpu, plan_shape);
  cpu.plan_attention(*plan_c, bc);
  cpu.attention(*plan_c, q.cpu, cache_c, bc, params, out.cpu, c.lse ? &lse.cpu : nullptr);
  gpu.plan_attention(*plan_g, bg);
  gpu.attention(*plan_g, q.gpu, cache_g, bg, params, out.gpu, c.lse ? &lse.gpu : nullptr);
  gpu.synchronize();

  const std::vector<float> out_gpu = out.gpu_values(), out_cpu = out.cpu_values();
  double err = rel_error(out_gpu, out_cpu);
  EXPECT_LT(err, kOutTol) << "out relative error";
  out.check_guards("attention out", true);

  // Per-sequence errors (which sequences disagree), then an arbiter: a double-precision naive
  // attention on sampled rows, to tell whether the GPU or the CPU result is the wrong one.
  const int64_t row_elems = int64_t(hq) * d;
  int worst_seq = 0;
  double worst_err = -1.0;
  for (int s = 0; s < num_seqs; ++s) {
    std::vector<float> g(out_gpu.begin() + cu[size_t(s)] * row_elems, out_gpu.begin() + cu[size_t(s) + 1] * row_elems);
    std::vector<float> r(out_cpu.begin() + cu[size_t(s)] * row_elems, out_cpu.begin() + cu[size_t(s) + 1] * row_elems);
    double e = rel_error(g, r);
    if (e > worst_err) {
      worst_err = e;
      worst_seq = s;
    }
  }
  if (worst_err > kOutTol) {
    ADD_FAILURE() << "worst sequence " << worst_seq << " (q_len " << c.q_lens[size_t(worst_seq)] << ", kv_len "
                  << c.kv_lens[size_t(worst_seq)] << ", first row " << cu[size_t(worst_seq)] << "): relative error "
                  << worst_err;
  }
  const std::vector<float> qv = q.cpu_values();
  auto naive_row = [&](int t, int h, std::vector<double>& o) {
    int s = int(std::upper_bound(cu.begin(), cu.end(), t) - cu.begin()) - 1;
    int q_len = c.q_lens[size_t(s)], kv_len = c.kv_lens[size_t(s)];
    int64_t pos = int64_t(kv_len) - q_len + (t - cu[size_t(s)]);
    int kvh = h / c.group;
    std::vector<double> scores;
    std::vector<int64_t> bases;
    for (int j = 0; j < kv_len; ++j) {
      if (c.causal && j > pos) continue;
      if (c.window > 0 && pos - j >= c.window) continue;
      int64_t page = int64_t(table[size_t(s) * size_t(max_pages) + size_t(j / c.page_size)]);
      int64_t base = ((page * c.page_size + j % c.page_size) * hk + kvh) * d;
      double dot = 0.0;
      for (int e = 0; e < d; ++e)
        dot += double(qv[size_t((int64_t(t) * hq + h) * d + e)]) * double(kv_k[size_t(base + e)]);
      double sc = dot * double(params.scale);
      if (c.softcap > 0.0f) sc = double(c.softcap) * std::tanh(sc / double(c.softcap));
      scores.push_back(sc);
      bases.push_back(base);
    }
    o.assign(size_t(d), 0.0);
    double m = -INFINITY, l = 0.0;
    for (double sc : scores) m = std::max(m, sc);
    for (size_t j = 0; j < scores.size(); ++j) {
      double w = std::exp(scores[j] - m);
      l += w;
      for (int e = 0; e < d; ++e) o[size_t(e)] += w * double(kv_v[size_t(bases[j] + e)]);
    }
    for (double& x : o) x /= l;
  };
  std::vector<std::pair<int, int>> rows = {{cu[size_t(worst_seq)], 0}, {cu[size_t(worst_seq) + 1] - 1, hq - 1}};
  for (int i = 0; i < 14; ++i) rows.emplace_back(int(rng() % uint64_t(total_q)), int(rng() % uint64_t(hq)));
  double gpu_row_err = 0.0, cpu_row_err = 0.0;
  std::string gpu_worst_row;
  for (auto [t, h] : rows) {
    std::vector<double> ref;
    naive_row(t, h, ref);
    double ng = 0.0, nc = 0.0, nr = 0.0;
    for (int e = 0; e < d; ++e) {
      size_t at = size_t((int64_t(t) * hq + h) * d + e);
      ng += (out_gpu[at] - ref[size_t(e)]) * (out_gpu[at] - ref[size_t(e)]);
      nc += (out_cpu[at] - ref[size_t(e)]) * (out_cpu[at] - ref[size_t(e)]);
      nr += ref[size_t(e)] * ref[size_t(e)];
    }
    double eg = std::sqrt(ng / nr), ec = std::sqrt(nc / nr);
    if (!(eg <= gpu_row_err)) {
      gpu_row_err = eg;
      gpu_worst_row = "row " + std::to_string(t) + " head " + std::to_string(h);
    }
    cpu_row_err = std::max(cpu_row_err, ec);
  }
  EXPECT_LT(cpu_row_err, 1e-4) << "CPU reference disagrees with the naive double-precision attention";
  EXPECT_LT(gpu_row_err, 3e-2) << "GPU disagrees with the naive double-precision attention (worst " << gpu_worst_row
                               << ")";
  if (c.lse) {
    double lse_err = max_abs_diff(lse.gpu_values(), lse.cpu_values());
    EXPECT_LT(lse_err, kLseTol) << "lse max abs difference";
    lse.check_guards("attention lse", true);
  } else {
    lse.check_guards("attention lse (not requested: must stay untouched)", false);
  }
  q.check_unchanged("attention q");
}

int log_uniform(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi) + 1.0));
  return std::clamp(int(std::exp(u(rng))), lo, hi);
}

// A random case within the sweep's ranges whose CPU work is bounded.
AttnCase random_case(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int page_sizes[] = {1, 3, 16, 48, 64, 256};
  const int groups[] = {1, 4, 8};
  AttnCase c;
  c.seed = seed;
  c.page_size = page_sizes[rng() % 6];
  c.group = groups[rng() % 3];
  c.num_kv_heads = 1 + int(rng() % 2);
  const int head_dims[] = {64, 128, 256};
  c.head_dim = head_dims[rng() % 3];
  c.lse = rng() % 2;
  c.strided_q = rng() % 2;
  c.causal = rng() % 8 != 0;
  c.softcap = rng() % 3 == 0 ? 5.0f + float(rng() % 40) : 0.0f;
  int shape = int(rng() % 4);  // 0 decode, 1 speculative, 2 prefill, 3 mixed
  int num_seqs = shape == 2 ? log_uniform(rng, 1, 4) : log_uniform(rng, 1, 256);
  for (int attempt = 0; attempt < 64; ++attempt) {
    c.q_lens.assign(size_t(num_seqs), 1);
    c.kv_lens.assign(size_t(num_seqs), 1);
    for (int s = 0; s < num_seqs; ++s) {
      int q_len = 1;
      if (shape == 1) q_len = log_uniform(rng, 1, 16);
      if (shape == 2) q_len = log_uniform(rng, 1, 512);
      if (shape == 3) q_len = rng() % 4 == 0 ? log_uniform(rng, 1, 512) : 1;
      int prefix = rng() % 4 == 0 ? 0 : log_uniform(rng, 1, 32768);
      c.q_lens[size_t(s)] = q_len;
      c.kv_lens[size_t(s)] = std::min(32768, q_len + prefix);
      c.kv_lens[size_t(s)] = std::max(c.kv_lens[size_t(s)], q_len);
    }
    int max_kv = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
    c.window = rng() % 3 == 0 ? log_uniform(rng, 1, max_kv) : 0;
    if (c.macs() <= kMaxCaseMacs && c.cache_elems() <= kMaxCacheElems) return c;
    if (attempt % 4 == 3 && num_seqs > 1) num_seqs = std::max(1, num_seqs / 2);  // shrink until it fits
  }
  c.q_lens.assign(1, 1);
  c.kv_lens.assign(1, 32768);
  c.window = 0;
  return c;
}

uint64_t sweep_seed() {
  const char* env = std::getenv("FG_PARITY_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 2026;
}

AttnCase make(std::vector<int> q, std::vector<int> kv, int page, int kv_heads, int group, int head_dim) {
  AttnCase c;
  c.q_lens = std::move(q);
  c.kv_lens = std::move(kv);
  c.page_size = page;
  c.num_kv_heads = kv_heads;
  c.group = group;
  c.head_dim = head_dim;
  c.seed = 7;
  return c;
}

// Edge cases a random draw may miss.
std::vector<AttnCase> fixed_cases() {
  std::vector<AttnCase> cases;
  cases.push_back(make({1}, {1}, 1, 1, 1, 128));                    // the smallest batch
  cases.push_back(make({1}, {32768}, 256, 1, 8, 128));              // long decode: split-KV
  cases.push_back(make({1}, {32768}, 1, 1, 4, 64));                 // page size 1 at length
  cases.push_back(make({512}, {512}, 16, 1, 1, 128));               // plain causal prefill
  cases.push_back(make({300}, {4000}, 48, 2, 4, 64));               // chunked prefill continuation
  cases.push_back(make({8, 8, 8}, {4096, 100, 9}, 64, 1, 8, 128));  // speculative windows
  std::vector<int> dq(256, 1), dkv(256);
  for (int i = 0; i < 256; ++i) dkv[size_t(i)] = 1 + (i * 37) % 600;
  cases.push_back(make(dq, dkv, 3, 1, 4, 128));  // 256 decodes, odd page size
  std::vector<int> mq(17, 1), mkv(17, 777);
  mq[3] = 200;
  mkv[3] = 1500;
  cases.push_back(make(mq, mkv, 16, 2, 8, 128));  // one prefill chunk among decodes
  AttnCase w = make({64, 1}, {2048, 3000}, 16, 1, 4, 128);
  w.window = 100;
  w.softcap = 30.0f;
  w.lse = true;
  cases.push_back(w);  // window + softcap + lse
  AttnCase nc = make({5, 1}, {5, 70}, 16, 1, 1, 64);
  nc.causal = false;
  nc.lse = true;
  nc.strided_q = true;
  cases.push_back(nc);
  AttnCase tiny_window = make({33}, {1000}, 64, 1, 8, 64);
  tiny_window.window = 1;
  cases.push_back(tiny_window);  // each query sees itself only
  // head_dim 256 (Gemma 2 / 3 as published: 16 / 8 heads at 9B, window 4096, softcap 50).
  cases.push_back(make({1}, {32768}, 16, 1, 2, 256));      // long decode: split-KV and merge
  cases.push_back(make({1, 1}, {9000, 5}, 1, 2, 2, 256));  // page size 1, split and unsplit
  AttnCase g2 = make({512}, {512}, 16, 2, 2, 256);
  g2.softcap = 50.0f;
  g2.lse = true;
  cases.push_back(g2);  // causal prefill, softcap
  AttnCase g2w = make({300, 1, 8}, {4000, 6000, 700}, 16, 1, 8, 256);
  g2w.window = 1024;
  g2w.softcap = 50.0f;
  g2w.strided_q = true;
  cases.push_back(g2w);  // chunked prefill + decode + spec window, sliding window, GQA 8
  AttnCase g2nc = make({5, 1}, {5, 70}, 1, 1, 1, 256);
  g2nc.causal = false;
  g2nc.lse = true;
  cases.push_back(g2nc);  // non-causal, page size 1
  for (size_t i = 0; i < cases.size(); ++i) cases[i].seed = 1000 + i;
  return cases;
}

// The fp8 KV rows: every edge case (head_dim 256 included), long prefills (128-row tiles: the
// prefill kernels' fp8 paths, at head_dim 128 and 256) and a share of the random draw.
constexpr int kRandomFp8Cases = 60;
std::vector<AttnCase> fp8_fixed_cases() {
  std::vector<AttnCase> cases = fixed_cases();
  AttnCase long_prefill = make({1500, 1}, {1600, 5000}, 16, 2, 4, 128);
  long_prefill.softcap = 20.0f;
  long_prefill.lse = true;
  cases.push_back(long_prefill);
  AttnCase odd_pages = make({1100}, {1100}, 3, 1, 8, 64);
  odd_pages.window = 300;
  cases.push_back(odd_pages);
  // head_dim 256 (the edge cases above hold its decodes, splits and 64-row tiles): a prefill chunk
  // long enough for 128-row tiles, which only the wgmma kernel takes at 256 (its producer converts
  // fp8 rows two passes at a time); elsewhere the general kernel's 64-row tiles.
  AttnCase g2_prefill = make({1600}, {2200}, 16, 8, 2, 256);
  g2_prefill.window = 1024;
  g2_prefill.softcap = 50.0f;
  g2_prefill.lse = true;
  cases.push_back(g2_prefill);
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].fp8 = true;
    cases[i].seed = 5000 + i;
  }
  return cases;
}

class AttentionFixed : public ::testing::TestWithParam<int> {};
class AttentionSweep : public ::testing::TestWithParam<int> {};
class AttentionFp8Fixed : public ::testing::TestWithParam<int> {};
class AttentionFp8Sweep : public ::testing::TestWithParam<int> {};

TEST_P(AttentionFp8Fixed, MatchesCpu) {
  FG_REQUIRE_GPU();
  run_case(fp8_fixed_cases()[size_t(GetParam())]);
}

TEST_P(AttentionFp8Sweep, MatchesCpu) {
  FG_REQUIRE_GPU();
  AttnCase c = random_case(sweep_seed() * 1000033ull + uint64_t(GetParam()));
  c.fp8 = true;
  run_case(c);
}

TEST_P(AttentionFixed, MatchesCpu) {
  FG_REQUIRE_GPU();
  run_case(fixed_cases()[size_t(GetParam())]);
}

TEST_P(AttentionSweep, MatchesCpu) {
  FG_REQUIRE_GPU();
  run_case(random_case(sweep_seed() * 1000003ull + uint64_t(GetParam())));
}

// The head sizes the CUDA kernels are built for run; others are refused by name (a model loader
// asks before uploading weights); the CPU reference takes any size.
TEST(AttentionSupports, HeadDimsOfTheKernels) {
  EXPECT_TRUE(backends().cpu->attention_supports(96).is_ok());
  FG_REQUIRE_GPU();
  Backend& gpu = *backends().gpu;
  for (int d : {64, 128, 256}) EXPECT_TRUE(gpu.attention_supports(d).is_ok()) << "head_dim " << d;
  for (int d : {32, 96, 192, 512}) {
    const Status st = gpu.attention_supports(d);
    EXPECT_FALSE(st.is_ok()) << "head_dim " << d;
    EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.message();
    EXPECT_NE(st.message().find("head_dim " + std::to_string(d)), std::string::npos) << st.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Edge, AttentionFixed, ::testing::Range(0, int(fixed_cases().size())));
INSTANTIATE_TEST_SUITE_P(Random, AttentionSweep, ::testing::Range(0, kRandomCases));
INSTANTIATE_TEST_SUITE_P(Edge, AttentionFp8Fixed, ::testing::Range(0, int(fp8_fixed_cases().size())));
INSTANTIATE_TEST_SUITE_P(Random, AttentionFp8Sweep, ::testing::Range(0, kRandomFp8Cases));

}  // namespace
}  // namespace fg::parity
