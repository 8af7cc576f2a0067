#!/usr/bin/env bash
# Batch-invariant mode's cost: the same offline throughput run of engine_bench without and with
# --batch-invariant, back to back on one GPU, and the ratio of their output tokens/s. REF_MS (a
# list, default "256") gives the row counts the invariant GEMM algorithms are chosen at
# (FG_BATCH_INVARIANT_GEMM_M; gemm_lt.h): one invariant run each.
#
#   [REF_MS="256 64 1024"] tools/batch_invariant_bench.sh ENGINE_BENCH OUT_DIR [engine_bench args...]
#
# Writes OUT_DIR/batch_invariant_default.json and OUT_DIR/batch_invariant_m<M>.json and prints
# the ratios (tools/gpu_suite.sh step batch_invariant; docs/perf.md records the figure).
set -euo pipefail
bench=$1 out=$2
shift 2
mkdir -p "$out"
"$bench" "$@" --json "$out/batch_invariant_default.json"
for m in ${REF_MS:-256}; do
  FG_BATCH_INVARIANT_GEMM_M=$m "$bench" "$@" --batch-invariant --json "$out/batch_invariant_m$m.json"
done
python3 - "$out" ${REF_MS:-256} <<'PY'
import json, sys
out, ms = sys.argv[1], sys.argv[2:]
tok = lambda name: json.load(open(f"{out}/{name}.json"))["throughput"]["output_tokens_per_s"]
base = tok("batch_invariant_default")
for m in ms:
    inv = tok(f"batch_invariant_m{m}")
    print(f"batch-invariant (GEMM algorithms chosen at {m} rows): {inv:.1f} vs {base:.1f} output tok/s "
          f"= {inv / base:.3f}x (cost {100 * (1 - inv / base):.1f}%)")
PY
