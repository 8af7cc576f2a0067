#!/usr/bin/env bash
# GPU test runner: runs every GPU test of flashgen on a machine with an NVIDIA GPU and prints a
# summary table. Two steps, so the binaries can be built on a machine without a GPU and carried:
#
#   tools/gpu_check.sh pack [BUILD_DIR]   (here) build the GPU test targets into BUILD_DIR
#                                          (default build-gpu, sm_90a) and copy them, stripped,
#                                          into .device/bin, plus the few non-CUDA shared
#                                          libraries they need into .device/lib (a fallback)
#   tools/gpu_check.sh run [BIN_DIR]      (there) run them (default .device/bin, else build-gpu
#                                          from a `pack` done there); logs and gtest XML go to
#                                          $OUT (when set) or gpu-check-out/
#
# What runs: the backend parity binaries (every CUDA op and the attention sweep against the CPU
# reference), batch-invariant mode (32 requests alone vs inside 256, bitwise) and, when built, the
# model parity tests with FG_TEST_BACKEND=cuda in the environment. A test binary that crashes is reported and the others still run.
# It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=${1:-run}

read -r -a GPU_TARGETS <<<"${FG_GPU_TARGETS:-backend_ops_parity backend_attention_parity backend_family_parity model_parity_tests batch_invariance_tests tensor_parallel_tests}"

pack() {
  local build=${1:-build-gpu}
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null; then
    [ -f "$build/build.ninja" ] || exit 1
    echo "configure failed; building with the existing $build" >&2
  fi
  local targets=()
  for t in "${GPU_TARGETS[@]}"; do
    if cmake --build "$build" --target help | grep -q "^$t:"; then targets+=("$t"); fi
  done
  cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-2}" || exit 1
  mkdir -p .device/bin .device/lib
  for t in "${targets[@]}"; do
    local f
    f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] && cp "$f" .device/bin/ && strip .device/bin/"$t"
  done
  # Libraries a bare CUDA image may lack (OpenBLAS's Fortran runtime, Debian's ICU); used only when
  # the loader reports them missing there.
  for lib in libgfortran.so.5 libquadmath.so.0 libicuuc.so.72 libicudata.so.72; do
    local p
    p=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" .device/lib/
  done
  du -sh .device
}

run_all() {
  local bin=${1:-}
  if [ -z "$bin" ]; then
    if [ -d .device/bin ]; then bin=.device/bin; else bin=build-gpu; fi
  fi
  local out=${OUT:-$ROOT/gpu-check-out}
  mkdir -p "$out"
  export NCCL_NVLS_ENABLE=0
  nvidia-smi -L 2>&1 | head -4
  # Model fixtures are found through the source path compiled into the binaries: every such path
  # (binaries built in another checkout or worktree carry theirs; `gpu_suite.sh pack` also writes
  # it to .device/source_dir, since a path joined at run time appears in no binary whole) points
  # at this checkout.
  local src_dir
  while read -r src_dir; do
    if [ -n "$src_dir" ] && [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$ROOT" "$src_dir"; fi
  done < <({ cat "$bin"/* 2>/dev/null | grep -a -o -E '/[[:alnum:]_./-]*/tests/fixtures' | sed 's|/tests/fixtures.*||'
             cat "$bin/../source_dir" 2>/dev/null; } | sort -u)

  local cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && cuda_libs="$cuda_libs:$d"; done
  local rows=() failed=0
  for exe in "$bin"/*; do
    [ -x "$exe" ] && [ -f "$exe" ] || continue
    local name
    name=$(basename "$exe")
    # Missing shared libraries: first the CUDA toolkit's, then the carried fallbacks, then any
    # copy of cuBLASLt found on the machine (e.g. inside a Python wheel).
    local ld="${LD_LIBRARY_PATH:-}$cuda_libs"
    if LD_LIBRARY_PATH=$ld ldd "$exe" | grep -q "not found"; then
      ld="$ld:$ROOT/.device/lib"
      if LD_LIBRARY_PATH=$ld ldd "$exe" | grep -q "libcublasLt.so.* not found"; then
        local lt
        lt=$(find / -xdev -name 'libcublasLt.so.13*' -print -quit 2>/dev/null)
        [ -n "$lt" ] && ld="$ld:$(dirname "$lt")"
      fi
      # NCCL (tensor parallelism): the toolkit's, else a copy on the machine (e.g. the nvidia-nccl wheel).
      if LD_LIBRARY_PATH=$ld ldd "$exe" | grep -q "libnccl.so.* not found"; then
        local nc
        nc=$(find / -xdev -name 'libnccl.so.2*' -print -quit 2>/dev/null)
        [ -n "$nc" ] && ld="$ld:$(dirname "$nc")"
      fi
    fi
    echo "== $name"
    LD_LIBRARY_PATH=$ld ldd "$exe" | grep -E "not found|cublasLt|openblas|nccl" | sed 's/^/   /'
    local start end rc
    start=$(date +%s)
    FG_TEST_BACKEND=cuda LD_LIBRARY_PATH=$ld timeout "${FG_GPU_TEST_TIMEOUT:-400}" "$exe" \
      --gtest_output="xml:$out/$name.xml" >"$out/$name.log" 2>&1
    rc=$?
    end=$(date +%s)
    local passed failed_n skipped
    passed=$(grep -c '^\[       OK \]' "$out/$name.log")
    failed_n=$(grep -c '^\[  FAILED  \] [^0-9]' "$out/$name.log")
    skipped=$(grep -c '^\[  SKIPPED \] [^0-9]' "$out/$name.log")
    # The FAILED/SKIPPED lines are listed twice (inline and in the final list).
    failed_n=$((failed_n / 2))
    skipped=$((skipped / 2))
    grep -E '^\[  FAILED  \]|Failure|error|invariant broken|CUDA call failed' "$out/$name.log" | head -40 | sed 's/^/   /'
    [ $rc -ne 0 ] && failed=1
    rows+=("$(printf '%-28s %6s %6s %7s %6ss %4s' "$name" "$passed" "$failed_n" "$skipped" "$((end - start))" "$rc")")
  done
  echo
  echo "GPU check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  printf '%-28s %6s %6s %7s %7s %4s\n' binary passed failed skipped time rc
  for r in "${rows[@]}"; do echo "$r"; done
  [ $failed -eq 0 ] && echo "ALL GPU TESTS PASSED" || echo "SOME GPU TESTS FAILED (logs in $out)"
  return $failed
}

case "$MODE" in
  pack) shift; pack "$@" ;;
  run) shift || true; run_all "$@" ;;
  *) echo "usage: tools/gpu_check.sh pack [BUILD_DIR] | run [BIN_DIR]" >&2; exit 2 ;;
esac
