// The in-process communicator (communicator.h): N ranks as threads over host memory. Every
// collective is post pointers -> barrier -> read the others -> barrier, so no rank writes a
// buffer another rank may still be reading.
#include "backend/communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "backend/backend.h"

namespace fg {

#if !defined(FG_WITH_NCCL)
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& backends) {
  (void)backends;
  return unsupported(
      "tensor parallelism on CUDA needs NCCL: this flashgen was built without it (no CUDA, or no nccl.h / libnccl)");
}
#endif

namespace {

// What the ranks of one local group share.
struct LocalGroup {
  explicit LocalGroup(int n) : size(n), slots(size_t(n), nullptr) {}

  // Blocks until all `size` ranks have arrived (reusable: generations).
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen; });
  }

  const int size;
  std::vector<const void*> slots;  // each rank's posted pointer for the running collective
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  std::string name() const override { return "local"; }

  void all_reduce_sum(Tensor& x) override {
    FG_CHECK(x.device == Device::kCpu && x.dtype == DType::kF32 && x.is_contiguous(),
             "local all_reduce_sum: expected a contiguous f32 host tensor, got " + x.describe());
    const size_t n = size_t(x.numel());
    sum_.resize(n);
    post(x.data);
    // Every rank adds in rank order from 0.0f: the same bits on every rank.
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    for (int r = 0; r < size(); ++r) {
      const float* src = static_cast<const float*>(group_->slots[size_t(r)]);
      for (size_t i = 0; i < n; ++i) sum_[i] += src[i];
    }
    group_->wait();  // every rank has read every buffer
    std::memcpy(x.data, sum_.data(), n * sizeof(float));
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    FG_CHECK(in.device == Device::kCpu && out.device == Device::kCpu && in.dtype == out.dtype && in.is_contiguous() &&
                 out.is_contiguous() && out.numel() == in.numel() * size(),
             "local all_gather: expected contiguous host tensors in [n], out [size * n]: " + in.describe() + ", " +
                 out.describe());
    const size_t bytes = in.nbytes();
    post(in.data);
    for (int r = 0; r < size(); ++r)
      std::memcpy(static_cast<char*>(out.data) + size_t(r) * bytes, group_->slots[size_t(r)], bytes);
    group_->wait();
  }

  void broadcast_host(void* data, size_t bytes, int root) override {
    FG_CHECK(root >= 0 && root < size(),
             "broadcast_host: root " + std::to_string(root) + " of " + std::to_string(size()) + " ranks");
    post(data);
    if (rank_ != root && bytes > 0) std::memcpy(data, group_->slots[size_t(root)], bytes);
    group_->wait();
  }

  void barrier() override { group_->wait(); }

 private:
  // Publishes this rank's pointer and waits until every rank has published its own.
  void post(const void* p) {
    group_->slots[size_t(rank_)] = p;
    group_->wait();
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_communicators(int n) {
  FG_CHECK(n >= 1, "make_local_communicators: " + std::to_string(n) + " ranks");
  auto group = std::make_shared<LocalGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<LocalCommunicator>(group, r));
  return out;
}

}  // namespace fg
