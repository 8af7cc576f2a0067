#!/usr/bin/env bash
# Alternates attention_bench builds in one device call and prints each row's median time per build,
# so kernel variants are compared on the same card, clock state and neighbours.
#   bench/attention/ab_builds.sh DIR...   each DIR holds an attention_bench (the first is the baseline)
#   ROUNDS=3 ONLY="prefill,mixed" (defaults); the raw log goes to $OUT/ab.txt (or device-attn-out/)
# (tools/ab_engine_bench.sh is the engine-level A/B of two packed trees; this one takes any number
# of kernel builds and summarizes the attention rows.)
# It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(pwd)/device-attn-out}
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-prefill,mixed}
[ $# -gt 0 ] || { echo "usage: $0 DIR..." >&2; exit 2; }
mkdir -p "$OUT"
LOG="$OUT/ab.txt"
: >"$LOG"
for ((i = 1; i <= ROUNDS; ++i)); do
  for d in "$@"; do
    echo "== round $i $d" >>"$LOG"
    timeout 60 "$d/attention_bench" --only "$ONLY" >>"$LOG" 2>&1 || echo "(rc $?)" >>"$LOG"
  done
done
python3 - "$LOG" "$@" <<'PY'
import collections, re, statistics, sys
log, dirs = sys.argv[1], sys.argv[2:]
times, build = collections.defaultdict(list), None
for line in open(log):
    m = re.match(r"== round \d+ (.*)$", line)
    if m:
        build = m.group(1)
        continue
    # A row: "group name ...", two or more spaces, then its time in µs and the other columns.
    m = re.match(r"^(.*?\S)\s{2,}([\d.]+)\s", line)
    if build and m and not line.startswith("ceilings"):
        times[(" ".join(m.group(1).split()), build)].append(float(m.group(2)))
rows = list(dict.fromkeys(k[0] for k in times))
print(f"median µs over the rounds; ratio to {dirs[0]}")
print(f"{'row':52s}" + "".join(f"{d[-18:]:>22s}" for d in dirs))
for r in rows:
    base = statistics.median(times[(r, dirs[0])]) if times[(r, dirs[0])] else None
    cells = []
    for d in dirs:
        t = times[(r, d)]
        if not t:
            cells.append(f"{'-':>22s}")
            continue
        med = statistics.median(t)
        cells.append(f"{med:12.1f} ({med / base:5.3f})" if base else f"{med:22.1f}")
    print(f"{r[:52]:52s}" + "".join(cells))
PY
