// Parity of the CUDA ops the newer families need against the CPU reference (parity_harness.h):
// gelu_tanh_mul, scale, softcap, rope with per-token tables (LongRoPE), and the mixture-of-experts
// ops: routing (the same choices and weights, the same expert ranges, a valid permutation), the
// grouped GEMM for every tile regime (decode, mid-size, prefill; k and n tails; with and without
// gathering the token rows; with the Hopper wgmma kernel and without it; in batch-invariant mode, a
// token's rows the same bits in any batch), the combine, a whole MoE MLP, and the MoE ops recorded
// once in a CUDA graph and replayed for other routings. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "parity_harness.h"

namespace fg::parity {
namespace {

TEST(FamilyParity, GeluTanhMulOddSizesStrided) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  for (int64_t inter : {13, 1536}) {
    SCOPED_TRACE("inter " + std::to_string(inter));
    const int64_t n = 19;
    Twin x({n, 2 * inter}, DType::kBF16, DType::kF32, {2 * inter + 6, 1});
    x.fill_random(rng, -5.0f, 5.0f);
    Twin out({n, inter}, DType::kBF16, DType::kF32, {inter + 3, 1});
    out.poison();
    cpu().gelu_tanh_mul(x.cpu, out.cpu);
    gpu().gelu_tanh_mul(x.gpu, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("gelu_tanh_mul out", true);
  }
  // Rows whose layout allows 16-byte vectors (the MLP's own case): the kernel's vectorized path.
  for (int64_t inter : {1536, 2048}) {
    SCOPED_TRACE("contiguous inter " + std::to_string(inter));
    const int64_t n = 7;
    Twin x({n, 2 * inter}, DType::kBF16);
    x.fill_random(rng, -5.0f, 5.0f);
    Twin out({n, inter}, DType::kBF16);
    out.poison();
    cpu().gelu_tanh_mul(x.cpu, out.cpu);
    gpu().gelu_tanh_mul(x.gpu, out.gpu);
    gpu().synchronize();
    EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol);
    out.check_guards("gelu_tanh_mul out", true);
  }
}

TEST(FamilyParity, ScaleAndSoftcap) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(32);
  // Embedding rows (bf16, strided) scaled; logits (f32) soft-capped.
  Twin x({23, 77}, DType::kBF16, DType::kF32, {80, 1});
  x.fill_random(rng, -2.0f, 2.0f);
  cpu().scale(x.cpu, 8.0f);
  gpu().scale(x.gpu, 8.0f);
  gpu().synchronize();
  EXPECT_LT(rel_error(x.gpu_values(), x.cpu_values()), kBf16Tol);
  x.check_guards("scale x", true);
  Twin logits({5, 1000}, DType::kF32, DType::kF32);
  logits.fill_random(rng, -80.0f, 80.0f);
  cpu().softcap(logits.cpu, 30.0f);
  gpu().softcap(logits.gpu, 30.0f);
  gpu().synchronize();
  EXPECT_LT(max_abs_diff(logits.gpu_values(), logits.cpu_values()), 1e-4);
  logits.check_guards("softcap logits", true);
}

TEST(FamilyParity, RopePerTokenTables) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(33);
  const int64_t n = 29, q_heads = 4, kv_heads = 2, dim = 64, rot = 32, half = rot / 2;
  Twin q({n, q_heads, dim}, DType::kBF16);
  Twin k({n, kv_heads, dim}, DType::kBF16);
  q.fill_random(rng, -1.0f, 1.0f);
  k.fill_random(rng, -1.0f, 1.0f);
  Twin pos({n}, DType::kI32, DType::kI32);
  pos.fill_random(rng, 0.0f, 5000.0f);
  Twin table({n}, DType::kI32, DType::kI32);
  table.fill_random(rng, 0.0f, 2.0f);
  Twin inv({2, half}, DType::kF32, DType::kF32);
  std::vector<float> tables(size_t(2 * half));
  for (int64_t i = 0; i < half; ++i) {
    tables[size_t(i)] = std::pow(10000.0f, -float(2 * i) / float(rot));
    tables[size_t(half + i)] = tables[size_t(i)] / (1.0f + float(i));
  }
  inv.set(tables);
  auto args = [&](bool on_gpu) {
    RopeArgs a;
    a.positions = on_gpu ? pos.gpu : pos.cpu;
    a.inv_freq = on_gpu ? inv.gpu : inv.cpu;
    a.per_token_table = on_gpu ? table.gpu : table.cpu;
    a.rotary_dim = int(rot);
    a.attention_scaling = 1.19f;
    return a;
  };
  cpu().rope(q.cpu, k.cpu, args(false));
  gpu().rope(q.gpu, k.gpu, args(true));
  gpu().synchronize();
  EXPECT_LT(rel_error(q.gpu_values(), q.cpu_values()), kBf16Tol);
  EXPECT_LT(rel_error(k.gpu_values(), k.cpu_values()), kBf16Tol);
}

