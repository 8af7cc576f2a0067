// Running the `flashgen` binary from a test: arguments, optional stdin, captured stdout, stderr
// and exit status. The binary is the build tree's (FG_BINARY_DIR); tests skip when it is missing.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fg::test {

struct CliResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string flashgen_binary() {
  return std::string(FG_BINARY_DIR) + "/flashgen";
}

// Runs `flashgen <args>` (args are passed to the shell as written) with `input` on stdin; the
// files it needs live in `tmp`.
inline CliResult run_flashgen(const std::string& args, const std::filesystem::path& tmp,
                              const std::string& input = "") {
  const std::filesystem::path in = tmp / "stdin.txt", out = tmp / "stdout.txt", err = tmp / "stderr.txt";
  std::ofstream(in, std::ios::binary | std::ios::trunc) << input;
  const std::string cmd =
      flashgen_binary() + " " + args + " <" + in.string() + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  CliResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp_file(out);
  r.err = slurp_file(err);
  return r;
}

// A string as one shell word (single quotes).
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace fg::test
