#!/usr/bin/env bash
# Configure and build flashgen into ./build (Release; CUDA backend when nvcc is found).
# Extra arguments go to cmake's configure step, e.g. -DFG_ASAN=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DFG_WERROR=${FG_WERROR:-OFF} "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
