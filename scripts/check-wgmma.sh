#!/usr/bin/env bash
# Fails when ptxas serializes the warpgroup MMAs of a Hopper kernel: its C75xx advisories
# ("wgmma.mma_async instructions are serialized due to ..."), which it prints only with -v and
# which otherwise pass silently. A serialized kernel makes every MMA wait for the one before it: a
# branch over O's rescale cost the prefill kernel 23 % (docs/perf.md, twenty-third session), and a
# P V left in flight across a loop's back edge serialized all nine of its instances (twenty-seventh).
# Compiles the sm_90a device code (with the build's defines and optimization) of every .cu file
# that includes the wgmma headers. Without nvcc it says so and passes (the build has no CUDA code
# then).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  echo "check-wgmma: no nvcc, nothing to check"
  exit 0
fi
mapfile -t FILES < <(grep -lE 'wgmma_(util|ops)\.cuh|attention_wgmma_kernel\.cuh' src/backend/cuda/*.cu)
[ ${#FILES[@]} -gt 0 ] || { echo "check-wgmma: no file includes the wgmma headers" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for f in "${FILES[@]}"; do
  log="$tmp/$(basename "$f").log"
  if ! "$NVCC" -DFG_WGMMA=1 -DFG_WITH_CUDA=1 -Isrc --expt-relaxed-constexpr -O3 -DNDEBUG -std=c++20 \
    --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v -cubin -x cu "$f" -o "$tmp/out.cubin" >"$log" 2>&1; then
    cat "$log" >&2
    echo "check-wgmma: $f does not compile" >&2
    exit 1
  fi
  kernels=$(grep -c "Compiling entry function" "$log" || true)
  if grep -E "\(C75[0-9][0-9]\).*(serialized|injected)" "$log" >&2; then
    echo "check-wgmma: $f: ptxas serialized wgmma above" >&2
    status=1
  else
    echo "check-wgmma: $f: $kernels sm_90a kernels, no wgmma serialized"
  fi
done
exit $status
