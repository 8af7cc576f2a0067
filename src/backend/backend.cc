// Backend selection by name, and attention plans with their workspace from the backend itself.
// The CUDA factory lives in backend/cuda when it is built; otherwise
// asking for cuda is a clear error rather than a silent fallback.
#include "backend/backend.h"

namespace fg {

#if !defined(FG_WITH_CUDA)
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index, const BackendOptions& options) {
  (void)device_index;
  (void)options;
  return unsupported("this flashgen was built without the CUDA backend (nvcc was not found at build time)");
}
#endif

void Backend::quantize_rows_fp8(const Tensor&, Tensor&, Tensor&) {
  FG_CHECK(false, name() + " has no FP8 GEMMs (supports_fp8_gemm() is false)");
}

void Backend::gemm_fp8(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  FG_CHECK(false, name() + " has no FP8 GEMMs (supports_fp8_gemm() is false)");
}

std::unique_ptr<AttentionPlan> make_attention_plan(Backend& backend, const AttentionPlanShape& shape) {
  return backend.make_attention_plan(shape, backend.alloc(backend.attention_workspace_bytes(shape)));
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend(options);
  if (name == "cuda") return make_cuda_backend(0, options);
  if (name == "auto") {
    auto cuda = make_cuda_backend(0, options);
    if (cuda.is_ok()) return std::move(cuda).value();
    return make_cpu_backend(options);
  }
  return invalid_argument("unknown backend '" + name + "' (expected cpu, cuda or auto)");
}

}  // namespace fg
