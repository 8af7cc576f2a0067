// Helpers the fuzz targets share: reading a fuzzer's input as a few choices followed by payloads,
// the fixture folder, and a quiet logger.
//
// Every target defines LLVMFuzzerTestOneInput (and may define LLVMFuzzerInitialize). With
// FG_FUZZ=ON (clang) they link libFuzzer and fuzz; in every other build they link replay_main.cc,
// which runs the committed corpus once as a regression test (ctest label `unit`).
// A target must never write outside its own memory, touch the network or depend on a GPU.
#pragma once

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#define FG_FUZZ_CHECK(cond)                                                               \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace fg::fuzz {

// Splits an input into leading choice bytes and payloads separated by a marker.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : s_(reinterpret_cast<const char*>(data), size) {}

  // The next byte (0 once the input is used up).
  uint8_t byte() {
    if (s_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(s_[0]);
    s_.remove_prefix(1);
    return b;
  }
  // The bytes up to the next `separator` (or the rest), consuming the separator.
  std::string_view until(std::string_view separator) {
    const size_t p = s_.find(separator);
    std::string_view out = s_.substr(0, p);
    s_.remove_prefix(p == std::string_view::npos ? s_.size() : p + separator.size());
    return out;
  }
  std::string_view rest() {
    std::string_view out = s_;
    s_ = {};
    return out;
  }
  std::string_view peek_rest() const { return s_; }
  bool empty() const { return s_.empty(); }

 private:
  std::string_view s_;
};

// The extracted third-party fixtures (real tokenizers, chat templates; tests/CMakeLists.txt).
inline std::string fixtures_dir() {
  if (const char* env = std::getenv("FG_TEST_FIXTURES_DIR")) return env;
  return FG_TEST_FIXTURES_DIR;
}

inline std::string source_dir() {
  return FG_SOURCE_DIR;
}

// Targets log nothing: a fuzzer runs millions of inputs, and error paths are the interesting ones.
inline void quiet_logs() {
  spdlog::set_level(spdlog::level::off);
}

}  // namespace fg::fuzz
