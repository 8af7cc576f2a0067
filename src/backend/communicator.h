// Communicator: the collectives tensor parallelism needs between the N ranks that each run one
// shard of a model (model/tensor_parallel.h), one rank per backend. Two implementations, one
// contract:
//  - make_local_communicators: N ranks as threads of this process over host memory (the CPU
//    backend). Exchange through shared memory with a fixed reduction order (rank 0 + rank 1 + ...
//    in f32, the same order on every rank), so results are reproducible and equal on every rank.
//  - make_nccl_communicators (CUDA builds): one NCCL communicator per GPU of this host
//    (ncclCommInitAll), calls enqueued on each backend's stream, so CUDA graphs record them; host
//    bytes and barriers between its threads go through the in-process exchange.
// Tensor collectives are ops on the rank's backend stream (asynchronous like any op; the CPU's are
// synchronous) and must be called by every rank in the same order with the same shapes.
// broadcast_host and barrier block the calling thread until every rank has joined.
// Never owns a backend; never allocates on the tensor paths once warmed (graph capture).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fg {

class Backend;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local" or "nccl"

  // x: contiguous, act dtype or f32, the same shape on every rank: x = sum over ranks, in place.
  virtual void all_reduce_sum(Tensor& x) = 0;
  // in: [n] contiguous; out: [size * n] contiguous, same dtype: rank r's `in` lands at
  // out[r * n, (r + 1) * n) on every rank.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // `bytes` host bytes from rank `root` to every other rank (in place at `data`). Blocks.
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  // Returns when every rank has called it (and the rank's queued collectives are done).
  virtual void barrier() = 0;
};

// N ranks in this process, as threads (rank i is used by one thread only). Host memory only.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(int n);

// One NCCL communicator per backend (rank i on backends[i], each a CUDA backend on its own GPU),
// or an error (not built with CUDA, not CUDA backends, NCCL failure, named).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& backends);

}  // namespace fg
