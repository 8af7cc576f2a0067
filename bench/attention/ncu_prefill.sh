#!/usr/bin/env bash
# One device call to see inside the Hopper prefill kernel, for each carried build
# (.device-attn/attention_bench and, when present, attention_bench_base): the prefill rows'
# times, the SASS of the bf16 head_dim-128 kernel (HGMMA / wait counts), and an Nsight Compute
# report (speed of light, compute and memory workload, warp states, scheduler) of its launch in
# the 1 x 16k causal row.
#   bench/attention/ncu_prefill.sh [ROW]    ROW: attention_bench --only filter (default 1x16384)
# Logs go to $OUT (or device-attn-out/). It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.device-attn
OUT=${OUT:-$(pwd)/device-attn-out}
ROW=${1:-1x16384}
mkdir -p "$OUT"
LD=${LD_LIBRARY_PATH:-}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && LD="$LD:$d"; done
export LD_LIBRARY_PATH=$LD
KERNEL='_ZN2fg4cuda4attn22attention_wgmma_kernelI13__nv_bfloat16Li128EEEvNS1_12KernelParamsE'
for b in attention_bench attention_bench_base; do
  [ -x "$BIN/$b" ] || continue
  echo "== $b"
  timeout 60 "$BIN/$b" --only prefill | grep -E "^prefill|prefill tiles"
  cuobjdump --dump-sass --function "$KERNEL" "$BIN/$b" >"$OUT/sass_$b.txt" 2>&1
  echo "sass: $(grep -c HGMMA "$OUT/sass_$b.txt") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$OUT/sass_$b.txt") DEPBAR," \
    "$(grep -c 'WARPGROUP.ARRIVE' "$OUT/sass_$b.txt") ARRIVE, $(grep -c 'LDGSTS' "$OUT/sass_$b.txt") LDGSTS"
  timeout 150 ncu --kernel-name regex:attention_wgmma --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats \
    "$BIN/$b" --only "$ROW" >"$OUT/ncu_$b.txt" 2>&1
  echo "ncu rc $?"
  grep -E "Duration|Throughput|Pipe|Warp Cycles Per Issued|Eligible Warps|L2 Hit|Max Bandwidth|Stall|stall" "$OUT/ncu_$b.txt" | cut -c1-150 | head -30
done
