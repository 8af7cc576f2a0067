#include "cli/token_ids.h"

#include <climits>
#include <stdexcept>

namespace fg::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw std::runtime_error(flag + ": '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
    item.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '[' || ch == ']') {
      flush();
    } else {
      item.push_back(ch);
    }
  }
  flush();
  return ids;
}

}  // namespace fg::cli
