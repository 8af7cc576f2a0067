// ModelRunner: backend + model + KV cache behind the StepRunner interface (model_runner.h).
#include "engine/model_runner.h"

#include <unistd.h>

#include <algorithm>

#include "kvcache/kv_sizing.h"

namespace fg {

// The draft model behind the StepRunner interface, sharing the target runner's backend.
class ModelRunner::DraftRunner final : public StepRunner {
 public:
  DraftRunner(Backend& backend, std::unique_ptr<Model> model, int32_t max_model_len)
      : backend_(backend), model_(std::move(model)), max_model_len_(max_model_len) {}
  Backend& backend() override { return backend_; }
  int32_t vocab_size() const override { return int32_t(model_->config().vocab_size); }
  int32_t max_model_len() const override { return max_model_len_; }
  std::vector<int32_t> eos_token_ids() const override { return {}; }
  int32_t kv_num_pages() const override { return cache_->num_pages(); }
  int32_t kv_page_size() const override { return cache_->page_size(); }
  StepWriter begin_step(const StepShape& shape) override { return model_->begin_step(shape, cache_->page_size()); }
  Result<Tensor> forward(const StepMetadata& step) override { return model_->forward(step, *cache_); }

  Backend& backend_;
  std::unique_ptr<Model> model_;
  std::optional<KvCache> cache_;
  int32_t max_model_len_;
};

ModelRunner::ModelRunner() = default;
ModelRunner::~ModelRunner() = default;
StepRunner* ModelRunner::draft() {
  return draft_.get();
}

namespace {

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const ModelRunnerOptions& o, Backend& backend) {
  WeightLoadOptions load;
  load.quantization = o.quantization;
  if (o.dummy_weights) return Model::load_dummy(dir, backend, o.dummy_seed, load);
  return Model::load(dir, backend, load);
}

KvCacheShape kv_shape(const ModelConfig& c, const Backend& backend, int32_t page_size) {
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.dtype = backend.act_dtype();
  shape.page_size = page_size;
  return shape;
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const ModelRunnerOptions& o) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  FG_ASSIGN_OR_RETURN(r->backend_, make_backend(o.backend));
  FG_ASSIGN_OR_RETURN(r->model_, load_model(o.model_dir, o, *r->backend_));
  if (!o.draft_model_dir.empty()) {
    auto draft = load_model(o.draft_model_dir, o, *r->backend_);
    if (!draft.is_ok()) return Status(draft.status().code(), "--draft-model: " + draft.status().message());
    if ((*draft)->config().vocab_size != r->model_->config().vocab_size)
      return invalid_argument("--draft-model " + o.draft_model_dir + ": its vocabulary has " +
                              std::to_string((*draft)->config().vocab_size) + " ids, the target's " +
                              std::to_string(r->model_->config().vocab_size) +
                              "; a draft model must share the target's tokenizer");
    r->draft_ = std::make_unique<DraftRunner>(*r->backend_, std::move(draft).value(), 0);
  }
  const ModelConfig& c = r->model_->config();
  r->max_model_len_ = int32_t(std::min<int64_t>(c.max_position_embeddings, INT32_MAX));
  if (o.max_model_len > 0) r->max_model_len_ = std::min(r->max_model_len_, o.max_model_len);
  if (r->max_model_len_ <= 0) {
    return invalid_argument(o.model_dir + "/config.json: max_position_embeddings is missing; pass --max-model-len");
  }