// One routing held by both backends.
struct RoutingTwin {
  Twin ids, weights, offsets, sorted, assign_row;
  MoeRouting on_cpu, on_gpu;
  RoutingTwin(int tokens, int experts, int top_k)
      : ids({tokens, top_k}, DType::kI32, DType::kI32),
        weights({tokens, top_k}, DType::kF32, DType::kF32),
        offsets({experts + 1}, DType::kI32, DType::kI32),
        sorted({int64_t(tokens) * top_k}, DType::kI32, DType::kI32),
        assign_row({int64_t(tokens) * top_k}, DType::kI32, DType::kI32) {
    for (MoeRouting* r : {&on_cpu, &on_gpu}) {
      const bool g = r == &on_gpu;
      r->num_tokens = tokens;
      r->num_experts = experts;
      r->top_k = top_k;
      r->topk_ids = g ? ids.gpu : ids.cpu;
      r->topk_weights = g ? weights.gpu : weights.cpu;
      r->expert_offsets = g ? offsets.gpu : offsets.cpu;
      r->sorted_assign = g ? sorted.gpu : sorted.cpu;
      r->assign_row = g ? assign_row.gpu : assign_row.cpu;
    }
  }
  void poison() {
    for (Twin* t : {&ids, &weights, &offsets, &sorted, &assign_row}) t->poison();
  }
  // Routes on the CPU and gives the GPU the same routing (so GEMM outputs compare row by row).
  void route_on_cpu_and_share(const Twin& logits, bool renormalize) {
    cpu().moe_route(logits.cpu, renormalize, on_cpu);
    ids.set(ids.cpu_values());
    weights.set(weights.cpu_values());
    offsets.set(offsets.cpu_values());
    sorted.set(sorted.cpu_values());
    assign_row.set(assign_row.cpu_values());
  }
};

// Random router logits where token t prefers experts around t * stride (so the load is uneven).
void fill_logits(Twin& logits, std::mt19937_64& rng, int tokens, int experts, float skew) {
  std::normal_distribution<float> noise(0.0f, 1.5f);
  std::vector<float> v(size_t(tokens) * size_t(experts));
  for (int t = 0; t < tokens; ++t)
    for (int e = 0; e < experts; ++e)
      v[size_t(t) * size_t(experts) + size_t(e)] = noise(rng) + (e % 7 == t % 7 ? skew : 0.0f);
  logits.set(v);
}

TEST(FamilyParity, MoeRouteMatchesCpu) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(34);
  struct Case {
    int tokens, experts, top_k;
  };
  for (Case c : {Case{1, 8, 2}, Case{37, 128, 8}, Case{300, 64, 6}, Case{5, 512, 16}, Case{2048, 8, 2}}) {
    for (bool renorm : {true, false}) {
      SCOPED_TRACE(std::to_string(c.tokens) + " tokens, " + std::to_string(c.experts) + " experts, top " +
                   std::to_string(c.top_k) + (renorm ? ", renormalized" : ""));
      Twin logits({c.tokens, c.experts}, DType::kF32, DType::kF32);
      fill_logits(logits, rng, c.tokens, c.experts, 1.0f);
      RoutingTwin r(c.tokens, c.experts, c.top_k);
      r.poison();
      cpu().moe_route(logits.cpu, renorm, r.on_cpu);
      gpu().moe_route(logits.gpu, renorm, r.on_gpu);
      gpu().synchronize();
      EXPECT_EQ(r.ids.gpu_values(), r.ids.cpu_values());
      EXPECT_LT(max_abs_diff(r.weights.gpu_values(), r.weights.cpu_values()), 1e-5);
      EXPECT_EQ(r.offsets.gpu_values(), r.offsets.cpu_values());
      // Within an expert the GPU's order is unspecified: the same sets, and assign_row inverts it.
      std::vector<float> gs = r.sorted.gpu_values(), cs = r.sorted.cpu_values(), ga = r.assign_row.gpu_values();
      const std::vector<float> off = r.offsets.cpu_values();
      for (int e = 0; e < c.experts; ++e) {
        std::sort(gs.begin() + int64_t(off[size_t(e)]), gs.begin() + int64_t(off[size_t(e + 1)]));
      }
      EXPECT_EQ(gs, cs);
      const std::vector<float> gsorted = r.sorted.gpu_values();
      for (size_t row = 0; row < gsorted.size(); ++row) ASSERT_EQ(ga[size_t(gsorted[row])], float(row));
      for (Twin* t : {&r.ids, &r.weights, &r.offsets, &r.sorted, &r.assign_row}) t->check_guards("routing", true);
    }
  }
}

