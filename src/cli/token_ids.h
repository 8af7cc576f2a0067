// Parsing token-id lists given on the command line ("1,2,3", "1 2 3" or "[1, 2, 3]"), shared by
// every command that takes ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fg::cli {

// Throws std::runtime_error("<flag>: '<item>' is not a token id") on anything but non-negative
// 32-bit integers separated by commas, white space or brackets. An empty list is returned as is.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag);

}  // namespace fg::cli
