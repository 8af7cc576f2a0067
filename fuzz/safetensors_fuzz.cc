// Fuzz target: safetensors files and the weight loader behind them. The input is a config.json,
// a line "#--safetensors--#", then a safetensors file image (8-byte header length, JSON header,
// data). The image is validated as SafetensorsFile::open validates a mapped file (lying sizes,
// offsets outside the data, overlapping tensors, unknown dtypes, huge shapes); when it and the
// config are accepted and small, the weights are loaded on the CPU backend (shape and dtype checks
// against the config, NaN/Inf checks, fusion). Checks: every accepted tensor lies inside the image,
// its byte size matches dtype x shape, accepted tensors do not overlap.
// Seeds: fuzz/corpus/safetensors (tiny Llama/Qwen checkpoints written by fuzz/make_seeds.py, and
// broken variants of them).
#include <algorithm>
#include <map>
#include <vector>

#include "fuzz_util.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model_files.h"

namespace {

// The parsed tensors under their own (Hugging Face) names, as SafetensorsWeightSource serves a
// checkpoint folder.
class MapSource final : public fg::WeightSource {
 public:
  explicit MapSource(const std::map<std::string, fg::SafetensorsTensor>& m) : m_(m) {}
  fg::Result<fg::WeightTensor> find(const std::string& name) const override {
    auto it = m_.find(name);
    if (it == m_.end()) return fg::not_found("image: missing tensor '" + name + "'");
    const fg::SafetensorsTensor& t = it->second;
    fg::WeightTensor w;
    w.name = t.name;
    w.file = t.file;
    w.dtype_name = t.dtype_name;
    w.shape = t.shape;
    if (t.dtype && (*t.dtype == fg::DType::kF32 || *t.dtype == fg::DType::kF16 || *t.dtype == fg::DType::kBF16))
      w.dtype = *t.dtype;
    w.handle = &t;
    return w;
  }
  const void* read(const fg::WeightTensor& t, std::vector<uint8_t>&) const override {
    return static_cast<const fg::SafetensorsTensor*>(t.handle)->data;
  }
  std::string loadable_types() const override { return "F32, F16 or BF16"; }
  std::string config_name() const override { return "config.json"; }

 private:
  const std::map<std::string, fg::SafetensorsTensor>& m_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fg::fuzz::FuzzInput in(data, size);
  const std::string config_text(in.until("\n#--safetensors--#\n"));
  const std::string_view image_view = in.rest();
  // A copy of exactly the image's bytes, so a read past its end is an AddressSanitizer report.
  std::vector<uint8_t> image(image_view.begin(), image_view.end());
  auto tensors = fg::parse_safetensors_image(image.data(), image.size(), "model.safetensors");
  if (!tensors.is_ok()) {
    FG_FUZZ_CHECK(tensors.status().message().rfind("model.safetensors: ", 0) == 0);
    return 0;
  }
  std::vector<std::pair<const uint8_t*, size_t>> spans;
  for (const auto& [name, t] : *tensors) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    FG_FUZZ_CHECK(p >= image.data() && p + t.nbytes <= image.data() + image.size());
    if (t.dtype) FG_FUZZ_CHECK(uint64_t(t.numel()) * fg::dtype_size(*t.dtype) == t.nbytes);
    if (t.nbytes > 0) spans.push_back({p, t.nbytes});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) FG_FUZZ_CHECK(spans[i - 1].first + spans[i - 1].second <= spans[i].first);
  auto config = fg::parse_model_config(config_text, "config.json");
  if (!config.is_ok()) return 0;
  fg::fuzz::check_config(*config);
  fg::fuzz::try_load(*config, MapSource(*tensors));
  return 0;
}