// A CUDA backend without the Hopper grouped GEMM (FG_MOE_WGMMA=0: the mma.sync tiles for every
// step), next to the harness's default one; on other GPUs the two run the same kernels.
std::unique_ptr<Backend> moe_tiles_cuda() {
  setenv("FG_MOE_WGMMA", "0", 1);
  std::unique_ptr<Backend> made = another_gpu({});
  unsetenv("FG_MOE_WGMMA");
  return made;
}

TEST(FamilyParity, MoeGemmEveryRegime) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(35);
  const std::unique_ptr<Backend> tiles = moe_tiles_cuda();
  ASSERT_NE(tiles, nullptr);
  struct Case {
    int tokens, experts, top_k, n, k;
    float skew;  // uneven expert loads
  };
  // Decode: the weight stream (8-row tiles up to 4 mean rows per expert at k >= 2,048, 16-row ones
  // up to 16 at k >= 4,096; the skewed cases with experts of several tiles) and the 16 x 64 tiles
  // (shorter k);
  // mid-size and prefill tiles (on an H200 the wgmma kernel: k not a multiple of its 64-wide
  // stages, n not one of its 256-wide tiles, long k; one row per expert over enough tiles); k not a multiple of 32 (or
  // of the stream's 64-byte chunks), n not a multiple of any tile width; experts nobody chose; one expert taking most
  // rows.
  for (Case c :
       {Case{1, 8, 2, 256, 4096, 0.0f}, Case{40, 32, 2, 136, 2056, 3.0f}, Case{24, 8, 2, 200, 4104, 2.0f},
        Case{1, 8, 2, 256, 128, 0.0f}, Case{3, 128, 8, 96, 64, 0.0f}, Case{48, 8, 2, 130, 40, 1.0f},
        Case{256, 8, 2, 384, 256, 0.5f}, Case{700, 16, 4, 192, 96, 3.0f}, Case{64, 64, 1, 64, 16, 0.0f},
        Case{1000, 8, 2, 520, 200, 1.0f}, Case{600, 4, 1, 256, 4096, 0.0f}, Case{16, 64, 4, 4104, 136, 0.0f}}) {
    for (bool gather : {true, false}) {
      SCOPED_TRACE(std::to_string(c.tokens) + " tokens, " + std::to_string(c.experts) + " experts, top " +
                   std::to_string(c.top_k) + ", n " + std::to_string(c.n) + ", k " + std::to_string(c.k) +
                   (gather ? ", gathered" : ""));
      const int64_t A = int64_t(c.tokens) * c.top_k;
      Twin logits({c.tokens, c.experts}, DType::kF32, DType::kF32);
      fill_logits(logits, rng, c.tokens, c.experts, c.skew);
      RoutingTwin r(c.tokens, c.experts, c.top_k);
      r.route_on_cpu_and_share(logits, true);
      const int64_t x_rows = gather ? c.tokens : A;
      Twin x({x_rows, c.k}, DType::kBF16, DType::kF32, {c.k + 8, 1});
      x.fill_random(rng, -1.0f, 1.0f);
      Twin w({c.experts, c.n, c.k}, DType::kBF16);
      w.fill_random(rng, -0.2f, 0.2f);
      Twin out({A, c.n}, DType::kBF16, DType::kF32, {c.n + 2, 1});
      out.poison();
      cpu().moe_gemm(x.cpu, w.cpu, r.on_cpu, gather, out.cpu);
      const std::vector<float> want = out.cpu_values();
      for (Backend* be : {&gpu(), tiles.get()}) {
        SCOPED_TRACE(be == tiles.get() ? "FG_MOE_WGMMA=0" : "default kernels");
        out.poison();  // both sides: the reference is `want`
        be->moe_gemm(x.gpu, w.gpu, r.on_gpu, gather, out.gpu);
        be->synchronize();
        EXPECT_LT(rel_error(out.gpu_values(), want), kBf16Tol);
        out.check_guards("moe_gemm out", true);
        x.check_unchanged("moe_gemm x");
      }
    }
  }
}

