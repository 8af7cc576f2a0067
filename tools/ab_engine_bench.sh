#!/usr/bin/env bash
# A/B of engine_bench on the GPU machine: this tree's packed engine_bench (tools/gpu_suite.sh pack,
# carried as .devpack) and an older build's (OLD, e.g. built from another commit into .devold/),
# alternated ROUNDS times in one call so both see the same machine state.
#   (here)  git worktree add /tmp/old <commit>; build its engine_bench (90a); cp it to .devold/
#   (there) OLD=.devold/engine_bench tools/ab_engine_bench.sh     (carry .devpack and .devold)
set -u
OLD=${OLD:-.devold/engine_bench}
ROUNDS=${ROUNDS:-2}
CFG=${CFG:-bench/configs/llama-3.1-8b}
tar -xJf .devpack/device.tar.xz
ld="/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib"
if LD_LIBRARY_PATH=$ld ldd .device/tools/engine_bench | grep -q "not found"; then ld="$ld:$PWD/.device/lib"; fi
export LD_LIBRARY_PATH=$ld
for i in $(seq "$ROUNDS"); do
  for v in new old; do
    b=.device/tools/engine_bench
    [ "$v" = old ] && b=$OLD
    echo "== $v $i"
    $b --config "$CFG" --backend cuda --kv-cache-memory 80GiB --json "${OUT:-.}/$v$i.json" 2>&1 |
      grep -E "median|output tokens/s|ms per step"
  done
done
