// Dummy weights (dummy_weights.h) and Model::load_dummy.
#include "model/dummy_weights.h"

#include <cmath>
#include <vector>

#include "model/gguf_model.h"
#include "model/model.h"

namespace fg {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

enum class Init { kLinear, kOnes, kBias };

struct DummyTensor {
  Tensor* target;
  std::vector<int64_t> shape;
  Init init;
  int64_t fan_in;
  Tensor* fp8_scales = nullptr;  // a linear layer's weight without a bias: where FP8 scales go
};

std::vector<DummyTensor> dummy_plan(const ModelConfig& c, ModelWeights& w) {
  std::vector<DummyTensor> plan;
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t qkv = c.qkv_dim(), q_dim = c.q_dim();
  w.layers.resize(size_t(c.num_layers));
  // The embedding is read row by row (no fan-in): unit-scale values like a trained table's.
  plan.push_back({&w.embed, {c.vocab_size, hidden}, Init::kLinear, 1});
  for (LayerWeights& L : w.layers) {
    plan.push_back({&L.input_norm, {hidden}, Init::kOnes, 0});
    plan.push_back({&L.qkv, {qkv, hidden}, Init::kLinear, hidden, c.options.qkv_bias ? nullptr : &L.qkv_scale});
    if (c.options.qkv_bias) plan.push_back({&L.qkv_bias, {qkv}, Init::kBias, 0});
    if (c.options.qk_norm) {
      plan.push_back({&L.q_norm, {c.head_dim}, Init::kOnes, 0});
      plan.push_back({&L.k_norm, {c.head_dim}, Init::kOnes, 0});
    }
    plan.push_back({&L.o, {hidden, q_dim}, Init::kLinear, q_dim, c.options.o_bias ? nullptr : &L.o_scale});
    if (c.options.o_bias) plan.push_back({&L.o_bias, {hidden}, Init::kBias, 0});
    plan.push_back({&L.post_norm, {hidden}, Init::kOnes, 0});
    if (c.options.sandwich_norms) {
      plan.push_back({&L.attn_out_norm, {hidden}, Init::kOnes, 0});
      plan.push_back({&L.mlp_out_norm, {hidden}, Init::kOnes, 0});
    }
    const int l = int(&L - w.layers.data());
    if (c.is_moe_layer(l)) {
      const int64_t E = c.moe.num_experts, mi = c.moe.intermediate_size;
      plan.push_back({&L.router, {E, hidden}, Init::kLinear, hidden});
      plan.push_back({&L.expert_gate_up, {E, 2 * mi, hidden}, Init::kLinear, hidden});
      plan.push_back({&L.expert_down, {E, hidden, mi}, Init::kLinear, mi});
      continue;
    }
    plan.push_back(
        {&L.gate_up, {2 * inter, hidden}, Init::kLinear, hidden, c.options.mlp_bias ? nullptr : &L.gate_up_scale});
    if (c.options.mlp_bias) plan.push_back({&L.gate_up_bias, {2 * inter}, Init::kBias, 0});
    plan.push_back({&L.down, {hidden, inter}, Init::kLinear, inter, c.options.mlp_bias ? nullptr : &L.down_scale});
    if (c.options.mlp_bias) plan.push_back({&L.down_bias, {hidden}, Init::kBias, 0});
  }
  plan.push_back({&w.final_norm, {hidden}, Init::kOnes, 0});
  if (!c.tie_word_embeddings) plan.push_back({&w.lm_head, {c.vocab_size, hidden}, Init::kLinear, hidden});
  return plan;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t model_weight_bytes(const ModelConfig& config, DType act) {
  ModelWeights w;
  int64_t total = 0;
  for (const DummyTensor& t : dummy_plan(config, w)) total += numel_of(t.shape) * int64_t(dtype_size(act));
  return total;
}

int64_t model_active_weight_bytes(const ModelConfig& config, DType act) {
  int64_t total = model_weight_bytes(config, act);
  const int64_t expert = 3 * config.hidden_size * config.moe.intermediate_size * int64_t(dtype_size(act));
  for (int l = 0; l < config.num_layers; ++l)
    if (config.is_moe_layer(l)) total -= int64_t(config.moe.num_experts - config.moe.top_k) * expert;
  return total;
}

Result<ModelWeights> make_dummy_weights(const ModelConfig& c, Backend& backend, uint64_t seed,
                                        LoadQuantization quantization) {
  ModelWeights w;
  std::vector<DummyTensor> plan = dummy_plan(c, w);
  const DType act = backend.act_dtype();
  // FP8: the linear weights without a bias as e4m3 codes with per-channel scales (--quantization
  // fp8), or with 128 x 128 block scales (a config whose quantization_config is the fine-grained
  // format), where the backend keeps them so (weights.h); the codes are random act rows quantized
  // with Backend::quantize_rows_fp8, the block scales random near those rows' scales.
  const bool blocks = c.quant.method == WeightQuantization::kFp8Block;
  const bool fp8 = quantization == LoadQuantization::kFp8 || blocks;
  if (fp8 && !(backend.supports_fp8_gemm() &&
               backend.keeps_fp8_codes(blocks ? Fp8Scaling::kBlock128 : Fp8Scaling::kPerChannel)))
    return unsupported(
        "FP8 dummy weights (--quantization fp8, or an FP8 quantization_config) need a backend that "
        "computes on FP8 weights; " +
        backend.name() + " keeps them as dequantized values, so nothing new would be measured");
  auto as_fp8 = [&](const DummyTensor& t) { return fp8 && t.fp8_scales != nullptr && t.shape.back() % 16 == 0; };
  auto block_rows = [](const DummyTensor& t) { return (t.shape[0] + kFp8Block - 1) / kFp8Block; };
  size_t total = 0, staging = 0, row_scales = 0;
  std::vector<size_t> offsets, scale_offsets;
  for (const DummyTensor& t : plan) {
    offsets.push_back(total);
    if (as_fp8(t)) {
      total += align_up(size_t(numel_of(t.shape)));
      scale_offsets.push_back(total);
      total += align_up(size_t(blocks ? block_rows(t) * fp8_block_scale_stride(t.shape[1]) : t.shape[0]) * 4);
      staging = std::max(staging, size_t(numel_of(t.shape)) * dtype_size(act));
      row_scales = std::max(row_scales, size_t(t.shape[0]) * 4);
      continue;
    }
    scale_offsets.push_back(0);
    total += align_up(size_t(numel_of(t.shape)) * dtype_size(act));
  }
  Buffer rows;  // random act rows, quantized into each FP8 matrix
  if (staging > 0) rows = backend.alloc(staging);
  Buffer per_row;  // block scales: the rows' own scales, not kept
  if (blocks && row_scales > 0) per_row = backend.alloc(row_scales);
  w.arena = backend.alloc(std::max(total, kAlign));
  if (w.arena.data() == nullptr) {
    return Status(ErrorCode::kResourceExhausted,
                  "cannot allocate " + std::to_string(total) + " bytes of dummy weights on " + backend.name());
  }
  char* base = static_cast<char*>(w.arena.data());
  for (size_t i = 0; i < plan.size(); ++i) {
    const DummyTensor& d = plan[i];
    Tensor& t = *d.target;
    t = Tensor{};
    t.data = base + offsets[i];
    t.dtype = as_fp8(d) ? DType::kF8E4M3 : act;
    t.device = backend.device();
    t.ndim = int(d.shape.size());
    int64_t stride = 1;
    for (int k = t.ndim - 1; k >= 0; --k) {
      t.shape[size_t(k)] = d.shape[size_t(k)];
      t.stride[size_t(k)] = stride;
      stride *= d.shape[size_t(k)];
    }
    const uint64_t tensor_seed = seed * 0x9e3779b97f4a7c15ull + i;
    if (as_fp8(d)) {
      const float a = 1.0f / std::sqrt(float(d.fan_in));
      Tensor values = Tensor::contiguous(rows.data(), act, t.device, {d.shape[0], d.shape[1]});
      backend.fill_uniform(values, -a, a, tensor_seed);
      if (!blocks) {
        *d.fp8_scales = Tensor::contiguous(base + scale_offsets[i], DType::kF32, t.device, {d.shape[0]});
        backend.quantize_rows_fp8(values, t, *d.fp8_scales);
        continue;
      }
      Tensor row_scale = Tensor::contiguous(per_row.data(), DType::kF32, t.device, {d.shape[0]});
      backend.quantize_rows_fp8(values, t, row_scale);
      // Codes span +-448 of a row's amax ~ a: block scales around a / 448 keep the values near U(-a, a).
      const int64_t stride = fp8_block_scale_stride(d.shape[1]);
      Tensor all = Tensor::contiguous(base + scale_offsets[i], DType::kF32, t.device, {block_rows(d) * stride});
      backend.fill_uniform(all, 0.5f * a / 448.0f, 1.5f * a / 448.0f, tensor_seed + 1);
      *d.fp8_scales = Tensor::contiguous(all.data, DType::kF32, t.device,
                                         {block_rows(d), (d.shape[1] + kFp8Block - 1) / kFp8Block});
      d.fp8_scales->stride[0] = stride;
      continue;
    }
    Tensor flat = Tensor::contiguous(t.data, act, t.device, {numel_of(d.shape)});
    switch (d.init) {
      case Init::kLinear: {
        const float a = 1.0f / std::sqrt(float(d.fan_in));
        backend.fill_uniform(flat, -a, a, tensor_seed);
        break;
      }
      case Init::kOnes: backend.fill_uniform(flat, 1.0f, 1.0f, tensor_seed); break;
      case Init::kBias: backend.fill_uniform(flat, -0.02f, 0.02f, tensor_seed); break;
    }
  }
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  backend.synchronize();
  return w;
}

Result<std::unique_ptr<Model>> Model::load_dummy(const std::string& dir, Backend& backend, uint64_t seed,
                                                 const TensorParallel& tp, const WeightLoadOptions& options) {
  FG_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir));
  FG_RETURN_IF_ERROR(check_backend_supports(config, backend));
  std::unique_ptr<Model> m(new Model(backend, std::move(config)));
  FG_RETURN_IF_ERROR(m->set_tensor_parallel(tp));
  // A shard holds only its local shapes (each rank seeds its own values: meaningless either way).
  FG_ASSIGN_OR_RETURN(m->weights_,
                      make_dummy_weights(m->local_, backend, seed + uint64_t(m->shard_.rank), options.quantization));
  if (m->shard_.rank != 0)  // row-parallel biases live on rank 0 alone (tensor_parallel.h)
    for (LayerWeights& L : m->weights_.layers) L.o_bias = L.down_bias = Tensor{};
  m->upload_rope_table();
  return m;
}

}  // namespace fg
