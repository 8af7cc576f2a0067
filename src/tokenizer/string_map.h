// Hash maps keyed by strings that can be probed with a std::string_view without building a
// std::string (C++20 heterogeneous lookup), hashed with XXH3.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fg::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return static_cast<size_t>(XXH3_64bits(s.data(), s.size())); }
};

struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, StringEq>;

}  // namespace fg::tok
