// ModelRunner: backend + model + KV cache behind the StepRunner interface (model_runner.h).
#include "engine/model_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <type_traits>

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
  int64_t setup_steps() const override { return model_->decode_graph_stats().captures; }

  Backend& backend_;
  std::unique_ptr<Model> model_;
  std::optional<KvCache> cache_;
  int32_t max_model_len_;
};

namespace {

// What rank 0 sends the other ranks before each step (then the step's block itself).
struct StepHeader {
  bool stop = false;  // the runner is going away: leave the loop
  StepShape shape;    // as given to rank 0's begin_step (the block's layout follows from it)
  StepMetadata step;  // rank 0's view; its spans are rebased onto each rank's own block
};
static_assert(std::is_trivially_copyable_v<StepHeader>, "StepHeader travels as bytes");

}  // namespace

// Ranks 1..N-1 of a tensor-parallel runner, each on its own thread, and every rank's communicator.
class ModelRunner::Ranks {
 public:
  struct Rank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;  // after backend: destroyed first
    std::optional<KvCache> cache;
    std::thread thread;
  };

  ~Ranks() {
    if (!started_) return;
    StepHeader stop;
    stop.stop = true;
    comms[0]->broadcast_host(&stop, sizeof(stop), 0);
    for (Rank& r : ranks)
      if (r.thread.joinable()) r.thread.join();
  }

  // Rank 0's side of a step: the header, then the block.
  void send(const StepShape& shape, const StepMetadata& step) {
    StepHeader h;
    h.shape = shape;
    h.step = step;
    comms[0]->broadcast_host(&h, sizeof(h), 0);
    comms[0]->broadcast_host(step.words, step.layout.words * 4, 0);
  }

  void start() {
    for (size_t i = 0; i < ranks.size(); ++i)
      ranks[i].thread = std::thread([this, i] { serve(ranks[i], *comms[i + 1]); });
    started_ = true;
  }

  std::vector<Rank> ranks;                           // [N - 1]: ranks 1..N-1
  std::vector<std::unique_ptr<Communicator>> comms;  // [N]: rank 0's first; destroyed before the
                                                     // backends they run on

 private:
  // A rank's loop: receive the step, write it into this rank's own block, run the shard.
  static void serve(Rank& r, Communicator& comm) {
    r.backend->bind_thread();
    for (;;) {
      StepHeader h;
      comm.broadcast_host(&h, sizeof(h), 0);
      if (h.stop) return;
      const StepMetadata block = r.model->begin_step(h.shape, r.cache->page_size()).finish();
      FG_CHECK(block.layout.words == h.step.layout.words,
               "tensor parallelism: rank " + std::to_string(comm.rank()) + " laid the step out differently");
      comm.broadcast_host(block.words, block.layout.words * 4, 0);
      // Every rank validates the same step against the same shapes: an error here is rank 0's too,
      // which reports it.
      (void)r.model->forward(rebase_step(h.step, block.words), *r.cache);
      r.backend->synchronize();  // the block is rewritten by the next step
    }
  }

  bool started_ = false;
};

ModelRunner::ModelRunner() = default;
ModelRunner::~ModelRunner() = default;
StepRunner* ModelRunner::draft() {
  return draft_.get();
}

int ModelRunner::tensor_parallel_size() const {
  return tp_ ? int(tp_->comms.size()) : 1;
}

StepWriter ModelRunner::begin_step(const StepShape& shape) {
  shape_ = shape;
  return model_->begin_step(shape, cache_->page_size());
}

Result<Tensor> ModelRunner::forward(const StepMetadata& step) {
  if (tp_) {
    backend_->bind_thread();  // the engine thread drives rank 0's device
    tp_->send(shape_, step);
  }
  return model_->forward(step, *cache_);
}

namespace {

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const ModelRunnerOptions& o, Backend& backend,
                                          const TensorParallel& tp = {}) {
  WeightLoadOptions load;
  load.quantization = o.quantization;
  if (o.dummy_weights) return Model::load_dummy(dir, backend, o.dummy_seed, tp, load);
  return Model::load(dir, backend, tp, load);
}

// Backends 1..n-1 of the kind of `first` (CPU, or CUDA devices 1..n-1) and the communicators of
// all n; errors say what --tensor-parallel-size needs.
Status make_ranks(int n, Backend& first, const BackendOptions& options, std::vector<std::unique_ptr<Backend>>& backends,
                  std::vector<std::unique_ptr<Communicator>>& comms) {
  const std::string flag = "--tensor-parallel-size " + std::to_string(n);
  for (int i = 1; i < n; ++i) {
    if (first.device() == Device::kCpu) {
      backends.push_back(make_cpu_backend(options));
      continue;
    }
    auto b = make_cuda_backend(i, options);
    if (!b.is_ok()) return invalid_argument(flag + " needs " + std::to_string(n) + " GPUs: " + b.status().message());
    backends.push_back(std::move(b).value());
  }
  if (first.device() == Device::kCpu) {
    comms = make_local_communicators(n);
    return Status::ok();
  }
  std::vector<Backend*> all = {&first};
  for (auto& b : backends) all.push_back(b.get());
  auto nccl = make_nccl_communicators(all);
  if (!nccl.is_ok()) return Status(nccl.status().code(), flag + ": " + nccl.status().message());
  comms = std::move(nccl).value();
  first.bind_thread();
  return Status::ok();
}

