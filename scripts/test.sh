#!/usr/bin/env bash
# Build and run every test (unit, parity, e2e). GPU tests skip with a message when no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/build.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
