#!/usr/bin/env bash
# One device call to see inside the Hopper prefill kernel (bf16 pages, head_dim 128) for each
# carried build ($BIN/attention_bench and, when present, $BIN/attention_bench_base): the prefill
# rows' times, the SASS (HGMMA / wait counts), an Nsight Compute report (speed of light, warp
# states, scheduler) of one launch in the chosen row, and its warp-stall samples per SASS
# instruction summed by what the instruction does (tools/ncu_stalls.py).
#   BIN=.device/tools bench/attention/ncu_prefill.sh [ROW...]   ROW: a prefill row (default 1x16384)
#   NCU_MEMORY=1 ...   instead of the stall profile, each row's memory system: speed of light, L2
#                      hit rate, L2 read sectors, DRAM bytes and lts__throughput's breakdown (which
#                      L2 unit is busiest, e.g. the fabric between the two L2 partitions)
# Logs go to $OUT (or device-attn-out/); the per-instruction CSVs are kept gzipped beside them.
# It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.device/tools}
OUT=${OUT:-$(pwd)/device-attn-out}
ROWS=("$@")
[ ${#ROWS[@]} -gt 0 ] || ROWS=(1x16384)
mkdir -p "$OUT"
LD=${LD_LIBRARY_PATH:-}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && LD="$LD:$d"; done
export LD_LIBRARY_PATH=$LD
# The bf16 head_dim-128 instance, whatever its parameter list (a regex over mangled names).
KERNEL_RE='_ZN2fg4cuda4attn22attention_wgmma_kernelI13__nv_bfloat16S3_Li128EE'
KERNEL="regex:$KERNEL_RE"
MEM_METRICS=breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
MEM_METRICS+=,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum
MEM_METRICS+=,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
for b in attention_bench attention_bench_base; do
  [ -x "$BIN/$b" ] || continue
  echo "== $b"
  timeout 60 "$BIN/$b" --only prefill | grep -E "^prefill|prefill tiles"
  cuobjdump --dump-sass "$BIN/$b" 2>&1 | awk -v k="$KERNEL_RE" '/Function :/ { p = index($0, k) > 0 } p' \
    >"$OUT/sass_$b.txt"
  echo "sass: $(grep -c HGMMA "$OUT/sass_$b.txt") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$OUT/sass_$b.txt") DEPBAR," \
    "$(grep -c 'WARPGROUP.ARRIVE' "$OUT/sass_$b.txt") ARRIVE, $(grep -c 'LDGSTS' "$OUT/sass_$b.txt") LDGSTS"
  for row in "${ROWS[@]}"; do
    if [ "${NCU_MEMORY:-0}" = 1 ]; then
      timeout 120 ncu --clock-control none --kernel-name-base mangled --kernel-name "$KERNEL" \
        --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --metrics "$MEM_METRICS" \
        "$BIN/$b" --only "prefill $row" >"$OUT/mem_${b}_$row.txt" 2>&1
      echo "ncu memory $row rc $?"
      grep -E "Duration|Throughput|Hit Rate|lts__|dram__" "$OUT/mem_${b}_$row.txt" | sed 's/  */ /g'
      continue
    fi
    rep="$OUT/ncu_${b}_$row"
    # The row's third launch of the kernel (the first two warm up).
    timeout 200 ncu --clock-control none --kernel-name-base mangled --kernel-name "$KERNEL" \
      --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
      -f -o "$rep" "$BIN/$b" --only "prefill $row" >"$rep.log" 2>&1
    echo "ncu $row rc $?"
    ncu -i "$rep.ncu-rep" --page details >"$rep.txt" 2>&1
    grep -E "Duration|Throughput|Pipe|Warp Cycles Per Issued|Eligible Warps|Issued Warp|No Eligible" "$rep.txt" | cut -c1-150 | head -20
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.sass.csv" 2>"$rep.sass.err"
    echo "source page rc $? ($(wc -l <"$rep.sass.csv") lines)"
    python3 tools/ncu_stalls.py "$rep.sass.csv" | tee "$rep.stalls.txt"
    gzip -f "$rep.sass.csv"
    rm -f "$rep.ncu-rep"
  done
done
