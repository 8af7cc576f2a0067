// .npy reading and writing (see npy.h).
#include "model/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "model/config.h"

namespace fg {

Status write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  // magic(6) + version(2) + header length(2) + header, padded with spaces to a multiple of 64, ending in \n.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status(ErrorCode::kIo, path + ": cannot open for writing");
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, 8);
  uint16_t len = uint16_t(header.size());
  char len_bytes[2] = {char(len & 0xff), char(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size_t(rows * cols) * sizeof(float)));
  if (!out) return Status(ErrorCode::kIo, path + ": write failed");
  return Status::ok();
}

Result<NpyArray> read_npy(const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::string bytes, read_text_file(path));
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return invalid_argument(path + ": not a .npy file");
  int major = uint8_t(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return invalid_argument(path + ": truncated .npy header");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[size_t(8 + i)]);
    header_start = 12;
  } else {
    return invalid_argument(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) return invalid_argument(path + ": truncated .npy header");
  std::string header = bytes.substr(header_start, header_len);
  NpyArray a;
  auto field = [&](const std::string& key) -> std::string {
    size_t p = header.find("'" + key + "'");
    if (p == std::string::npos) return {};
    p = header.find(':', p);
    return p == std::string::npos ? std::string() : header.substr(p + 1);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos) return invalid_argument(path + ": .npy header has no descr");
  a.descr = descr.substr(q1 + 1, q2 - q1 - 1);
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    return invalid_argument(path + ": Fortran-order .npy arrays are not supported");
  std::string shape = field("shape");
  size_t p1 = shape.find('('), p2 = shape.find(')');
  if (p1 == std::string::npos || p2 == std::string::npos) return invalid_argument(path + ": .npy header has no shape");
  std::stringstream ss(shape.substr(p1 + 1, p2 - p1 - 1));
  std::string item;
  int64_t numel = 1;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    a.shape.push_back(std::stoll(item));
    numel *= a.shape.back();
  }
  size_t esize = a.descr == "<f4" || a.descr == "<i4" ? 4 : a.descr == "<i8" ? 8 : 0;
  if (esize == 0) return invalid_argument(path + ": unsupported .npy dtype '" + a.descr + "'");
  size_t data_start = header_start + header_len;
  if (bytes.size() - data_start != size_t(numel) * esize)
    return invalid_argument(path + ": .npy data size does not match its shape");
  const char* d = bytes.data() + data_start;
  if (a.descr == "<f4") {
    a.f32.resize(static_cast<size_t>(numel));
    std::memcpy(a.f32.data(), d, size_t(numel) * 4);
  } else if (a.descr == "<i4") {
    std::vector<int32_t> v(static_cast<size_t>(numel));
    std::memcpy(v.data(), d, size_t(numel) * 4);
    a.ints.assign(v.begin(), v.end());
  } else {
    a.ints.resize(size_t(numel));
    std::memcpy(a.ints.data(), d, size_t(numel) * 8);
  }
  return a;
}

}  // namespace fg
