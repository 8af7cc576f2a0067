#!/usr/bin/env bash
# The sanitizer build: flashgen's CPU code with AddressSanitizer + UndefinedBehaviorSanitizer (any
# report stops the process) into build-san, with clang, then the unit and e2e tests in it.
#
# The same build carries libFuzzer's coverage instrumentation (FG_FUZZ=ON), so scripts/fuzz.sh can
# run its fuzz targets without compiling flashgen a third time:
#   scripts/sanitize.sh && FUZZ_BUILD_DIR=build-san FUZZ_WITH_TESTS=ON scripts/fuzz.sh
# (what .ci/run does). Extra arguments go to ctest, e.g. -R Jinja.
#
# Optimized at -O1 with line tables: fast enough to build on two cores, readable stack traces.
# Only the unit and e2e tests are built (FG_TEST_LABELS): the parity tests do not run here.
# LeakSanitizer is on: a test process that leaks fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SAN_BUILD_DIR:-build-san}
command -v clang++ >/dev/null || { echo "sanitize: clang++ is not installed (scripts/install-deps.sh)" >&2; exit 1; }
t0=$SECONDS
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFG_FUZZ=ON -DFG_ENABLE_CUDA=OFF -DFG_BUILD_TESTS=ON \
  -DFG_BUILD_BENCH=OFF -DFG_WERROR=OFF -DFG_TEST_LABELS="unit;e2e" >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}"
echo "sanitize: built in $((SECONDS - t0)) s"
t1=$SECONDS
# OpenBLAS is not instrumented; its threads' stacks are not ours to check.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Freed memory waits in ASan's quarantine (256 MiB by default) before reuse, so a server's resident
# memory grows by up to that much under load without any leak: the soak's bound (64 MiB) is
# widened here; LeakSanitizer still checks leaks.
export FG_SOAK_RSS_GROWTH_MIB=${FG_SOAK_RSS_GROWTH_MIB:-512}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0}
ctest --test-dir "$BUILD" -L 'unit|e2e' --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
echo "sanitize: tests in $((SECONDS - t1)) s, total $((SECONDS - t0)) s"
