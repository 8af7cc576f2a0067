#!/usr/bin/env bash
# One device call for the attention kernel: correctness, the bench, the PyTorch SDPA peer and
# (when carried) the build of an earlier commit on the same shapes, then a short table last.
# Binaries are built on the development machine and carried, stripped, in .device-attn/:
#   attention_bench, attention_kernel_test, optionally attention_bench_base (an earlier build;
#   without it the same binary's --no-wgmma run, prefill tiles on the mma.sync prefill kernel,
#   is the base).
#   bench/attention/device_run.sh [QUICK]    QUICK=1 (default) runs the bench's --quick rows
# The steps run most important first (check + bench, base, peer, test) and fit in about 230 s.
# Logs and JSON go to $OUT (or device-attn-out/). Each step has its own timeout so that one slow
# step cannot eat the others. It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.device-attn
OUT=${OUT:-$(pwd)/device-attn-out}
mkdir -p "$OUT"
QUICK_FLAG=""
[ "${1:-1}" = "1" ] && QUICK_FLAG="--quick"

# cuBLASLt for the bench's GEMM ceiling: the toolkit's, else any copy on the machine.
LD=${LD_LIBRARY_PATH:-}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && LD="$LD:$d"; done
if LD_LIBRARY_PATH=$LD ldd "$BIN/attention_bench" | grep -q "libcublasLt.so.* not found"; then
  lt=$(find / -xdev -name 'libcublasLt.so.13*' -print -quit 2>/dev/null)
  [ -n "$lt" ] && LD="$LD:$(dirname "$lt")"
fi
export LD_LIBRARY_PATH=$LD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader

if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass "$BIN/attention_bench" >"$OUT/sass.txt" 2>&1
  echo "sass (attention_bench, all kernels): HMMA $(grep -c HMMA "$OUT/sass.txt"), HGMMA $(grep -c HGMMA "$OUT/sass.txt"), LDSM $(grep -c LDSM "$OUT/sass.txt"), local loads $(grep -c 'LDL' "$OUT/sass.txt"), local stores $(grep -c 'STL' "$OUT/sass.txt")"
fi

echo "== attention_bench --check $QUICK_FLAG"
timeout 110 "$BIN/attention_bench" --check --random 40 $QUICK_FLAG --json "$OUT/ours.json" >"$OUT/bench.log" 2>&1
echo "rc $?"
grep -E "passed|failed|FAIL|ceilings" "$OUT/bench.log" | tail -5

if [ -x "$BIN/attention_bench_base" ]; then
  echo "== attention_bench_base $QUICK_FLAG"
  timeout 40 "$BIN/attention_bench_base" $QUICK_FLAG --json "$OUT/base.json" >"$OUT/base.log" 2>&1
else
  echo "== attention_bench --no-wgmma $QUICK_FLAG (base)"
  timeout 40 "$BIN/attention_bench" --no-wgmma $QUICK_FLAG --json "$OUT/base.json" >"$OUT/base.log" 2>&1
fi
echo "rc $?"

echo "== sdpa_peer"
timeout 50 python3 tools/sdpa_peer.py $QUICK_FLAG --json "$OUT/peer.json" --ours "$OUT/ours.json" >"$OUT/peer.log" 2>&1
echo "rc $?"

echo "== attention_kernel_test"
timeout 30 "$BIN/attention_kernel_test" >"$OUT/test.log" 2>&1
echo "rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test.log" | head -2 | tr '\n' ' ')"

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
ours, base, peer = load("ours.json"), load("base.json"), load("peer.json")
def rows(d):
    return {} if d is None else {r["group"] + " " + r["name"]: r for r in d["rows"] if not r.get("skipped")}
o, b = rows(ours), rows(base)
peer_rows = {} if peer is None else {r["group"] + " " + r["name"].split(" (")[0].replace(" causal", ""): r
                                   for r in (peer["rows"] if isinstance(peer, dict) else peer)}
print()
if ours:
    print("ceilings: copy %.0f GB/s, read %.0f GB/s, GEMM %.0f TFLOP/s; check_failed %d" % (
        ours["copy_bytes_per_s"] / 1e9, ours["read_bytes_per_s"] / 1e9, ours["gemm_flops_per_s"] / 1e12,
        ours["check_failed"]))
print("%-40s %10s %8s %10s %8s %8s %8s" % ("case", "ours_us", "TFLOP/s", "base_us", "TFLOP/s", "flash", "cudnn"))
print("(peer columns: TFLOP/s for prefill, us otherwise; spec peer rows are non-causal)")
for key, r in o.items():
    if not (key.startswith("prefill") or key.startswith("spec") or key.startswith("mixed") or "page16" in key):
        continue
    t = r["seconds"]
    br = b.get(key)
    pk = key.replace(" page16", "").replace(" causal", "")
    pr = peer_rows.get(pk, {})
    def peer_fig(label):
        x = pr.get(label)
        if not isinstance(x, dict):
            return "-"
        if key.startswith("prefill"):
            return "%.0f" % (x["flops"] / x["seconds"] / 1e12)
        return "%.1f" % (x.get("seconds", 0) * 1e6)
    print("%-40s %10.1f %8.1f %10s %8s %8s %8s" % (
        key, t * 1e6, r["flops"] / t / 1e12, "%.1f" % (br["seconds"] * 1e6) if br else "-",
        "%.1f" % (br["flops"] / br["seconds"] / 1e12) if br else "-", peer_fig("flash"), peer_fig("cudnn")))
spec = {k: v["seconds"] for k, v in o.items() if k.startswith("spec")}
q1 = [v for k, v in spec.items() if "q_len1 " in k]
for ql in (2, 4, 8):
    q = [v for k, v in spec.items() if "q_len%d " % ql in k]
    if q1 and q:
        print("spec q_len %d / q_len 1: %.3fx" % (ql, q[0] / q1[0]))
EOF