// Batch-invariant mode: a token's grouped GEMM rows are the same bits computed among 300 tokens
// (tens of rows per expert) as with two others (about one row per expert).
TEST(FamilyParity, MoeGemmRowsBatchInvariant) {
  FG_REQUIRE_GPU();
  const std::unique_ptr<Backend> made = another_gpu({.batch_invariant = true});
  ASSERT_NE(made, nullptr);
  Backend& inv = *made;
  std::mt19937_64 rng(38);
  const int experts = 32, top_k = 4, n = 520, k = 264, many = 300, few = 3;
  Twin w({experts, n, k}, DType::kBF16);
  w.fill_random(rng, -0.2f, 0.2f);
  struct Step {
    Twin logits, x, out;
    RoutingTwin r;
    Step(int tokens, int e, int topk, int nn, int kk)
        : logits({tokens, e}, DType::kF32, DType::kF32),
          x({tokens, kk}, DType::kBF16),
          out({int64_t(tokens) * topk, nn}, DType::kBF16),
          r(tokens, e, topk) {}
  };
  Step big(many, experts, top_k, n, k), small(few, experts, top_k, n, k);
  fill_logits(big.logits, rng, many, experts, 1.0f);
  big.x.fill_random(rng, -1.0f, 1.0f);
  const std::vector<float> logits = big.logits.cpu_values(), x = big.x.cpu_values();
  small.logits.set(std::vector<float>(logits.begin(), logits.begin() + few * experts));
  small.x.set(std::vector<float>(x.begin(), x.begin() + few * k));
  for (Step* s : {&big, &small}) {
    s->r.route_on_cpu_and_share(s->logits, true);
    s->out.poison();
    inv.moe_gemm(s->x.gpu, w.gpu, s->r.on_gpu, /*gather=*/true, s->out.gpu);
    inv.synchronize();
  }
  const std::vector<float> ob = big.out.gpu_values(), os = small.out.gpu_values();
  const std::vector<float> rb = big.r.assign_row.cpu_values(), rs = small.r.assign_row.cpu_values();
  for (int a = 0; a < few * top_k; ++a)
    for (int j = 0; j < n; ++j)
      ASSERT_EQ(ob[size_t(rb[size_t(a)]) * n + size_t(j)], os[size_t(rs[size_t(a)]) * n + size_t(j)])
          << "assignment " << a << ", column " << j;
}

TEST(FamilyParity, MoeCombineMatchesCpu) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(36);
  // Rows of 258 at strides off 16 bytes (a column per thread) and of 2,048 contiguous (16-byte
  // vectors).
  for (const auto& [h, pad] : {std::pair<int64_t, int64_t>{258, 6}, {2048, 0}})
    for (int top_k : {1, 2, 8}) {
      SCOPED_TRACE("h " + std::to_string(h));
      const int tokens = 45, experts = 16;
      Twin logits({tokens, experts}, DType::kF32, DType::kF32);
      fill_logits(logits, rng, tokens, experts, 0.5f);
      RoutingTwin r(tokens, experts, top_k);
      r.route_on_cpu_and_share(logits, top_k != 8);
      Twin y({int64_t(tokens) * top_k, h}, DType::kBF16, DType::kF32, {h + pad, 1});
      y.fill_random(rng, -3.0f, 3.0f);
      Twin out({tokens, h}, DType::kBF16, DType::kF32, {h + pad / 3, 1});
      out.poison();
      cpu().moe_combine(y.cpu, r.on_cpu, out.cpu);
      gpu().moe_combine(y.gpu, r.on_gpu, out.gpu);
      gpu().synchronize();
      EXPECT_LT(rel_error(out.gpu_values(), out.cpu_values()), kBf16Tol) << "top " << top_k;
      out.check_guards("moe_combine out", true);
    }
}

