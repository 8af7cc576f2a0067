// Minimal NumPy .npy (format 1.0/2.0) reading and writing for logits dumps and test fixtures:
// little-endian float32 / int32 / int64, C order. Errors name the file and the problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg {

struct NpyArray {
  std::vector<int64_t> shape;
  std::string descr;          // "<f4", "<i4" or "<i8"
  std::vector<float> f32;     // filled for "<f4"
  std::vector<int64_t> ints;  // filled for "<i4" / "<i8"
};

// data: [rows, cols] f32 row-major.
Status write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols);

Result<NpyArray> read_npy(const std::string& path);

}  // namespace fg