KvCacheShape kv_shape(const ModelConfig& c, DType dtype, int32_t page_size) {
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.dtype = dtype;
  shape.page_size = page_size;
  return shape;
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const ModelRunnerOptions& o) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  BackendOptions backend_options;
  backend_options.batch_invariant = o.batch_invariant;
  FG_ASSIGN_OR_RETURN(r->backend_, make_backend(o.backend, backend_options));
  const int tp_size = o.tensor_parallel_size;
  if (tp_size < 1 || tp_size > 64)
    return invalid_argument("--tensor-parallel-size must be in [1, 64], got " + std::to_string(tp_size));
  TensorParallel tp0;
  if (tp_size > 1) {
    if (!o.draft_model_dir.empty())
      return unsupported("--draft-model with --tensor-parallel-size " + std::to_string(tp_size) +
                         " is not supported (the draft model would need its own split)");
    r->tp_ = std::make_unique<Ranks>();
    std::vector<std::unique_ptr<Backend>> backends;
    FG_RETURN_IF_ERROR(make_ranks(tp_size, *r->backend_, backend_options, backends, r->tp_->comms));
    for (auto& b : backends) {
      r->tp_->ranks.emplace_back();
      r->tp_->ranks.back().backend = std::move(b);
    }
    tp0.comm = r->tp_->comms[0].get();
  }
  FG_ASSIGN_OR_RETURN(r->model_, load_model(o.model_dir, o, *r->backend_, tp0));
  if (r->tp_) {
    for (size_t i = 0; i < r->tp_->ranks.size(); ++i) {
      Ranks::Rank& rank = r->tp_->ranks[i];
      rank.backend->bind_thread();
      FG_ASSIGN_OR_RETURN(rank.model, load_model(o.model_dir, o, *rank.backend, {r->tp_->comms[i + 1].get()}));
    }
    r->backend_->bind_thread();
  }
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
    if (r->tp_)
      for (Ranks::Rank& rank : r->tp_->ranks) {
        rank.backend->bind_thread();
        FG_RETURN_IF_ERROR(rank.model->enable_decode_graphs(g));
      }
    r->backend_->bind_thread();
    if (r->draft_) {
      g.max_query_len = 1;  // the draft only ever decodes through graphs
      FG_RETURN_IF_ERROR(r->draft_->model_->enable_decode_graphs(g));
    }
  }
  if (r->draft_) r->draft_->max_model_len_ = r->max_model_len_;
  // On a GPU, the step workspace before the KV cache, which is sized from the memory left (a
  // prefill step of a mixture of experts needs tokens * top_k rows of expert buffers).
  if (o.max_step_tokens > 0 && r->backend_->device() != Device::kCpu) {
    r->model_->reserve_step_workspace(o.max_step_tokens, std::min(o.max_step_tokens, 256));
    if (r->tp_)
      for (Ranks::Rank& rank : r->tp_->ranks) {
        rank.backend->bind_thread();
        rank.model->reserve_step_workspace(o.max_step_tokens, std::min(o.max_step_tokens, 256));
      }
    r->backend_->bind_thread();
  }

  FG_ASSIGN_OR_RETURN(const DType kv_dtype, resolve_kv_cache_dtype(o.kv_cache_dtype, *r->backend_,
                                                                   r->model_->checkpoint_kv_scales().has_value()));
  // Every rank holds its own kv heads (local_config) in the same number of pages, of one dtype.
  const KvCacheShape shape = kv_shape(r->model_->local_config(), kv_dtype, o.page_size);
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
      if (r->draft_) per_page += kv_bytes_per_page(kv_shape(r->draft_->model_->config(), kv_dtype, o.page_size));
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
    const int64_t d = kv_bytes_per_page(kv_shape(r->draft_->model_->config(), kv_dtype, o.page_size));
    pages = int32_t(int64_t(pages) * t / (t + d));
    if (pages < 1) return invalid_argument("the KV memory cannot hold a page of both the model and the draft model");
  }
  // Never more pages than max_model_len tokens for every sequence of a big batch could use.
  const int64_t useful = int64_t(r->max_model_len_ / o.page_size + 1) * 1024;
  pages = int32_t(std::min<int64_t>(pages, useful));
  FG_ASSIGN_OR_RETURN(KvCache cache, r->model_->make_kv_cache(pages, o.page_size, kv_dtype));
  r->cache_.emplace(std::move(cache));
  r->kv_bytes_ = int64_t(pages) * kv_bytes_per_page(shape);
  if (r->draft_) {
    FG_ASSIGN_OR_RETURN(KvCache draft_cache, r->draft_->model_->make_kv_cache(pages, o.page_size, kv_dtype));
    r->draft_->cache_.emplace(std::move(draft_cache));
  }
  if (r->tp_) {
    for (Ranks::Rank& rank : r->tp_->ranks) {
      rank.backend->bind_thread();
      FG_ASSIGN_OR_RETURN(KvCache rank_cache, rank.model->make_kv_cache(pages, o.page_size, kv_dtype));
      rank.cache.emplace(std::move(rank_cache));
    }
    r->backend_->bind_thread();
    r->tp_->start();
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
