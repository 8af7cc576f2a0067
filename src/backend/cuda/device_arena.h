// DeviceArena: the one pool of device memory of a CUDA backend. Memory is taken from the driver
// in large slabs (cudaMalloc) and carved by a first-fit allocator with a free list that merges
// neighbours, so buffers freed and re-allocated on the step path never reach cudaMalloc once the
// model, the KV cache and the activation buffers are in place.
//
// Freed memory may be handed out again at once: every kernel runs on the backend's one stream,
// so a later user's work is ordered after the earlier user's.
// Buffers keep the arena alive (shared ownership), so they may outlive the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace fg::cuda {

class DeviceArena : public std::enable_shared_from_this<DeviceArena> {
 public:
  // slab_bytes: the size of each cudaMalloc (a request larger than that gets a slab of its own).
  DeviceArena(int device, size_t slab_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A device buffer of `bytes` (256-byte aligned); its deleter returns the memory to the arena.
  Buffer alloc(size_t bytes);

  static constexpr size_t kAlignment = 256;

 private:
  struct Slab {
    char* base = nullptr;
    size_t bytes = 0;
    std::map<size_t, size_t> free_blocks;  // offset -> size, non-adjacent (merged on free)
  };
  void free_block(void* ptr);
  bool carve(Slab& slab, size_t bytes, size_t* offset);

  int device_;
  size_t slab_bytes_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slab>> slabs_;
  std::map<char*, std::pair<Slab*, size_t>> live_;  // pointer -> (slab, size)
  size_t in_use_ = 0;
};

}  // namespace fg::cuda
