#!/usr/bin/env bash
# Builds flashgen's fuzz targets (fuzz/, docs/reliability.md) with clang, libFuzzer, AddressSanitizer
# and UndefinedBehaviorSanitizer into build-fuzz, then for each target:
#   1. regression: runs its committed corpus (fuzz/corpus/<t>) and crash reproducers
#      (fuzz/regressions/<t>) once; any crash fails the script;
#   2. fuzzing: FUZZ_SECONDS of libFuzzer starting from that corpus (0 skips this step).
# Prints one line per target (corpus inputs, executions, inputs that added coverage, crashes) and
# writes the same table to build-fuzz/fuzz-summary.txt.
#
#   scripts/fuzz.sh                      all targets, 30 s each (what CI runs)
#   FUZZ_SECONDS=900 scripts/fuzz.sh     a longer run
#   scripts/fuzz.sh jinja gguf           only these targets
#   FUZZ_MERGE=1 scripts/fuzz.sh         also merge what the run found (minimized) into fuzz/corpus/<t>
#   FUZZ_SEED=1 scripts/fuzz.sh          libFuzzer's seed (default 0: a new one each run); CI fixes it so
#                                        a submission's fuzzing explores the same inputs each time
# FUZZ_JOBS targets run side by side (default: the number of cores); each fuzzer uses one core.
# A crash leaves its input in build-fuzz/crashes/<t>/: add it to fuzz/regressions/<t>/ and a unit
# test, then fix the bug.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-30}
JOBS=${FUZZ_JOBS:-$(nproc)}
ALL_TARGETS="http_request api_request tokenizer tokenizer_json jinja chat_template model_config safetensors gguf grammar"
TARGETS=${*:-$ALL_TARGETS}

command -v clang++ >/dev/null || { echo "fuzz: clang++ is not installed (scripts/install-deps.sh)" >&2; exit 1; }
t0=$SECONDS
# The same settings as scripts/sanitize.sh, so FUZZ_BUILD_DIR=build-san FUZZ_WITH_TESTS=ON reuses
# its build as it is.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFG_FUZZ=ON -DFG_ENABLE_CUDA=OFF \
  -DFG_BUILD_TESTS=${FUZZ_WITH_TESTS:-OFF} -DFG_BUILD_BENCH=OFF -DFG_WERROR=OFF -DFG_TEST_LABELS="unit;e2e" >/dev/null
# shellcheck disable=SC2046
cmake --build "$BUILD" -j "${BUILD_JOBS:-$(nproc)}" --target $(for t in $TARGETS; do printf '%s_fuzz ' "$t"; done)
echo "fuzz: built in $((SECONDS - t0)) s"

dict_for() {
  case "$1" in
    http_request) echo "$ROOT/fuzz/dict/http.dict" ;;
    jinja) echo "$ROOT/fuzz/dict/jinja.dict" ;;
    api_request | chat_template | model_config | tokenizer_json | safetensors | grammar) echo "$ROOT/fuzz/dict/json.dict" ;;
    *) echo "" ;;
  esac
}

# One target: regression, then fuzzing. Writes its summary line to $BUILD/logs/<t>.summary.
run_target() {
  local t=$1 exe="$ROOT/$BUILD/fuzz/${1}_fuzz" logs="$ROOT/$BUILD/logs"
  local seeds="$ROOT/fuzz/corpus/$t" regress="$ROOT/fuzz/regressions/$t" work="$ROOT/$BUILD/corpus/$t"
  local crashes="$ROOT/$BUILD/crashes/$t/" dict
  dict=$(dict_for "$t")
  mkdir -p "$logs" "$work" "$crashes"
  local inputs=("$seeds")
  [ -d "$regress" ] && inputs+=("$regress")
  local n_corpus
  n_corpus=$(find "${inputs[@]}" -type f | wc -l)
  local opts=(-timeout=20 -rss_limit_mb=2560 -malloc_limit_mb=2048 -print_final_stats=1 "-seed=${FUZZ_SEED:-0}"
              "-artifact_prefix=$crashes")
  [ -n "$dict" ] && opts+=("-dict=$dict")
  local status=ok execs=0 new=0 t1=$SECONDS
  if ! "$exe" "${opts[@]}" -runs=0 "${inputs[@]}" >"$logs/$t.regression.log" 2>&1; then
    status="REGRESSION-FAILED"
  elif [ "$SECONDS_PER_TARGET" -gt 0 ]; then
    # New inputs go to the first folder (build-fuzz/corpus/<t>), never into the repository.
    if ! "$exe" "${opts[@]}" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 "$work" "${inputs[@]}" \
      >"$logs/$t.fuzz.log" 2>&1; then
      status="CRASH"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.fuzz.log" | tail -1)
    new=$(sed -n 's/^stat::new_units_added: *//p' "$logs/$t.fuzz.log" | tail -1)
    if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$status" = ok ]; then
      "$exe" -merge=1 -timeout=20 -rss_limit_mb=2560 -max_len=65536 "$seeds" "$work" >"$logs/$t.merge.log" 2>&1 ||
        status="MERGE-FAILED"
    fi
  fi
  printf '%-15s %-18s corpus %5s  execs %10s  new %5s  crashes %s  (%ss)\n' "$t" "$status" "$n_corpus" \
    "${execs:-0}" "${new:-0}" "$(find "$crashes" -type f | wc -l)" "$((SECONDS - t1))" >"$logs/$t.summary"
}
export -f run_target dict_for
export ROOT BUILD SECONDS_PER_TARGET

# Inputs that crashed an earlier run stay in crashes.prev/ until the next run.
rm -rf "$BUILD/logs" "$BUILD/crashes.prev"
[ -d "$BUILD/crashes" ] && mv "$BUILD/crashes" "$BUILD/crashes.prev"
printf '%s\n' $TARGETS | xargs -P "$JOBS" -I{} bash -c 'run_target {}'
summary="$BUILD/fuzz-summary.txt"
{
  echo "fuzz: $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
       "${SECONDS_PER_TARGET}s per target, $JOBS at a time"
  for t in $TARGETS; do cat "$BUILD/logs/$t.summary"; done
} | tee "$summary"
echo "fuzz: total $((SECONDS - t0)) s"
if grep -qvE '^fuzz:| ok ' "$summary"; then
  echo "fuzz: FAILED. Logs in $BUILD/logs/, crashing inputs in $BUILD/crashes/<target>/" >&2
  for t in $TARGETS; do
    if ! grep -q " ok " "$BUILD/logs/$t.summary"; then
      tail -40 "$BUILD/logs/$t.fuzz.log" 2>/dev/null || tail -40 "$BUILD/logs/$t.regression.log"
    fi
  done
  exit 1
fi
