#!/usr/bin/env bash
# Installs everything flashgen needs to build and test on a Debian machine.
# Idempotent: packages already present are skipped by apt; safe to run on every CI pass.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev              # Beast / Asio (header-only)
  nlohmann-json3-dev        # JSON
  libpcre2-dev              # tokenizer pre-tokenizer regexes (Unicode properties)
  libicu-dev                # tokenizer Unicode normalization (NFC/NFKC) and character properties
  libgtest-dev libgmock-dev # tests
  libbenchmark-dev          # benchmarks
  libopenblas-dev           # CPU reference GEMM
  libcli11-dev              # command line
  libspdlog-dev libfmt-dev  # logging
  libxxhash-dev             # prefix-cache page hashes
  clang-format              # scripts/check-format.sh (CI)
  clang libclang-rt-14-dev  # the sanitizer build and libFuzzer targets: scripts/sanitize.sh, scripts/fuzz.sh (CI)
  python3 python3-pip python3-venv
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages used by the test suite only (numpy to read .npy files back, real API clients).
PY_PACKAGES=(numpy)
if [ -f "$(dirname "$0")/../requirements-test.txt" ]; then
  python3 -m pip install -q -r "$(dirname "$0")/../requirements-test.txt" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages -r "$(dirname "$0")/../requirements-test.txt"
fi
