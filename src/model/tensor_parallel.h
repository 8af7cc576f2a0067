// Tensor parallelism: how one model is split over N ranks (one backend each), Megatron-style.
//  - attention: q heads split evenly (rank r holds q heads [r * Hq/N, (r+1) * Hq/N)); kv heads
//    split the same way when N divides them, or, when there are fewer kv heads than ranks (N a
//    multiple of them), each rank holds the one kv head its q heads read (replicated over N/Hkv
//    ranks). q/k/v are column-parallel (rows of the [out, in] weights; fused qkv_proj sliced per
//    part), o_proj row-parallel (its columns), followed by an all-reduce of the hidden state.
//  - dense MLP: gate/up column-parallel (intermediate rows, fused gate_up_proj sliced per part),
//    down row-parallel, then an all-reduce. Biases of column-parallel layers are sliced; those
//    of row-parallel layers are held by rank 0 alone, so the all-reduce adds them once.
//  - vocabulary: the embedding table and the LM head split by rows into ceil(V/N)-row shards
//    (the last shards zero-padded). Each rank looks up the ids of its shard (zeros elsewhere)
//    and the all-reduce assembles the rows; each rank computes its shard's logits, an all-gather
//    and a strided copy put the full [rows, V] logits on every rank.
//  - norms, RoPE tables and q/k norms are replicated.
// Refused by name: heads or intermediate sizes N does not divide, mixture-of-experts layers.
// Size 1 is the whole model (the same code path). This file decides the split; the loaders
// (weights.cc, dummy_weights.cc) read only the rank's slices and Model runs the local shapes.
#pragma once

#include <cstdint>

#include "backend/communicator.h"
#include "model/config.h"

namespace fg {

// One rank's part of the model.
struct TpShard {
  int rank = 0;
  int size = 1;
  int q_heads = 0, q_head0 = 0;    // local q heads and the global index of the first
  int kv_heads = 0, kv_head0 = 0;  // local kv heads (1 when replicated) and the first one's index
  int64_t inter = 0, inter0 = 0;   // local intermediate rows and the first one's index
  int64_t vocab_rows = 0;          // rows of the local embedding / LM-head shard: ceil(V / N)
  int64_t vocab0 = 0;              // the first token id of the shard: rank * vocab_rows
  int64_t vocab_valid = 0;         // rows of the shard that are real token ids (the rest is padding)
};

// The split of `config` for rank `rank` of `size`. Errors (InvalidArgument / Unsupported) name the
// model and the dimension N does not divide, or the feature that cannot be split.
Result<TpShard> make_tp_shard(const ModelConfig& config, int rank, int size);

// `config` with the rank's local geometry: num_q_heads, num_kv_heads, intermediate_size and
// vocab_size (= vocab_rows) of the shard; everything else unchanged.
ModelConfig shard_config(const ModelConfig& config, const TpShard& shard);

// How Model::load places a model: rank `comm->rank()` of `comm->size()`. comm == nullptr: the whole
// model on one backend with no collectives (the plain path).
struct TensorParallel {
  Communicator* comm = nullptr;
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

}  // namespace fg
