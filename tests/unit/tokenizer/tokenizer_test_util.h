// Helpers shared by the tokenizer tests: where the reference tokenizers and llama.cpp vocab tests
// are (FG_TEST_FIXTURES_DIR: tests/fixtures/*.tar.xz extracted into the build tree), cached
// loading of the reference tokenizers, and decoding of the inputs stored in
// tests/fixtures/tokenizer/*.json.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace fg::test {

inline std::string reference_tokenizers_dir() {
  return std::string(FG_TEST_FIXTURES_DIR) + "/tokenizers";
}
inline std::string vocab_tests_dir() {
  return std::string(FG_TEST_FIXTURES_DIR) + "/vocab_tests";
}
inline std::string fixture_dir() {
  return std::string(FG_SOURCE_DIR) + "/tests/fixtures/tokenizer";
}

// Loads (once per process) one of the reference tokenizers (tests/fixtures/SOURCES.md); fails the
// test when it is missing or does not load.
inline const Tokenizer* reference_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto r = Tokenizer::load(reference_tokenizers_dir() + "/" + name);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return nullptr;
  return cache.emplace(name, std::move(r).value()).first->second.get();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The input bytes of a fixture case: "input" (text), "input_hex" (raw bytes) or "input_runs"
// ([[unit, count], ...]).
inline std::string case_input(const nlohmann::json& c) {
  if (c.contains("input")) return c["input"].get<std::string>();
  if (c.contains("input_hex")) return from_hex(c["input_hex"].get<std::string>());
  std::string out;
  for (const auto& run : c["input_runs"])
    for (int64_t k = 0; k < run[1].get<int64_t>(); ++k) out += run[0].get<std::string>();
  return out;
}

inline std::string printable(const std::string& s, size_t max = 80) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7F)
      out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else
      out.push_back(static_cast<char>(c));
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace fg::test
