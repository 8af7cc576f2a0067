// The op interface the model needs, and nothing else. Every backend (cpu = the exact reference,
// cuda = the fast one) implements exactly this contract; CUDA ops are tested against the CPU ones.
//
// Conventions for every op:
//  - Tensors are views (core/tensor.h). Unless an op says otherwise, the LAST dim must be
//    contiguous (stride 1) and leading dims may be strided, so q/k/v can be column slices of one
//    fused qkv projection without copies.
//  - "act" is the backend's activation dtype (`act_dtype()`): f32 on cpu, bf16 on cuda.
//    Accumulation is always f32.
//  - "weight" is a weight dtype the backend keeps matrices in (`weight_dtype()`): act on cuda;
//    on cpu f32, f16, bf16 or a block-quantized dtype (core/dtype.h), as the checkpoint stores it.
//    Ops that take one compute with exactly its f32 values (core/dequant.h).
//  - Ops run asynchronously on the backend's stream; only copy_to_host + synchronize() make
//    results visible to the host.
//  - Integer metadata (ids, positions, slot mappings, cu_seqlens, block tables) is i32.
// A backend must never be included by the engine's scheduling code; it is reached only through
// the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/sampling_rule.h"
#include "core/tensor.h"

namespace fg {

// Attention options that are fixed per layer.
struct AttentionParams {
  float scale = 1.0f;      // multiplies q.k before softcap and softmax
  bool causal = true;      // bottom-right aligned: query i of a sequence with q_len new tokens sits
                           // at kv position seqlens_kv - q_len + i and sees kv positions <= its own
  int sliding_window = 0;  // 0 = off; else a query at position p sees kv positions j with p - j < window
  float softcap = 0.0f;    // 0 = off; else score = softcap * tanh(score / softcap)
};

// Per-step batch metadata shared by every layer (written once per step by the step builder,
// model/batch.h, and uploaded with one copy).
// Query tokens of sequence s are rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) of q.
struct AttentionBatch {
  Tensor cu_seqlens_q;  // [num_seqs + 1] i32, device
  Tensor seqlens_kv;    // [num_seqs] i32, device: kv length INCLUDING this step's new tokens
  Tensor block_table;   // [num_seqs, max_pages_per_seq] i32, device: page ids, row-major
  int num_seqs = 0;
  int total_q = 0;
  int max_q_len = 0;
  int max_kv_len = 0;
  int page_size = 0;
  // Host copies of the same metadata, for planning (valid until the step ends).
  std::span<const int32_t> host_cu_seqlens_q;
  std::span<const int32_t> host_seqlens_kv;
};

// What an attention plan is made for: the model's head geometry and the largest step it plans.
struct AttentionPlanShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_total_q = 0;   // new tokens of one step, at most
  int max_num_seqs = 0;  // sequences of one step, at most
};

// A step's attention work partition (which tiles, which KV splits, in which order), decided on the
// host by Backend::plan_attention once per step and read by every attention call of that step.
// The caller owns it (one per model: a target model and its draft model each hold their own, so
// their steps can interleave) and gives it the device workspace it plans into
// (Backend::attention_workspace_bytes), like a FlashInfer wrapper. A plan is not thread-safe.
class AttentionPlan {
 public:
  virtual ~AttentionPlan() = default;
  const AttentionPlanShape& shape() const { return shape_; }

 protected:
  explicit AttentionPlan(const AttentionPlanShape& shape) : shape_(shape) {}

 private:
  AttentionPlanShape shape_;
};

// One layer's paged KV cache: k, v [num_pages, page_size, num_kv_heads, head_dim], in the act
// dtype or in f8_e4m3 (an fp8 KV cache). An fp8 cache stores e4m3(x / scale) (round to nearest
// even, saturating at +-448: core/dtype.h's f32_to_f8e4m3, bit for bit on every backend) and
// means e4m3 * scale, with one scale per kv head for K and one for V (k_scale, v_scale:
// [num_kv_heads] f32 on the cache's device, powers of two, so that x / scale and e4m3 * scale are
// exact); both undefined for an act-dtype cache.
struct KvCacheLayer {
  Tensor k;
  Tensor v;
  Tensor k_scale = {};
  Tensor v_scale = {};
};

