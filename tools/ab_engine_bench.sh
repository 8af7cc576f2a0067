#!/usr/bin/env bash
# A/B of this tree's packed benches (tools/gpu_suite.sh pack, carried as .devpack) against an older
# build's, alternated ROUNDS times in one call so both see the same machine state.
#   (here)  pack the older tree's benches: put its engine_bench (and attention_bench) in
#           .devold/.device/tools/, or as .devold/old.tar.xz holding .device/tools/...
#   (there) tools/ab_engine_bench.sh     (carry .devpack and .devold)
# Each round runs, for new then old: engine_bench (ENGINE_ARGS, default batch-1 decode and offline
# throughput) and, when ATTN_ONLY is set, attention_bench --only "$ATTN_ONLY" (with
# --engine-graphs when ATTN_GRAPHS=1). OLD: the old tools' folder.
# CASES: engine_bench runs instead of the one ENGINE_ARGS run, separated by ';', each a line of
# the summary (a case's own --config / --kv-cache-memory replace the defaults), e.g.
#   CASES="--skip-throughput; --skip-throughput --decode-batch 8;
#          --skip-throughput --quantization fp8 --kv-cache-dtype fp8 --kv-cache-memory 40GiB;
#          --config bench/configs/qwen3-30b-a3b --skip-throughput --kv-cache-memory 8GiB"
set -u
OLD=${OLD:-.devold/.device/tools}
ROUNDS=${ROUNDS:-2}
CFG=${CFG:-bench/configs/llama-3.1-8b}
tar -xJf .devpack/device.tar.xz
[ -f .devold/old.tar.xz ] && tar -xJf .devold/old.tar.xz -C .devold
ld="/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib"
if LD_LIBRARY_PATH=$ld ldd .device/tools/engine_bench | grep -q "not found"; then ld="$ld:$PWD/.device/lib"; fi
export LD_LIBRARY_PATH=$ld
# KV pool: 80 GiB on an H200, 52 GiB on a card under 100 GB (the weights must fit beside it).
kv=80GiB
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "${mem:-0}" -lt 100000 ] && kv=52GiB
read -r -a engine_args <<<"${ENGINE_ARGS:-}"
# One engine_bench run of tools folder $1, label $2, arguments $3 (a case): its median / throughput
# lines, or with a case one line of them.
engine_run() {
  local t=$1 label=$2 args=() extra=()
  read -r -a args <<<"$3"
  [[ " $3 " == *" --config "* ]] || extra+=(--config "$CFG")
  [[ " $3 " == *" --kv-cache-memory "* ]] || extra+=(--kv-cache-memory "$kv")
  "$t/engine_bench" "${extra[@]}" --backend cuda "${args[@]}" --json "${OUT:-.}/engine_$label.json" 2>&1 |
    grep -E "median|output tokens/s|ms per step|floor"
}
cases=()
[ -n "${CASES:-}" ] && IFS=';' read -r -a cases <<<"$(tr '\n' ' ' <<<"$CASES")"
for i in $(seq "$ROUNDS"); do
  for v in new old; do
    t=.device/tools
    [ "$v" = old ] && t=$OLD
    echo "== $v $i"
    if [ -n "${ATTN_ONLY:-}" ] && [ -x "$t/attention_bench" ]; then
      graphs=()
      [ "${ATTN_GRAPHS:-0}" = 1 ] && graphs=(--engine-graphs)
      "$t/attention_bench" --only "$ATTN_ONLY" "${graphs[@]}" --json "${OUT:-.}/attn_$v$i.json" 2>&1 |
        grep -E "^(decode|prefill|spec|mixed)|ceilings"
    fi
    if [ ${#cases[@]} -eq 0 ]; then
      engine_run "$t" "$v$i" "${engine_args[*]}"
      continue
    fi
    for c in "${!cases[@]}"; do
      echo "-- $v $i case $c:${cases[$c]}: $(engine_run "$t" "$v${i}_$c" "${cases[$c]}" | grep median | tr -s ' ')"
    done
  done
done
