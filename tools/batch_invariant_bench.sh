#!/usr/bin/env bash
# Batch-invariant mode's cost: the same offline throughput run of engine_bench without and with
# --batch-invariant, back to back on one GPU, and the ratio of their output tokens/s.
#
#   tools/batch_invariant_bench.sh ENGINE_BENCH OUT_DIR [engine_bench args...]
#
# Writes OUT_DIR/batch_invariant_{default,invariant}.json and prints the ratio (tools/gpu_suite.sh
# step batch_invariant; docs/perf.md records the figure).
set -euo pipefail
bench=$1 out=$2
shift 2
mkdir -p "$out"
"$bench" "$@" --json "$out/batch_invariant_default.json"
"$bench" "$@" --batch-invariant --json "$out/batch_invariant_invariant.json"
python3 - "$out/batch_invariant_default.json" "$out/batch_invariant_invariant.json" <<'PY'
import json, sys
base, inv = (json.load(open(p))["throughput"]["output_tokens_per_s"] for p in sys.argv[1:3])
print(f"batch-invariant throughput: {inv:.1f} vs {base:.1f} output tok/s = {inv / base:.3f}x "
      f"(cost {100 * (1 - inv / base):.1f}%)")
PY
