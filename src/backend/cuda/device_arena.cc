// DeviceArena (device_arena.h): slabs from cudaMalloc, first-fit carving, merging free list.
#include "backend/cuda/device_arena.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace fg::cuda {

namespace {
size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}
}  // namespace

DeviceArena::DeviceArena(int device, size_t slab_bytes)
    : device_(device), slab_bytes_(round_up(slab_bytes, kAlignment)) {}

DeviceArena::~DeviceArena() {
  // At process exit the runtime may already be unloading; a failing cudaFree then is harmless.
  for (auto& slab : slabs_) (void)cudaFree(slab->base);
}

bool DeviceArena::carve(Slab& slab, size_t bytes, size_t* offset) {
  for (auto it = slab.free_blocks.begin(); it != slab.free_blocks.end(); ++it) {
    if (it->second < bytes) continue;
    *offset = it->first;
    size_t rest = it->second - bytes;
    size_t rest_offset = it->first + bytes;
    slab.free_blocks.erase(it);
    if (rest > 0) slab.free_blocks.emplace(rest_offset, rest);
    return true;
  }
  return false;
}

Buffer DeviceArena::alloc(size_t bytes) {
  size_t need = round_up(bytes == 0 ? 1 : bytes, kAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  Slab* slab = nullptr;
  size_t offset = 0;
  for (auto& s : slabs_) {
    if (carve(*s, need, &offset)) {
      slab = s.get();
      break;
    }
  }
  if (slab == nullptr) {
    auto fresh = std::make_unique<Slab>();
    fresh->bytes = need > slab_bytes_ ? need : slab_bytes_;
    int previous = 0;
    CUDA_CHECK(cudaGetDevice(&previous));
    CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&fresh->base, fresh->bytes);
    CUDA_CHECK(cudaSetDevice(previous));
    FG_CHECK(err == cudaSuccess, "device arena: cudaMalloc of " + std::to_string(fresh->bytes) + " bytes failed (" +
                                     cudaGetErrorString(err) + "); " + std::to_string(in_use_) +
                                     " bytes in use. Lower the KV cache size or the batch limits.");
    fresh->free_blocks.emplace(0, fresh->bytes);
    slab = fresh.get();
    slabs_.push_back(std::move(fresh));
    FG_CHECK(carve(*slab, need, &offset));
  }
  char* ptr = slab->base + offset;
  live_.emplace(ptr, std::make_pair(slab, need));
  in_use_ += need;
  std::shared_ptr<DeviceArena> keep = shared_from_this();
  return Buffer(ptr, bytes, Device::kCuda, [keep](void* p) { keep->free_block(p); });
}

void DeviceArena::free_block(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(static_cast<char*>(ptr));
  FG_CHECK(it != live_.end(), "device arena: freeing a pointer it did not hand out");
  Slab* slab = it->second.first;
  size_t offset = size_t(static_cast<char*>(ptr) - slab->base);
  size_t size = it->second.second;
  in_use_ -= size;
  live_.erase(it);
  auto next = slab->free_blocks.lower_bound(offset);
  if (next != slab->free_blocks.end() && offset + size == next->first) {  // merge with the next block
    size += next->second;
    next = slab->free_blocks.erase(next);
  }
  if (next != slab->free_blocks.begin()) {  // merge with the previous block
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      return;
    }
  }
  slab->free_blocks.emplace(offset, size);
}

}  // namespace fg::cuda