// Rotary embedding tables for one step. Static scalings (default, linear, llama3) are folded into
// inv_freq by the model; dynamic NTK passes a per-token base instead, LongRoPE a per-token choice
// between its short and long tables.
// FP8 GEMM scalings (Backend::gemm_fp8): the block edge of the fine-grained format, the row stride
// of a w_scales tensor with 128-blocks (ceil(k / 128) rounded up to a multiple of 4), and the
// scaling a gemm_fp8 call's scale shapes give (aborting on shapes that are neither).
constexpr int64_t kFp8Block = 128;
// With 128-block scales, products of a multiple of this many rows run fastest on CUDA: cuBLASLt
// takes the activations' group scales only in rows of 16 bytes and declines other m (which then
// go to a plain kernel, correct but slow); callers that can pad their rows do (Model::linear).
constexpr int64_t kFp8BlockRowMultiple = 4;
int64_t fp8_block_scale_stride(int64_t k);
enum class Fp8Scaling { kPerChannel, kBlock128 };
Fp8Scaling fp8_scaling(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales);
// The scaling of a quantize_rows_fp8 call: per token (scales [m]) or per 128-column group
// (scales [ceil(k / 128), m]); aborts on other shapes.
Fp8Scaling fp8_quantize_scaling(const Tensor& x, const Tensor& codes, const Tensor& scales);

struct RopeArgs {
  Tensor positions;                // [n] i32, device
  Tensor inv_freq;                 // [rotary_dim / 2] f32, device, or [num_tables, rotary_dim / 2] with
                                   // per_token_table; used when per_token_base is undefined
  Tensor per_token_table;          // optional [n] i32: the row of a 2-D inv_freq each token uses
  Tensor per_token_base;           // optional [n] f32: inv_freq[i] = base^(-2i / rotary_dim) for that token
                                   // (computed in f32 as 1.0f / powf(base, float(2i) / rotary_dim), like HF)
  int rotary_dim = 0;              // rotate the first rotary_dim channels of each head (<= head_dim)
  bool neox = true;                // true: rotate halves (x[i], x[i + rot/2]); false: adjacent pairs
  float attention_scaling = 1.0f;  // multiplies cos and sin (YaRN-style mscale; 1 otherwise)
};

// The routing of one mixture-of-experts layer's tokens, written by Backend::moe_route and read by
// the expert ops. Token t's j-th chosen expert is assignment a = t * top_k + j (A = num_tokens *
// top_k assignments). The sorted order groups assignments by expert: the rows of expert e are
// [expert_offsets[e], expert_offsets[e + 1]). The order within an expert is unspecified (the CUDA
// backend builds it with atomics): every expert op treats rows independently, so no result depends
// on it. All tensors are device views the caller owns, sized for exactly this step.
struct MoeRouting {
  int num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  Tensor topk_ids;        // [num_tokens, top_k] i32: the chosen experts, by decreasing probability
  Tensor topk_weights;    // [num_tokens, top_k] f32: their weights
  Tensor expert_offsets;  // [num_experts + 1] i32
  Tensor sorted_assign;   // [A] i32: the assignment at each sorted row
  Tensor assign_row;      // [A] i32: the sorted row of each assignment (the inverse permutation)
};

// Sampling settings of one logits row: the rule's settings (sampling_rule.h; temperature <= 0 is
// greedy: argmax, lowest id on ties) and where its random draw comes from.
struct SamplingRow : SamplingRule {
  uint64_t seed = 0;      // with `counter`, the only source of randomness: same (seed, counter,
  uint64_t counter = 0;   // logits) -> same token on every backend and in every batch
  int32_t dist_row = -1;  // Backend::sample: the row of `dist` that gets this row's distribution
};

