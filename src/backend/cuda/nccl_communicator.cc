// The NCCL communicator (backend/communicator.h): one ncclComm per GPU of this host, made together
// by ncclCommInitAll, each driven by the thread of its rank. Tensor collectives are enqueued on
// the rank's backend stream, so a CUDA graph recorded on that stream replays them. Its ranks are
// threads of one process (ncclCommInitAll makes them so): host bytes (broadcast_host) and barriers
// go through the in-process communicator's shared memory. NVLink multicast (NVLS) is switched off
// (NCCL_NVLS_ENABLE=0 unless the caller set it): on shared multi-GPU hosts it can take the GPUs
// out of service, and flashgen's all-reduces are small enough not to need it.
#if defined(FG_WITH_NCCL)

#include <nccl.h>

#include <cstdlib>

#include "backend/communicator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

#define NCCL_CHECK(expr)                                                                          \
  do {                                                                                            \
    ncclResult_t fg_nccl_res_ = (expr);                                                           \
    if (fg_nccl_res_ != ncclSuccess) [[unlikely]]                                                 \
      ::fg::cuda::cuda_check_failed(#expr, ncclGetErrorString(fg_nccl_res_), __FILE__, __LINE__); \
  } while (0)

namespace fg {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    default: FG_CHECK(false, "NCCL collectives: unsupported dtype " + std::string(dtype_name(t))); return ncclFloat32;
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::unique_ptr<Communicator> host, cuda::CudaBackend& backend)
      : comm_(comm), host_(std::move(host)), backend_(backend) {}
  ~NcclCommunicator() override {
    backend_.bind_thread();
    (void)ncclCommDestroy(comm_);
  }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return "nccl"; }

  void all_reduce_sum(Tensor& x) override {
    FG_CHECK(x.device == Device::kCuda && x.is_contiguous(), "nccl all_reduce_sum: " + x.describe());
    NCCL_CHECK(ncclAllReduce(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype), ncclSum, comm_, backend_.stream()));
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    FG_CHECK(in.device == Device::kCuda && out.device == Device::kCuda && in.dtype == out.dtype && in.is_contiguous() &&
                 out.is_contiguous() && out.numel() == in.numel() * size(),
             "nccl all_gather: expected in [n], out [size * n]: " + in.describe() + ", " + out.describe());
    NCCL_CHECK(ncclAllGather(in.data, out.data, size_t(in.numel()), nccl_type(in.dtype), comm_, backend_.stream()));
  }

  // The ranks are threads of this process: host bytes need no device round trip.
  void broadcast_host(void* data, size_t bytes, int root) override { host_->broadcast_host(data, bytes, root); }

  void barrier() override {
    backend_.synchronize();  // this rank's queued collectives are done
    host_->barrier();
  }

 private:
  ncclComm_t comm_;
  std::unique_ptr<Communicator> host_;  // the in-process exchange, rank for rank
  cuda::CudaBackend& backend_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& backends) {
  const int n = int(backends.size());
  if (n < 1) return invalid_argument("NCCL: no backends");
  std::vector<int> devices;
  std::vector<cuda::CudaBackend*> cuda_backends;
  for (Backend* b : backends) {
    auto* c = dynamic_cast<cuda::CudaBackend*>(b);
    if (c == nullptr) return invalid_argument("NCCL communicators need CUDA backends, got " + b->name());
    devices.push_back(c->device_index());
    cuda_backends.push_back(c);
  }
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  const ncclResult_t res = ncclCommInitAll(comms.data(), n, devices.data());
  if (res != ncclSuccess)
    return Status(ErrorCode::kInternal, std::string("NCCL initialization over ") + std::to_string(n) +
                                            " GPUs failed: " + ncclGetErrorString(res));
  std::vector<std::unique_ptr<Communicator>> host = make_local_communicators(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(
        std::make_unique<NcclCommunicator>(comms[size_t(r)], std::move(host[size_t(r)]), *cuda_backends[size_t(r)]));
  return out;
}

}  // namespace fg

#endif  // FG_WITH_NCCL