  // Decode graphs first: their fixed buffers come out of the memory the KV cache is sized from.
  if (o.cuda_graphs && r->backend_->supports_graphs()) {
    if (o.max_graph_batch <= 0) return invalid_argument("max_graph_batch must be positive");
    if (o.page_size <= 0) return invalid_argument("page size must be positive");
    DecodeGraphOptions g;
    g.max_batch_size = o.max_graph_batch;
    g.max_pages_per_seq = kv_pages_for(r->max_model_len_, o.page_size);
    g.max_query_len = std::max(1, o.graph_max_query_len);
    g.capture = true;
    FG_RETURN_IF_ERROR(r->model_->enable_decode_graphs(g));
    if (r->draft_) {
      g.max_query_len = 1;  // the draft only ever decodes through graphs
      FG_RETURN_IF_ERROR(r->draft_->model_->enable_decode_graphs(g));
    }
  }
  if (r->draft_) r->draft_->max_model_len_ = r->max_model_len_;
  // On a GPU, the step workspace before the KV cache, which is sized from the memory left (a
  // prefill step of a mixture of experts needs tokens * top_k rows of expert buffers).
  if (o.max_step_tokens > 0 && r->backend_->device() != Device::kCpu)
    r->model_->reserve_step_workspace(o.max_step_tokens, std::min(o.max_step_tokens, 256));

  const KvCacheShape shape = kv_shape(c, *r->backend_, o.page_size);
  KvMemoryRequest req;
  req.kv_cache_bytes = o.kv_cache_bytes;
  req.gpu_memory_fraction = o.gpu_memory_fraction;
  if (o.kv_cache_bytes <= 0) {
    if (r->backend_->device() == Device::kCpu) {
      // Host memory: the fraction applies to what is available now, nothing reserved, and the
      // budget is capped at what a few full-length sequences need (kv_sizing.h).
      const int64_t page = sysconf(_SC_PAGESIZE);
      req.device_total_bytes = int64_t(sysconf(_SC_AVPHYS_PAGES)) * page;
      req.device_free_bytes = req.device_total_bytes;
      int64_t per_page = kv_bytes_per_page(shape);
      if (r->draft_) per_page += kv_bytes_per_page(kv_shape(r->draft_->model_->config(), *r->backend_, o.page_size));
      const int64_t padded_len = int64_t(kv_pages_for(r->max_model_len_, o.page_size)) * o.page_size;
      req.cap_bytes = cpu_default_kv_cap_bytes(per_page / o.page_size, padded_len);
    } else {
      const Backend::MemoryInfo mem = r->backend_->memory_info();
      req.device_total_bytes = mem.total_bytes;
      req.device_free_bytes = mem.free_bytes;
      req.activation_reserve_bytes = o.activation_reserve_bytes;
    }
  }
  FG_ASSIGN_OR_RETURN(int32_t pages, ::fg::kv_num_pages(shape, req));
  if (r->draft_) {
    // The same budget holds both caches, page for page.
    const int64_t t = kv_bytes_per_page(shape);
    const int64_t d = kv_bytes_per_page(kv_shape(r->draft_->model_->config(), *r->backend_, o.page_size));
    pages = int32_t(int64_t(pages) * t / (t + d));
    if (pages < 1) return invalid_argument("the KV memory cannot hold a page of both the model and the draft model");
  }
  // Never more pages than max_model_len tokens for every sequence of a big batch could use.
  const int64_t useful = int64_t(r->max_model_len_ / o.page_size + 1) * 1024;
  pages = int32_t(std::min<int64_t>(pages, useful));
  FG_ASSIGN_OR_RETURN(KvCache cache, r->model_->make_kv_cache(pages, o.page_size));
  r->cache_.emplace(std::move(cache));
  r->kv_bytes_ = int64_t(pages) * kv_bytes_per_page(shape);
  if (r->draft_) {
    FG_ASSIGN_OR_RETURN(KvCache draft_cache, r->draft_->model_->make_kv_cache(pages, o.page_size));
    r->draft_->cache_.emplace(std::move(draft_cache));
  }
  return r;
}

std::vector<int32_t> ModelRunner::eos_token_ids() const {
  std::vector<int32_t> out;
  for (int64_t id : model_->config().eos_token_ids) {
    if (id >= 0 && id < model_->config().vocab_size) out.push_back(int32_t(id));
  }
  return out;
}

}  // namespace fg
