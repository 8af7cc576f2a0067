// ModelRunner: backend + model + KV cache behind the StepRunner interface (model_runner.h).
#include "engine/model_runner.h"

#include <unistd.h>

#include <algorithm>

#include "kvcache/kv_sizing.h"

namespace fg {

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const ModelRunnerOptions& o) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  FG_ASSIGN_OR_RETURN(r->backend_, make_backend(o.backend));
  if (o.dummy_weights) {
    FG_ASSIGN_OR_RETURN(r->model_, Model::load_dummy(o.model_dir, *r->backend_, o.dummy_seed));
  } else {
    FG_ASSIGN_OR_RETURN(r->model_, Model::load(o.model_dir, *r->backend_));
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
    g.capture = true;
    FG_RETURN_IF_ERROR(r->model_->enable_decode_graphs(g));
  }

  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.dtype = r->backend_->act_dtype();
  shape.page_size = o.page_size;
  KvMemoryRequest req;
  req.kv_cache_bytes = o.kv_cache_bytes;
  req.gpu_memory_fraction = o.gpu_memory_fraction;
  if (o.kv_cache_bytes <= 0) {
    if (r->backend_->device() == Device::kCpu) {
      // Host memory: the fraction applies to what is available now, nothing reserved.
      const int64_t page = sysconf(_SC_PAGESIZE);
      req.device_total_bytes = int64_t(sysconf(_SC_AVPHYS_PAGES)) * page;
      req.device_free_bytes = req.device_total_bytes;
    } else {
      const Backend::MemoryInfo mem = r->backend_->memory_info();
      req.device_total_bytes = mem.total_bytes;
      req.device_free_bytes = mem.free_bytes;
      req.activation_reserve_bytes = o.activation_reserve_bytes;
    }
  }
  FG_ASSIGN_OR_RETURN(int32_t pages, ::fg::kv_num_pages(shape, req));
  // Never more pages than max_model_len tokens for every sequence of a big batch could use.
  const int64_t useful = int64_t(r->max_model_len_ / o.page_size + 1) * 1024;
  pages = int32_t(std::min<int64_t>(pages, useful));
  FG_ASSIGN_OR_RETURN(KvCache cache, r->model_->make_kv_cache(pages, o.page_size));
  r->cache_.emplace(std::move(cache));
  r->kv_bytes_ = int64_t(pages) * kv_bytes_per_page(shape);
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
