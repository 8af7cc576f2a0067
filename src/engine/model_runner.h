// ModelRunner: the StepRunner over the model layer. Owns the backend, the model and its paged KV
// cache (in the dtype --kv-cache-dtype resolves to; sized from --kv-cache-memory, else from
// --gpu-memory-fraction of the device's memory; on the CPU, of the host memory available, capped at
// what a few full-length sequences need: kvcache/kv_sizing.h). Each step's metadata is written by
// the engine straight into the model's pinned staging (Model::begin_step), which the model uploads
// with one copy; the forward returns the sampled rows' logits on the device.
//
// CUDA graphs (ModelRunnerOptions::cuda_graphs, on by default): on a backend that records graphs,
// decode-only steps of up to max_graph_batch sequences are padded to a batch bucket and replay a
// graph recorded on first use of that bucket (Model::enable_decode_graphs). Other steps, and every
// step on the CPU, run eagerly. The two give the same tokens (tests/parity/engine).
//
// Speculative decoding with a draft model (ModelRunnerOptions::draft_model_dir): the runner loads
// it on the same backend and sizes both KV caches together (equal page counts, so the draft never
// runs out of pages before the target); draft() is its StepRunner.
//
// Tensor parallelism (ModelRunnerOptions::tensor_parallel_size N > 1, model/tensor_parallel.h):
// N backends of the same kind (CPU: N CPU backends with the in-process communicator; CUDA: GPUs
// 0..N-1 with NCCL), rank r's shard of the model and its KV cache (its kv heads, the same page
// count) on backend r. Rank 0 is this object: the engine thread schedules, owns the prefix cache
// and writes each step once into rank 0's block; forward() broadcasts the step's shape and block
// to ranks 1..N-1 (Communicator::broadcast_host) and runs rank 0's shard, while each other rank
// runs its shard on its own thread with the same metadata. The collectives inside the forward
// keep the ranks in step; backend() and the logits are rank 0's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/step_runner.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace fg {

struct ModelRunnerOptions {
  std::string model_dir;
  std::string backend = "auto";  // cpu, cuda or auto
  bool dummy_weights = false;    // random weights from config.json alone
  bool batch_invariant = false;  // BackendOptions::batch_invariant (--batch-invariant)
  uint64_t dummy_seed = 0;
  // --quantization fp8: the checkpoint's float linear weights are quantized at load (model/weights.h,
  // WeightLoadOptions); the draft model's too. Dummy weights: FP8 where the backend computes on
  // FP8 weights (CUDA), refused elsewhere (model/dummy_weights.h).
  LoadQuantization quantization = LoadQuantization::kNone;
  int32_t page_size = 16;
  std::string kv_cache_dtype = "auto";                  // auto, bf16 or fp8 (--kv-cache-dtype; model/kv_cache.h);
                                                        // the draft model's cache gets the same dtype
  int64_t kv_cache_bytes = 0;                           // > 0: exactly this much KV memory (--kv-cache-memory)
  double gpu_memory_fraction = 0.9;                     // otherwise this share of device memory (--gpu-memory-fraction)
  int64_t activation_reserve_bytes = int64_t(1) << 30;  // kept out of the KV budget on a GPU
  int32_t max_model_len = 0;                            // 0: the config's max_position_embeddings
  bool cuda_graphs = true;                              // decode steps replay CUDA graphs (--no-cuda-graphs: false)
  int32_t max_graph_batch = 256;                        // largest decode batch sent through graphs (buckets up to it)
  int32_t graph_max_query_len = 1;                      // > 1: verification steps of up to this many tokens per
                                                        // sequence replay graphs too (1 + speculative k)
  int32_t max_step_tokens = 0;                          // > 0: on a GPU, the step workspace for this many new tokens
                                // (--max-batch-tokens) is allocated before the KV cache is sized
                                // from free memory
  std::string draft_model_dir;       // a draft model for speculative decoding (--draft-model), loaded on the same
                                     // backend (with dummy weights too under dummy_weights); its KV cache gets as
                                     // many pages as the target's, out of the same memory budget
  int32_t tensor_parallel_size = 1;  // ranks the model is split over (--tensor-parallel-size); 1: one backend
};

class ModelRunner final : public StepRunner {
 public:
  ~ModelRunner() override;
  // Errors name the model directory, the backend or the memory setting at fault.
  static Result<std::unique_ptr<ModelRunner>> create(const ModelRunnerOptions& options);

  Backend& backend() override { return *backend_; }
  int32_t vocab_size() const override { return int32_t(model_->config().vocab_size); }
  int32_t max_model_len() const override { return max_model_len_; }
  std::vector<int32_t> eos_token_ids() const override;
  int32_t kv_num_pages() const override { return cache_->num_pages(); }
  int32_t kv_page_size() const override { return cache_->page_size(); }
  int32_t kv_window() const override { return model_->config().every_layer_window(); }
  uint64_t kv_variant(int32_t prompt_len) const override {
    const RopeConfig& r = model_->config().rope;
    return r.type == RopeScaling::kLongRope && prompt_len > r.original_max_position ? 1 : 0;
  }
  StepWriter begin_step(const StepShape& shape) override;
  Result<Tensor> forward(const StepMetadata& step) override;
  // Decode steps that recorded their batch bucket's graph (rank 0's; the ranks record together).
  int64_t setup_steps() const override { return model_->decode_graph_stats().captures; }
  StepRunner* draft() override;

  const ModelConfig& config() const { return model_->config(); }
  Model& model() { return *model_; }
  int64_t kv_cache_bytes() const { return kv_bytes_; }
  DType kv_cache_dtype() const { return cache_->dtype(); }
  // The paged K/V tensors the runner's steps read and write (tests poison evicted pages in it).
  KvCache& kv_cache() { return *cache_; }
  // Ranks the model is split over (1 without tensor parallelism).
  int tensor_parallel_size() const;

 private:
  class DraftRunner;
  class Ranks;
  ModelRunner();

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;  // after backend_: destroyed first
  std::optional<KvCache> cache_;
  std::unique_ptr<DraftRunner> draft_;  // the draft model and its cache, on backend_
  int32_t max_model_len_ = 0;
  int64_t kv_bytes_ = 0;
  StepShape shape_;            // of the step begin_step handed out (sent to the other ranks)
  std::unique_ptr<Ranks> tp_;  // ranks 1..N-1 and every rank's communicator; declared last: its
                               // threads stop before anything they may touch goes
};

}  // namespace fg