// The whole MoE MLP, each backend routing on its own.
struct MoeMlp {
  int tokens, experts, top_k, hidden, inter;
  Twin x, logits, gate_up_w, down_w, gate_up, act, y, out;
  RoutingTwin r;
  MoeMlp(int t, int e, int k, int h, int i, std::mt19937_64& rng)
      : tokens(t),
        experts(e),
        top_k(k),
        hidden(h),
        inter(i),
        x({t, h}, DType::kBF16),
        logits({t, e}, DType::kF32, DType::kF32),
        gate_up_w({e, 2 * i, h}, DType::kBF16),
        down_w({e, h, i}, DType::kBF16),
        gate_up({int64_t(t) * k, 2 * i}, DType::kBF16),
        act({int64_t(t) * k, i}, DType::kBF16),
        y({int64_t(t) * k, h}, DType::kBF16),
        out({t, h}, DType::kBF16),
        r(t, e, k) {
    x.fill_random(rng, -1.0f, 1.0f);
    gate_up_w.fill_random(rng, -0.1f, 0.1f);
    down_w.fill_random(rng, -0.1f, 0.1f);
    fill_logits(logits, rng, t, e, 1.0f);
  }
  void run(Backend& be, bool on_gpu) {
    MoeRouting& rt = on_gpu ? r.on_gpu : r.on_cpu;
    auto v = [&](Twin& t) -> Tensor& { return on_gpu ? t.gpu : t.cpu; };
    be.moe_route(v(logits), true, rt);
    be.moe_gemm(v(x), v(gate_up_w), rt, true, v(gate_up));
    be.silu_mul(v(gate_up), v(act));
    be.moe_gemm(v(act), v(down_w), rt, false, v(y));
    be.moe_combine(v(y), rt, v(out));
  }
};

TEST(FamilyParity, MoeMlpMatchesCpu) {
  FG_REQUIRE_GPU();
  std::mt19937_64 rng(37);
  for (int tokens : {1, 16, 512}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    MoeMlp m(tokens, 32, 4, 256, 128, rng);
    m.run(cpu(), false);
    m.run(gpu(), true);
    gpu().synchronize();
    EXPECT_EQ(m.r.ids.gpu_values(), m.r.ids.cpu_values());
    EXPECT_LT(rel_error(m.out.gpu_values(), m.out.cpu_values()), kBf16Tol);
  }
}

// Recorded once into a CUDA graph, the MoE ops route whatever logits the buffers hold at replay
// time: no launch size or host copy depends on the routing.
TEST(FamilyParity, MoeOpsReplayInAGraphForAnyRouting) {
  FG_REQUIRE_GPU();
  ASSERT_TRUE(gpu().supports_graphs());
  std::mt19937_64 rng(38);
  MoeMlp m(24, 16, 2, 2048, 64, rng);  // gate_up on the weight stream (k 2,048), down on 16 x 64 tiles
  AttentionPlanShape shape;
  shape.num_q_heads = 1;
  shape.num_kv_heads = 1;
  shape.head_dim = 64;
  shape.max_total_q = 1;
  shape.max_num_seqs = 1;
  std::unique_ptr<AttentionPlan> plan = make_attention_plan(gpu(), shape);
  m.run(gpu(), true);  // eager first, as the model does before recording
  GraphAttentionShape bounds;
  bounds.num_seqs = 1;
  bounds.max_kv_len = 1;
  bounds.page_size = 1;
  std::unique_ptr<Graph> graph = gpu().capture_graph([&] { m.run(gpu(), true); }, *plan, bounds);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("replay " + std::to_string(round));
    fill_logits(m.logits, rng, m.tokens, m.experts, 2.0f * float(round));
    m.out.poison();
    gpu().replay_graph(*graph);
    m.run(cpu(), false);
    gpu().synchronize();
    EXPECT_EQ(m.r.ids.gpu_values(), m.r.ids.cpu_values());
    EXPECT_LT(rel_error(m.out.gpu_values(), m.out.cpu_values()), kBf16Tol);
  }
}

}  // namespace
}  // namespace fg::parity