// A recorded sequence of ops that a backend can run again (a CUDA graph), with the same pointers
// and shapes: what changes between replays is the CONTENT of the memory those ops read.
class Graph {
 public:
  virtual ~Graph() = default;
};

// The largest attention batches a recorded graph will be replayed for. Backends whose attention
// launch widths are fixed at record time ask the graph's plan for the widths such batches need.
struct GraphAttentionShape {
  int num_seqs = 0;      // sequences per replay, at most
  int min_num_seqs = 0;  // ... and at least (a decode graph's batches are padded to num_seqs)
  int max_q_len = 1;     // new tokens of any of them, at most
  int max_kv_len = 0;    // kv length of any of them, at most
  int page_size = 0;
};

// How a backend computes, fixed when it is made.
struct BackendOptions {
  // Batch-invariant mode (--batch-invariant): every row's result is bitwise a function of that
  // row's own inputs (its token, its sequence's keys), whatever else is in the step, how many rows
  // a GEMM has, how a prompt was cut into chunks or whether a decode graph padded the batch. Each
  // op then uses one reduction order for every batch: one GEMM algorithm per weight shape for
  // every m (no split-K), attention without KV splits and with one tile shape for every row, one
  // grouped-GEMM tile and one routing kernel for every step (docs/architecture.md).
  bool batch_invariant = false;
};

// The [n, heads, head_dim] views of a fused qkv matrix [n, (num_q_heads + 2 num_kv_heads) *
// head_dim]: q at column 0, k at num_q_heads * head_dim, v after k.
void qkv_head_views(const Tensor& qkv, int num_q_heads, int num_kv_heads, Tensor& q, Tensor& k, Tensor& v);

// A backend: memory, transfers, and the ops. One instance per device; not thread-safe (the engine
// thread owns it).
class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // The options it was made with.
  virtual const BackendOptions& options() const = 0;
  virtual DType act_dtype() const = 0;
  // The dtype this backend keeps a weight matrix (gemm's w, embedding's table) in when the
  // checkpoint stores it as `stored` (f32, f16, bf16, a block-quantized dtype, or f8_e4m3 for a
  // scaled FP8 matrix): `stored` itself when gemm (gemm_fp8 for f8_e4m3) and embedding compute on
  // it directly, else a dtype the loader converts it to (the act dtype by default). f8_e4m3 may
  // be answered only by a backend with supports_fp8_gemm().
  virtual DType weight_dtype(DType stored) const {
    (void)stored;
    return act_dtype();
  }

  // ---- memory and transfers
  virtual Buffer alloc(size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;  // async w.r.t. host
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;    // async; synchronize()
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // `rows` rows of `row_bytes` bytes, device to device: row i from src + i * src_stride to
  // dst + i * dst_stride (strides in bytes, >= row_bytes). Async; graph-recordable.
  virtual void copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                         size_t rows) = 0;
  // Makes the calling thread issue this backend's work to its device (CUDA: cudaSetDevice). A
  // thread that drives a backend other than its first one calls this before any op.
  virtual void bind_thread() {}
  virtual void synchronize() = 0;
  // Pinned host memory for staging transfers (plain host memory on cpu).
  virtual Buffer alloc_host(size_t bytes) = 0;
  // The device's memory as its driver reports it, for sizing the KV cache from a fraction of it
  // (--gpu-memory-fraction). {0, 0} = unknown: callers then need an explicit size.
  struct MemoryInfo {
    int64_t total_bytes = 0;
    int64_t free_bytes = 0;
  };
  virtual MemoryInfo memory_info() { return {}; }

  // Convert `src` into `dst` elementwise (same shape; f32/f16/bf16 in any combination).
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  // Fill with uniform random values in [lo, hi) from a seeded counter-based generator.
  // Element i (its row-major logical index, whatever the strides) gets
  // float(double(hi - lo) * double(sample_uniform(seed, i)) + double(lo)) rounded to t's dtype
  // (nearest even): bit-identical on every backend.
  virtual void fill_uniform(Tensor& t, float lo, float hi, uint64_t seed) = 0;

  // ---- ops
  // ids: [n] i32; table: [vocab, hidden] weight; out: [n, hidden] act.
  // Ids outside [0, vocab) are a caller bug (checked by the engine before it gets here).
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // The lookup into one vocabulary shard (tensor parallelism): out[i] = table[ids[i] - first_id]
  // when ids[i] is in [first_id, first_id + rows), else a row of zeros. ids: [n] i32 (any value);
  // table: [rows, hidden] weight; out: [n, hidden] act.
  virtual void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) = 0;

  // x, out: [..., hidden] act; weight: [hidden] act or f32. out = x / rms(x) * weight (out may
  // alias x).
  // Works on 2D [n, hidden] and on 3D per-head views [n, heads, head_dim].
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;

  // residual += delta; out = rms_norm(residual) * weight. residual, delta, out: [n, hidden] act;
  // weight as for rms_norm.
  // out may alias delta (not residual).
  virtual void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out) = 0;

  // In place on q: [n, num_q_heads, head_dim] and k: [n, num_kv_heads, head_dim] (strided views ok).
  virtual void rope(Tensor& q, Tensor& k, const RopeArgs& args) = 0;

  // out = x @ w^T (+ bias). x: [m, k] act; w: [n, k] weight (HF Linear layout; contiguous rows
  // when blocked); bias: optional [n] act; out: [m, n] act or f32 (f32 for logits).
  virtual void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;

  // ---- FP8 (e4m3) GEMMs: the compute path FP8 weights are meant for (docs/architecture.md, "FP8
  // weights"). Only where supports_fp8_gemm(); the CPU backend runs them as the exact reference.
  // Two scalings, told apart by the scale tensors' shapes (fp8_scaling below):
  //  - per channel: a scale per token (row of x) and per output channel (row of w);
  //  - 128-blocks (the fine-grained checkpoint format): a scale per token and group of
  //    kFp8Block columns of x, and per kFp8Block x kFp8Block block of w (the last group or block
  //    of a row or column may be partial).
  virtual bool supports_fp8_gemm() const { return false; }
  // Whether matrices with this scaling are kept as codes for gemm_fp8 (weights.h): where
  // weight_dtype(f8_e4m3) is f8_e4m3 and, on CUDA, cuBLASLt has the scale modes on this device
  // (else its FP8 GEMM of many rows is a plain kernel, and bf16 weights are the faster choice).
  virtual bool keeps_fp8_codes(Fp8Scaling scaling) const {
    (void)scaling;
    return weight_dtype(DType::kF8E4M3) == DType::kF8E4M3;
  }
  // Dynamic quantization of x: [m, k] act (rows contiguous) into codes [m, k] f8_e4m3
  // (contiguous) and f32 scales, per token (scales: [m]) or per token and group of kFp8Block
  // columns (scales: [ceil(k / kFp8Block), m] contiguous, group-major: the group g of row i at
  // scales[g, i]). Each group's scale = amax(its values) / 448 (1 where that is not > 0), and
  // codes = f32_to_f8e4m3(x / scale) (f32 quotient, round to nearest even, saturating).
  virtual void quantize_rows_fp8(const Tensor& x, Tensor& codes, Tensor& scales);
  // out[i, j] = sum over the column groups g of (sum over l in g of e4m3(x[i, l]) * e4m3(w[j, l]))
  //             * x_scale(i, g) * w_scale(j, g), accumulated in f32,
  // with one group spanning k for per-channel scales. x: [m, k] f8_e4m3 and w: [n, k] f8_e4m3,
  // contiguous; out: [m, n] act, contiguous; k a multiple of 16 (what FP8 tensor cores take).
  // Per channel: x_scales [m], w_scales [n] f32, contiguous. 128-blocks: x_scales as
  // quantize_rows_fp8 writes them, [ceil(k / 128), m]; w_scales [ceil(n / 128), ceil(k / 128)]
  // f32 with unit column stride and a row stride of ceil(k / 128) rounded up to a multiple of 4
  // (fp8_block_scale_stride; the layout cuBLASLt reads block scales in).
  virtual void gemm_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales, Tensor& out);
  // The input of an FP8 linear layer after a residual add: add_rms_norm(residual, delta, weight,
  // eps, out), then quantize_rows_fp8(out, codes, scales). The same residual, codes and scales as
  // those two ops, in one pass where the backend has it (CUDA, for rows of 16-byte vectors wider
  // than 1,024), which then leaves `out` unwritten; the default runs the two ops.
  virtual void add_rms_norm_fp8(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                                Tensor& codes, Tensor& scales);

  // The input of an FP8 down projection: silu_mul(gate_up, out) (gelu_tanh_mul with gelu_tanh),
  // then quantize_rows_fp8(out, codes, scales). The same codes and scales as those two ops, in one
  // pass where the backend has it (CUDA, for rows of 16-byte vectors), which then leaves `out`
  // unwritten; the default runs the two ops.
  virtual void act_mul_fp8(const Tensor& gate_up, bool gelu_tanh, Tensor& out, Tensor& codes, Tensor& scales);

  // x: [n, 2 * inter] act = [gate | up]; out: [n, inter] act = silu(gate) * up.
  virtual void silu_mul(const Tensor& x, Tensor& out) = 0;
  // The same with gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) (torch's
  // gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
  virtual void gelu_tanh_mul(const Tensor& x, Tensor& out) = 0;

  // x: [m, n] act or f32, in place: x = x * s (Gemma's embedding scale).
  virtual void scale(Tensor& x, float s) = 0;
  // x: [m, n] act or f32, in place: x = cap * tanh(x / cap) (Gemma 2's final logit soft-capping).
  virtual void softcap(Tensor& x, float cap) = 0;

  // ---- mixture of experts: route, then one grouped GEMM per projection over the step's
  // assignments sorted by expert (no per-expert calls, nothing read back to the host), then a
  // weighted sum back to each token.
  // router_logits: [num_tokens, num_experts] f32. Writes every tensor of `routing`: softmax over
  // the experts, the top_k probabilities (ties: the lower expert id first), divided by their sum
  // when `renormalize`, and the sorted order. Preconditions: num_experts <= 512, top_k <= 16.
  virtual void moe_route(const Tensor& router_logits, bool renormalize, MoeRouting& routing) = 0;
  // The grouped GEMM: sorted row r, of expert e, gets out[r] = x_r @ w[e]^T, where x_r is x[r]
  // (x: [A, k]) or, with `gather`, x[sorted_assign[r] / top_k] (x: [num_tokens, k]: each token's
  // row read in place by every expert that token chose). w: [num_experts, n, k] act, contiguous;
  // out: [A, n] act. k a multiple of 8 and n even.
  virtual void moe_gemm(const Tensor& x, const Tensor& w, const MoeRouting& routing, bool gather, Tensor& out) = 0;
  // out[t] = sum over j of topk_weights[t, j] * y[assign_row[t * top_k + j]] (f32, each product
  // rounded, added in ascending expert id as transformers adds the experts' outputs).
  // y: [A, h] act; out: [num_tokens, h] act.
  virtual void moe_combine(const Tensor& y, const MoeRouting& routing, Tensor& out) = 0;

  // Write new K/V rows into the paged cache. k, v: [n, num_kv_heads, head_dim] act (strided ok);
  // slot_mapping: [n] i32, slot = page * page_size + offset; slots < 0 are skipped. An fp8 cache
  // gets f32_to_f8e4m3(x / scale) of each value (KvCacheLayer).
  virtual void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvCacheLayer& cache) = 0;

  // rope(q, k, args) then kv_write(k, v, slot_mapping, cache), with the same results; backends
  // that can do both in one pass over k (CUDA: one launch instead of two) override it.
  virtual void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const RopeArgs& args, const Tensor& slot_mapping,
                             KvCacheLayer& cache) {
    rope(q, k, args);
    kv_write(k, v, slot_mapping, cache);
  }

  // A layer's attention input without q/k norms: qkv = x @ w^T (+ bias) as gemm computes it, then
  // rope_kv_write on its q, k and v heads ([n, heads, head_dim] views of qkv at columns 0,
  // num_q_heads * head_dim and (num_q_heads + num_kv_heads) * head_dim; head_dim = qkv's width /
  // (num_q_heads + 2 num_kv_heads)). The same results as those ops; CUDA rotates and writes the
  // cache in the decode-sized GEMM's epilogue where that kernel takes the product.
  virtual void qkv_rope_kv_write(const Tensor& x, const Tensor& w, const Tensor* bias, int num_q_heads,
                                 int num_kv_heads, const RopeArgs& args, const Tensor& slot_mapping,
                                 KvCacheLayer& cache, Tensor& qkv);

  // The q/k RMSNorms of Qwen3 and Gemma 3 and then rope_kv_write: q = rms_norm(q, q_norm, eps) per
  // head (q_norm: [head_dim], act or f32), k likewise with k_norm, then rope_kv_write(q, k, v, ...).
  // One launch on CUDA where a head's channel pairs are whole warps (head_dim 64, 128, 256); the
  // default runs the three ops.
  virtual void qk_norm_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                                     float eps, const RopeArgs& args, const Tensor& slot_mapping, KvCacheLayer& cache) {
    rms_norm(q, q_norm, eps, q);
    rms_norm(k, k_norm, eps, k);
    rope_kv_write(q, k, v, args, slot_mapping, cache);
  }

  // ---- attention: plan once per step, then one call per layer
  // Whether attention() runs heads of head_dim here; Unsupported naming the limit when not (a
  // model loader asks before it uploads weights). The CPU reference takes any size.
  virtual Status attention_supports(int head_dim) const {
    (void)head_dim;
    return Status::ok();
  }
  // Device bytes the workspace of a plan of `shape` needs (0: none).
  virtual size_t attention_workspace_bytes(const AttentionPlanShape& shape) const = 0;
  // A plan for batches within `shape`, planning into `workspace` (at least
  // attention_workspace_bytes(shape) bytes from alloc(); the plan keeps it).
  virtual std::unique_ptr<AttentionPlan> make_attention_plan(const AttentionPlanShape& shape, Buffer workspace) = 0;
  // Once per step, before the layers: partitions the step's attention work into `plan` from the
  // batch's host metadata (and uploads it, asynchronously). The batch must fit the plan's shape.
  virtual void plan_attention(AttentionPlan& plan, const AttentionBatch& batch) = 0;

  // The one attention op (DESIGN.md's contract), run with the plan made for this step's `batch`.
  // q: [total_q, num_q_heads, head_dim] act (strided ok), RoPE applied; out: [total_q,
  // num_q_heads, head_dim] act, contiguous; lse: optional [total_q, num_q_heads] f32 (natural log
  // of the softmax denominator, scaled scores). New tokens' K/V must already be in the cache
  // (kv_write). An fp8 cache is read as the values it means (e4m3 * scale; CUDA: act bf16 only).
  // Every query sees at least its own position; a row that sees no key (impossible with valid
  // metadata) gets out = 0, lse = -inf.
  virtual void attention(const AttentionPlan& plan, const Tensor& q, const KvCacheLayer& cache,
                         const AttentionBatch& batch, const AttentionParams& params, Tensor& out, Tensor* lse) = 0;

  // out[i, :] = x[indices[i], :]. x: [n, h] act; indices: [m] i32; out: [m, h] act.
  virtual void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) = 0;

  // logits: [m, vocab] f32 (read-only); rows: m settings (host); out: [m] i32, device. dist, when
  // given ([r, vocab] f32, device; without it dist_row means nothing): row rows[i].dist_row of it
  // (each below r; -1: none) gets
  // the distribution row i's token is drawn from: p / (kept mass) for the tokens the rule keeps, 0
  // elsewhere; a point mass on the arg-max for greedy rows (speculative decoding's rejection
  // sampling reads it).
  virtual void sample(const Tensor& logits, std::span<const SamplingRow> rows, Tensor& out, Tensor* dist = nullptr) = 0;

  // Log-probabilities of logits rows: the log-softmax of the logits as they stand (after penalties
  // and masks, before temperature). For each of r selected rows i (rows[i] in [0, m)), with
  // lse_i = max + log(sum over t of exp(logits[rows[i], t] - max)) (each difference in f32, exp and
  // sum in double, lse rounded to f32):
  //   stats[i] = {logits[rows[i], tokens[rows[i]]] - lse_i, lse_i};
  //   top_ids[i, j], top_lp[i, j] for j < n: the row's n largest logits in order (value descending,
  //   lower id on ties) and their log-probabilities, stopping at the first -inf (masked) one:
  //   -1 and -inf from there on.
  // logits: [m, vocab] f32, contiguous rows; rows: [r] i32; tokens: [m] i32 (one per logits row,
  // e.g. the sampled ids; one outside [0, vocab) gets a NaN logprob, never a read outside the row:
  // the sampler checks the ids after this runs); stats: [r, 2] f32; top_ids: [r, n] i32 and top_lp: [r, n] f32,
  // contiguous (unused when n == 0). 0 <= n <= kMaxTopLogprobs.
  static constexpr int kMaxTopLogprobs = 20;
  virtual void logprobs(const Tensor& logits, const Tensor& rows, const Tensor& tokens, int n, Tensor& stats,
                        Tensor& top_ids, Tensor& top_lp) = 0;

  // Token masks of constrained generation: logits[rows[i], t] = -inf wherever bit t of
  // masks[i] is clear (bit t = word t / 32, bit t % 32). logits: [m, vocab] f32, contiguous rows;
  // rows: [r] i32, distinct, in [0, m); masks: [r, ceil(vocab / 32)] u32 as i32 words, contiguous.
  virtual void mask_logits(Tensor& logits, const Tensor& rows, const Tensor& masks) = 0;

  // ---- graphs (optional: supports_graphs() false = the two calls below abort)
  virtual bool supports_graphs() const { return false; }
  // Records the ops `record` enqueues, WITHOUT running them. While recording, `record` may only
  // enqueue ops: no transfers, synchronize, alloc or plan_attention. Its attention ops must use
  // `plan`; each replay reads whatever `plan` holds then, so the caller plans every replay's batch
  // (within `bounds`) into the same plan before replaying.
  virtual std::unique_ptr<Graph> capture_graph(const std::function<void()>& record, AttentionPlan& plan,
                                               const GraphAttentionShape& bounds) {
    (void)record;
    (void)plan;
    (void)bounds;
    FG_CHECK(false, name() + " backend has no graphs (check supports_graphs())");
    return nullptr;
  }
  // Enqueues the recorded ops on the backend's stream (async, like any op). Aborts when the batch
  // planned into the graph's plan exceeds the graph's bounds.
  virtual void replay_graph(Graph& graph) {
    (void)graph;
    FG_CHECK(false, name() + " backend has no graphs (check supports_graphs())");
  }
};

// A plan of `shape` over a workspace allocated from `backend` itself (what models and tests do).
std::unique_ptr<AttentionPlan> make_attention_plan(Backend& backend, const AttentionPlanShape& shape);

// The CPU reference backend (always available).
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options = {});
// The CUDA backend, or an error saying why there is none (no GPU, not built with CUDA).
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index = 0, const BackendOptions& options = {});
// "cpu", "cuda" or "auto" (cuda when a GPU is present, else cpu).
Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options = {});

}  // namespace fg
