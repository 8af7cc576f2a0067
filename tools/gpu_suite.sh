#!/usr/bin/env bash
# One call on the GPU machine for everything that needs a GPU: correctness first (every CUDA op,
# the attention sweep, model parity with the fixtures and live against transformers, decode-graph
# parity), then the engine figures of docs/perf.md (batch-1 decode vs the bandwidth floor, offline
# throughput with the transformers generate peer, the prefix cache on/off and page-size sweep, and
# serve_bench against `flashgen serve`). Each step has its own time limit so a slow one cannot eat
# the rest.
#
#   (here)  tools/gpu_suite.sh pack      build with sm_90a into build-gpu, pack .devpack/device.tar.xz
#           PACK_TESTS="backend_attention_parity" PACK_TOOLS="attention_bench" tools/gpu_suite.sh pack
#                   a slim pack of those targets only (the whole pack is about 50 MB and the
#                   working tree ~27 MB, against 64 MiB a call); run only steps whose binaries it has
#   (there) tools/gpu_suite.sh run       (carry .devpack) logs and JSON under $OUT (at most 8 files)
#           STEPS="parity engine_bench" tools/gpu_suite.sh run    only the named steps
#           STEPS=soak tools/gpu_suite.sh run    the soak under faults at capacity (never part of a plain run)
#           STEPS=targets tools/gpu_suite.sh run    the open issues' target figures in one call
#                   (docs/perf.md's first table; the steps' limits add up to 8 minutes): batch-1
#                   and batch-32 decode against their floors, decode (--quick: B1 kv8k/32k, B8
#                   kv8k, B64 kv8k; pages 16, 1 and 256; bf16 and fp8), speculative and prefill
#                   attention beside PyTorch SDPA's, the batch-32 verification step; packed by
#                   PACK_TESTS="" PACK_TOOLS="engine_bench spec_bench attention_bench"
#                   tools/gpu_suite.sh pack (never part of a plain run)
#           STEPS=attn_ncu tools/gpu_suite.sh run    Nsight Compute on small-batch decode attention rows
#                   (never part of a plain run)
#           AB_VAR=FG_GEMV STEPS=ab tools/gpu_suite.sh run    a backend switch off and on (default FG_PDL;
#                   also FG_GEMV)
#           STEPS="tp_parity tp_allreduce tp_decode tp_offline" tools/gpu_suite.sh run
#                   tensor parallelism on a machine of 2+ GPUs (each size runs only when that many
#                   GPUs are present; never part of a plain run); TP_SIZES="2" picks the sizes
# It never changes the GPU's settings.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=${1:-run}
BENCH_TARGETS=${PACK_TOOLS-"flashgen engine_bench prefix_cache_bench spec_bench attention_bench moe_gemm_bench tp_bench gemm_fp8_bench gemm_algo_search sample_bench"}
TEST_TARGETS=${PACK_TESTS-"backend_ops_parity backend_attention_parity backend_family_parity model_parity_tests decode_graph_parity_tests attention_kernel_test batch_invariance_tests tensor_parallel_tests"}

pack() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null || exit 1
  cmake --build build-gpu --target $TEST_TARGETS $BENCH_TARGETS -j "${JOBS:-2}" || exit 1
  rm -rf .device && mkdir -p .device/bin .device/tools .device/lib .device/tok .devpack
  echo "$ROOT" > .device/source_dir   # where the binaries look for tests/fixtures (gpu_check.sh links it)
  for t in $TEST_TARGETS $BENCH_TARGETS; do
    local f dir=tools
    f=$(find build-gpu -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "missing $t" >&2; exit 1; }
    case " $TEST_TARGETS " in *" $t "*) dir=bin ;; esac
    cp "$f" ".device/$dir/" && strip ".device/$dir/$t"
  done
  # Libraries the GPU machine's image may lack or hold in another version (OpenBLAS's
  # Fortran runtime, Debian's ICU); used only where the loader reports them missing there.
  # Only those some packed binary links (ICU's data alone is 30 MB).
  # (ldd's list is taken first: under pipefail, grep -q closing the pipe early fails the test.)
  local linked
  linked=$(ldd .device/bin/* .device/tools/* 2>/dev/null)
  for lib in libgfortran.so.5 libquadmath.so.0 libicuuc.so.72 libicudata.so.72; do
    local base=${lib%%.so*}
    if grep -q "$base\.so" <<<"$linked"; then
      cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" .device/lib/
    fi
  done
  # The Llama 3 tokenizer for serving the dummy-weight Llama-3.1-8B (the test fixture archive,
  # extracted by the configure above); only flashgen's serve steps use it.
  case " $BENCH_TARGETS " in
    *" flashgen "*) cp build-gpu/test_fixtures/tokenizers/llama-3-8b-instruct/tokenizer*.json .device/tok/ ;;
  esac
  tar -cJf .devpack/device.tar.xz .device && du -sh .devpack   # carry .devpack (64 MiB limit)
}

step() {  # step NAME[:VARIANT] SECONDS COMMAND...   (skipped unless NAME is in $STEPS, when that is set)
  local name=$1 secs=$2
  shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" ${name%%:*} "* ]]; then return 0; fi
  echo "=== $name (limit ${secs}s)"
  local t0=$SECONDS
  timeout "$secs" "$@"
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0))s"
  SUMMARY+=("$(printf '%-22s rc=%-4s %4ss' "$name" "$rc" "$((SECONDS - t0))")")
}

run_all() {
  OUT=${OUT:-$ROOT/gpu-suite-out}
  [ -f .devpack/device.tar.xz ] && tar -xJf .devpack/device.tar.xz
  mkdir -p "$OUT/raw"
  export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
  local ld="${LD_LIBRARY_PATH:-}" probes
  # Every packed tool shows what the loader lacks (tools link different libraries; a slim pack may
  # leave flashgen out). ldd's output is taken whole: grep -q under pipefail would fail the test.
  probes=$(find .device/tools -type f -perm -u+x)
  lacking() { LD_LIBRARY_PATH=$ld ldd $probes 2>/dev/null | grep "$@"; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && ld="$ld:$d"; done
  if [ -n "$(lacking 'not found')" ]; then ld="$ld:$ROOT/.device/lib"; fi
  if [ -n "$(lacking 'libcublasLt.so.* not found')" ]; then
    lt=$(find / -xdev -name 'libcublasLt.so.13*' -print -quit 2>/dev/null)
    [ -n "$lt" ] && ld="$ld:$(dirname "$lt")"
  fi
  if [ -n "$(lacking 'libnccl.so.* not found')" ]; then
    nc=$(find / -xdev -name 'libnccl.so.2*' -print -quit 2>/dev/null)   # e.g. the nvidia-nccl wheel's
    [ -n "$nc" ] && ld="$ld:$(dirname "$nc")"
  fi
  export LD_LIBRARY_PATH=$ld
  lacking -E "not found|cublas|icu|openblas|nccl" | sort -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  # KV pools sized for an H200 (141 GB); on a card of 80 GB (H100) the largest ones shrink so that
  # Llama-3.1-8B's bf16 weights still fit beside them.
  KV80=80GiB KV60=60GiB
  local mem
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "${mem:-0}" -lt 100000 ]; then KV80=52GiB KV60=48GiB; fi
  SUMMARY=()
  local T=.device/tools CFG=bench/configs/llama-3.1-8b
  # The targets' figures: steps of their own (named only here, never in a plain run) and two of
  # the plain run's.
  if [ "${STEPS:-}" = targets ]; then
    STEPS="engine_b1 engine_b32 attention_targets spec_step"
    step engine_b1 90 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 --skip-throughput \
      --json "$OUT/raw/engine_b1.json"
    step attention_targets 150 sh -c "$T/attention_bench --quick --only decode,spec,prefill \
      --json $OUT/raw/attention_targets.json && python3 tools/sdpa_peer.py --quick \
      --ours $OUT/raw/attention_targets.json --json $OUT/raw/sdpa_peer.json"
  fi

  OUT=$OUT/raw step parity 420 tools/gpu_check.sh run .device/bin
  step engine_bench 200 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 --json "$OUT/engine.json"
  # Issue #16 item 1's batch-32 figure (32 sequences decoding together against their floor), and
  # decode with sampling (temperature 1, top-p 0.9) at batch 1 and 32 beside the greedy runs.
  step engine_b32 90 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 --skip-throughput \
    --decode-batch 32 --json "$OUT/raw/engine_b32.json"
  # Mid-batch decode at mid contexts, where decode graphs replay split-KV plans: 12 sequences of
  # 384-512 keys (the 16-sequence bucket; its merges once ran on a one-CTA grid, 1.86x the floor
  # before and 1.17x after on an H100, docs/perf.md thirty-fourth session) and 28 of 768-896 (the
  # 32 bucket; predicted to serialize too, measured unchanged: kept as a check of that bucket).
  step engine_mid:b12 90 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 --skip-throughput \
    --decode-batch 12 --decode-prompt-len 384 --json "$OUT/raw/engine_mid_b12.json"
  step engine_mid:b28 90 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 --skip-throughput \
    --decode-batch 28 --decode-prompt-len 768 --max-batch-tokens 32768 --json "$OUT/raw/engine_mid_b28.json"
  local b
  for b in 1 32; do
    step "engine_sampled:b$b" 90 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 \
      --skip-throughput --decode-batch $b --temperature 1 --top-p 0.9 --json "$OUT/raw/engine_sampled_b$b.json"
  done
  # The device sampler alone (µs per call by row shape, settings and batch).
  step sample_bench 60 $T/sample_bench --json "$OUT/raw/sample_bench.json"
  # Batch-invariant mode's cost (docs/perf.md): the same throughput run without and with
  # --batch-invariant (its GEMM algorithms chosen at 256 and at 64 rows), back to back.
  step batch_invariant 480 env REF_MS="256 64" tools/batch_invariant_bench.sh $T/engine_bench "$OUT/raw" \
    --config $CFG --backend cuda --kv-cache-memory $KV80 --skip-decode --num-requests 512 --prompt-len 512 \
    --output-len 256
  step engine_fp8 200 $T/engine_bench --config $CFG --backend cuda --quantization fp8 --kv-cache-memory $KV80 \
    --prompt-len 1024 --output-len 1024 --json "$OUT/raw/engine_fp8.json"
  step hf_peer 100 python3 bench/engine/hf_peer.py --config $CFG --num-requests 256 --prompt-len 512 \
    --output-len 256 --batch-sizes 64,256 --json "$OUT/hf_peer.json"
  step prefix_cache 120 $T/prefix_cache_bench --config $CFG --backend cuda --kv-cache-memory $KV60 \
    --sweep-requests 64 --json "$OUT/prefix.json"
  step spec_bench 200 $T/spec_bench --config $CFG --draft-config bench/configs/llama-3.2-1b --backend cuda \
    --kv-cache-memory $KV60 --json "$OUT/spec.json"
  # The batch-32 verification step against a decode step (spec_bench (a) alone; docs/perf.md,
  # "Speculative decoding").
  step spec_step 150 $T/spec_bench --config $CFG --backend cuda --kv-cache-memory $KV60 \
    --skip b,c,d --step-batches 32 --json "$OUT/raw/spec_step.json"
  # Batch-1 n-gram speculation of sampled requests (temperature 1: verification by rejection
  # sampling against the backend's distributions) on and off.
  step spec_sampled 120 $T/spec_bench --config $CFG --backend cuda --kv-cache-memory $KV60 \
    --skip a,b,d --temperature 1 --json "$OUT/raw/spec_sampled.json"
  # A switch of the CUDA backend off and on (AB_VAR=0 / 1), alternated AB_ROUNDS times (default 2)
  # in one call: batch-1 decode and offline throughput, the spec_bench steps of batch 1 and 32,
  # batch-1 decode with FP8 weights and an fp8 KV cache,
  # with FG_PDL the small-batch attention rows, with FG_GEMV the projections alone (docs/perf.md).
  # AB_VAR: an environment switch of the backend, FG_PDL (programmatic dependent launch,
  # launch.cuh) by default, or FG_GEMV (the decode-sized GEMM of gemv.h). Only when named in STEPS
  # (a measuring tool, ~4 minutes; never part of a plain run).
  if [[ " ${STEPS:-} " == *" ab "* ]]; then
    local ab_var=${AB_VAR:-FG_PDL} ab round
    for round in $(seq "${AB_ROUNDS:-2}"); do
      for ab in 0 1; do
        step "ab:engine$ab.$round" 200 env "$ab_var=$ab" $T/engine_bench --config $CFG --backend cuda \
          --kv-cache-memory $KV80 --json "$OUT/raw/${ab_var}${ab}_engine_$round.json"
        step "ab:spec$ab.$round" 100 env "$ab_var=$ab" $T/spec_bench --config $CFG --backend cuda \
          --kv-cache-memory $KV60 --skip b,c,d --step-batches 1 32 --json "$OUT/raw/${ab_var}${ab}_spec_$round.json"
        step "ab:fp8_decode$ab.$round" 100 env "$ab_var=$ab" $T/engine_bench --config $CFG --backend cuda \
          --quantization fp8 --kv-cache-dtype fp8 --kv-cache-memory 40GiB --skip-throughput \
          --json "$OUT/raw/${ab_var}${ab}_fp8_decode_$round.json"
      done
    done
    if [ "$ab_var" = FG_PDL ]; then
      for ab in 0 1; do
        step "ab:attn$ab" 120 env FG_PDL=$ab $T/attention_bench --only "decode B1 kv,decode B8 kv8192 page16" \
          --json "$OUT/raw/FG_PDL${ab}_attention.json"
      done
    fi
    if [ "$ab_var" = FG_GEMV ]; then  # the projections alone: ours vs cuBLASLt
      local rows=1,8,16
      for ab in 0 1; do
        step "ab:gemm$ab" 240 env "$ab_var=$ab" $T/gemm_fp8_bench --backend cuda --tokens $rows --ceiling 0 \
          --json "$OUT/raw/${ab_var}${ab}_gemm.json"
      done
    fi
  fi
  # Where the verification step's extra time goes: Nsight Compute kernel times of steps of 1 and of
  # 1 + 4 query tokens per sequence at batch 32 (graph nodes; 1,000 launches after 3,000, about
  # three steps), summed per kernel by tools/ncu_summary.py (its --steps: the steps captured).
  local q
  for q in 1 5; do
    step "spec_ncu:q$q" 240 sh -c "ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      --graph-profiling node --launch-skip 3000 --launch-count 1000 $T/spec_bench --config $CFG --backend cuda \
      --kv-cache-memory $KV60 --skip b,c,d --step-batches 32 --step-only-q $q > $OUT/raw/spec_ncu_q$q.csv \
      && python3 tools/ncu_summary.py $OUT/raw/spec_ncu_q$q.csv"
  done
  # Where a batch-1 decode step's time goes: Nsight Compute kernel times of graph-replayed decode
  # steps (graph nodes; 1,000 launches after 3,000, about three steps), summed per kernel; the sum
  # against engine_bench's step time is the launch gaps between kernels.
  # NCU_CFG: another config (e.g. bench/configs/qwen3-30b-a3b; NCU_LAUNCHES: launches per step);
  # NCU_ARGS: more engine_bench options (e.g. "--decode-batch 32").
  step decode_ncu 240 sh -c "ncu --clock-control none --csv --metrics gpu__time_duration.sum \
    --graph-profiling node --launch-skip 3000 --launch-count ${NCU_LAUNCHES:-1000} $T/engine_bench \
    --config ${NCU_CFG:-$CFG} --backend cuda --kv-cache-memory 20GiB --skip-throughput --decode-tokens 40 \
    ${NCU_ARGS:-} > $OUT/raw/decode_ncu.csv && python3 tools/ncu_summary.py $OUT/raw/decode_ncu.csv"
  # Where small-batch decode attention's time goes (issue #16 item 2: B1 kv 8k/32k and B8 kv8k at
  # 1.1x cuDNN's time): each row's kernels as one call launches them (main and merge), their
  # durations, and speed of light, memory workload, warp states and scheduler (two launches after
  # the first four: one call's main and merge kernels). Only when named in STEPS (attn_ncu).
  if [[ " ${STEPS:-} " == *" attn_ncu "* ]]; then
    local row
    for row in "decode B1 kv8192 page16" "decode B1 kv32768 page16" "decode B8 kv8192 page16"; do
      step "attn_ncu:${row// /_}" 120 sh -c "ncu --clock-control none --graph-profiling node \
        --kernel-name regex:attention_ --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section LaunchStats --section Occupancy $T/attention_bench --only '$row' > $OUT/raw/attn_ncu_${row// /_}.txt; \
        grep -E '^  [a-z_]+.*\\(|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Grid Size|Warp Cycles Per Issued|Eligible Warps' \
        $OUT/raw/attn_ncu_${row// /_}.txt | cut -c1-140"
    done
    # The same kernels inside a batch-1 decode step of the engine (graph nodes, ~150-250 keys;
    # ncu flushes the caches before each kernel, as the step's weight stream does to the L2), with
    # every collected metric (--page raw: the stall reasons in full), and the size of each
    # attention kernel's code (an instruction-cache-cold launch fetches it from memory).
    step "attn_ncu:engine_b1" 180 sh -c "ncu --clock-control none --graph-profiling node \
      --kernel-name regex:attention_ --launch-skip 200 --launch-count 4 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section Occupancy --section InstructionStats --page raw $T/engine_bench --config $CFG \
      --backend cuda --kv-cache-memory 20GiB --skip-throughput --decode-tokens 40 > $OUT/raw/attn_ncu_engine_b1.txt; \
      grep -E '^  [a-z_]+.*\\(|gpu__time_duration.sum|stall|launch__grid_size|launch__registers' \
      $OUT/raw/attn_ncu_engine_b1.txt | grep -v ' 0$' | cut -c1-140 | head -150"
    step "attn_ncu:sass" 60 sh -c "cuobjdump -res-usage $T/attention_bench 2>&1 | grep -A1 attention_ | cut -c1-200 | head -60; \
      cuobjdump -sass $T/attention_bench | awk '/Function :/{f=\$3} /^ +\\/\\*[0-9a-f]+\\*\\//{n[f]++} END{for(k in n) print n[k], k}' \
      | grep attention_ | sort -n | cut -c1-160"
  fi
  # Where a step of offline 1k/1k with FP8 weights and the fp8 KV cache at 512 running goes (issue
  # #17's figure): kernel times of 1,500 launches after the first 150,000 (steps of ~500 decodes
  # and a prefill chunk), summed per kernel.
  step tput_fp8_ncu 300 sh -c "ncu --clock-control none --csv --metrics gpu__time_duration.sum \
    --graph-profiling node --launch-skip 150000 --launch-count 1500 $T/engine_bench --config $CFG \
    --backend cuda --quantization fp8 --kv-cache-dtype fp8 --kv-cache-memory $KV80 --prompt-len 1024 \
    --output-len 1024 --max-running 512 --num-requests 600 --skip-decode > $OUT/raw/tput_fp8_ncu.csv \
    && python3 tools/ncu_summary.py $OUT/raw/tput_fp8_ncu.csv"
  step structured 150 $T/engine_bench --config $CFG --tokenizer .device/tok --backend cuda --kv-cache-memory $KV60 \
    --skip-decode --skip-throughput --num-requests 512 --prompt-len 512 --output-len 256 --structured-fraction 0.5 \
    --schema bench/engine/schemas/records.json --json "$OUT/structured.json"
  step attention_spec 60 $T/attention_bench --only spec --json "$OUT/raw/attention_spec.json"
  # fp8 KV cache (docs/perf.md, "FP8 KV cache"): every page-16 row, bf16 and fp8 KV side by side,
  # and offline 1k/1k throughput (batch-1 decode at 6k keys too) with a bf16 and an fp8 cache of
  # the same memory.
  step attention_fp8 150 $T/attention_bench --only page16 --json "$OUT/raw/attention_fp8.json"
  for kvd in bf16 fp8; do
    step "engine_1k1k_$kvd" 240 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory 40GiB \
      --kv-cache-dtype $kvd --num-requests 512 --prompt-len 1024 --output-len 1024 --decode-prompt-len 6000 \
      --decode-tokens 256 --json "$OUT/raw/engine_1k1k_$kvd.json"
  done
  # FP8 weights with an fp8 KV cache (issue #17's pairing): batch-1 decode and offline 1k/1k.
  step engine_fp8_fp8kv 240 $T/engine_bench --config $CFG --backend cuda --quantization fp8 --kv-cache-dtype fp8 \
    --kv-cache-memory $KV80 --prompt-len 1024 --output-len 1024 --json "$OUT/raw/engine_fp8_fp8kv.json"
  # The same at 512 running (the 1k/1k figures of docs/perf.md), decode graphs up to 256 and up to
  # 512 sequences back to back: whether eager launching of 512-sequence steps costs the GPU time.
  for gb in 256 512; do
    step "engine_fp8_512:graphs$gb" 240 $T/engine_bench --config $CFG --backend cuda --quantization fp8 \
      --kv-cache-dtype fp8 --kv-cache-memory $KV80 --prompt-len 1024 --output-len 1024 --max-running 512 \
      --max-graph-batch $gb --skip-decode --json "$OUT/raw/engine_fp8_512_g$gb.json"
  done
  # bf16 weights and cache, 1k/1k at 512 and at 256 running (issue #16's 1k/1k figure; the 80 GiB
  # pool holds 320 whole sequences, so 512 running preempts).
  local running
  for running in 512 256; do
    step "engine_bf16_$running" 300 $T/engine_bench --config $CFG --backend cuda --kv-cache-memory $KV80 \
      --prompt-len 1024 --output-len 1024 --max-running $running --skip-decode \
      --json "$OUT/raw/engine_bf16_$running.json"
  done
  # HF_DIAGNOSE="gemma2 ...": per-position errors of those fixtures (tools/hf_live_parity.py --diagnose)
  local diag=()
  for fx in ${HF_DIAGNOSE:-}; do diag+=(--diagnose "$fx"); done
  step hf_live_parity 150 python3 tools/hf_live_parity.py --flashgen $T/flashgen "${diag[@]}" --json "$OUT/raw/hf_live.json"
  # Model families (docs/perf.md, "Model families"): the grouped expert GEMM against the dense
  # ceiling, MoE decode against the floor of the bytes read and 1k/1k throughput, and Gemma-2-9B
  # with and without soft-capping: at its real head_dim 256 and at the -hd128 shape (the same
  # widths and KV bytes in 128-wide heads), so the two head sizes compare on one model.
  step moe_gemm 120 $T/moe_gemm_bench --backend cuda --json "$OUT/raw/moe_gemm.json"
  # The grouped GEMM's decode path (gemv_kernel.cuh's stream) against its 16 x 64 mma tiles
  # (FG_GEMV=0), alternated: the projections alone, then MoE batch-1 decode against its floor.
  local moe_ab
  for moe_ab in 0 1 0 1; do
    step "moe_ab:gemm$moe_ab" 120 env FG_GEMV=$moe_ab $T/moe_gemm_bench --backend cuda --tokens 1,8,32,64 \
      --json "$OUT/raw/moe_ab_gemm$moe_ab.json"
    step "moe_ab:qwen3$moe_ab" 150 env FG_GEMV=$moe_ab $T/engine_bench --config bench/configs/qwen3-30b-a3b \
      --backend cuda --kv-cache-memory 20GiB --skip-throughput --json "$OUT/raw/moe_ab_qwen3_$moe_ab.json"
    step "moe_ab:mixtral$moe_ab" 200 env FG_GEMV=$moe_ab $T/engine_bench --config bench/configs/mixtral-8x7b \
      --backend cuda --kv-cache-memory 20GiB --skip-throughput --json "$OUT/raw/moe_ab_mixtral_$moe_ab.json"
  done
  step gemm_fp8 120 $T/gemm_fp8_bench --backend cuda --json "$OUT/raw/gemm_fp8.json"
  # cuBLASLt's first heuristic answer against its other answers and their split-K variants at the
  # row counts of batch-1 decode, batch-32 decode and batch-32 verification (1 + 4).
  step gemm_search 300 $T/gemm_algo_search --rows 1,32,160 --json "$OUT/raw/gemm_search.json"
  step mixtral 300 $T/engine_bench --config bench/configs/mixtral-8x7b --backend cuda --kv-cache-memory 30GiB \
    --num-requests 256 --prompt-len 1024 --output-len 1024 --json "$OUT/raw/mixtral.json"
  step qwen3_moe 240 $T/engine_bench --config bench/configs/qwen3-30b-a3b --backend cuda --kv-cache-memory $KV60 \
    --num-requests 512 --prompt-len 1024 --output-len 1024 --json "$OUT/raw/qwen3_moe.json"
  # The attention kernels alone at Gemma-2-9B's heads (16 / 8 of 256, soft-capped) and at the
  # -hd128 stand-in's (32 / 16 of 128: the same KV bytes and FLOPs), so the head sizes compare.
  step attention_hd256 120 $T/attention_bench --heads 16,8,256 --softcap 50 --quick \
    --json "$OUT/raw/attention_hd256.json"
  step attention_hd128_peer 120 $T/attention_bench --heads 32,16,128 --softcap 50 --quick \
    --json "$OUT/raw/attention_hd128_peer.json"
  # fp8 KV at head_dim 256: the page-16 rows with bf16 and fp8 pages side by side.
  step attention_hd256_fp8 150 $T/attention_bench --heads 16,8,256 --softcap 50 --only page16 \
    --json "$OUT/raw/attention_hd256_fp8.json"
  for cfg in gemma-2-9b gemma-2-9b-nocap gemma-2-9b-hd128 gemma-2-9b-hd128-nocap; do
    step "$cfg" 90 $T/engine_bench --config bench/configs/$cfg --backend cuda --kv-cache-memory 40GiB \
      --decode-prompt-len 6000 --decode-tokens 256 --skip-throughput --json "$OUT/raw/$cfg.json"
  done
  if [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" serve_bench "* ]]; then
    # serve_bench against flashgen serve with dummy-weight Llama-3.1-8B and the Llama 3 tokenizer,
    # twice in the same call: the prefill chunk under the latency budget (the default) and with
    # --no-adaptive-prefill (every step fills --max-batch-tokens), so their ITL p50/p99 and
    # throughput compare on the same GPU (docs/perf.md, "Steady inter-token latency").
    local variant
    for variant in adaptive fixed; do
      local extra=""
      [ "$variant" = fixed ] && extra="--no-adaptive-prefill"
      $T/flashgen serve --model $CFG --tokenizer .device/tok --dummy-weights --backend cuda --kv-cache-memory $KV60 \
        --port 8199 --no-log-requests --step-trace "$OUT/raw/steps_$variant.csv" $extra >"$OUT/raw/serve_$variant.log" 2>&1 &
      local spid=$!
      python3 - <<'PY'
import time, urllib.request
for _ in range(180):
    try:
        urllib.request.urlopen("http://127.0.0.1:8199/health", timeout=2); break
    except Exception:
        time.sleep(1)
PY
      # (the fixed run's JSON goes under raw/: $OUT holds at most 8 files)
      local name=serve_bench json=$OUT/serve.json
      [ "$variant" = fixed ] && name=serve_bench:fixed json=$OUT/raw/serve_fixed.json
      step $name 80 python3 bench/serve/serve_bench.py --url http://127.0.0.1:8199 --num-requests 400 \
        --concurrency 64 --prompt-len uniform:128:1024 --output-len fixed:128 --token-itl --check-idle --json "$json"
      python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8199/metrics").read().decode())' \
        | grep -E "^flashgen_(step_latency|decode_step|prefill_|engine_steps|inter_token)" | tee "$OUT/raw/metrics_$variant.txt"
      kill -TERM $spid; wait $spid
      echo "serve ($variant) exit after SIGTERM: $?"
      python3 tools/step_trace_summary.py "$OUT/raw/steps_$variant.csv"
    done
    python3 - "$OUT/serve.json" "$OUT/raw/serve_fixed.json" <<'PY'
import json, sys
rows = []
for label, path in zip(("adaptive", "fixed"), sys.argv[1:]):
    try:
        rows.append((label, json.load(open(path))))
    except OSError:
        print(f"serve_bench {label}: no result")
for label, r in rows:
    print(f"serve_bench {label:8}: ITL p50 {r['itl_ms_p50']:.2f} ms, p99 {r['itl_ms_p99']:.2f} ms "
          f"(p99/p50 {r['itl_ms_p99'] / r['itl_ms_p50']:.2f}), {r['output_tokens_per_s']:.0f} output tok/s, "
          f"TTFT p50 {r['ttft_ms_p50']:.0f} ms")
    if "token_itl_ms_p50" in r:
        print(f"  per token: ITL p50 {r['token_itl_ms_p50']:.2f} ms, p99 {r['token_itl_ms_p99']:.2f} ms "
              f"(p99/p50 {r['token_itl_ms_p99'] / r['token_itl_ms_p50']:.2f}), {r['token_itl_ms_count']} gaps")
if len(rows) == 2:
    print(f"adaptive / fixed output tok/s: {rows[0][1]['output_tokens_per_s'] / rows[1][1]['output_tokens_per_s']:.3f}")
PY
  fi

  # Tensor parallelism (docs/architecture.md, "Tensor parallelism"; needs N GPUs, named in STEPS only):
  # TP = 2/4/8 tokens against TP = 1, the all-reduce per decode step against NCCL's bus bandwidth
  # measured in the same call, and Llama-3.1-70B-shaped dummy weights: batch-1 decode against the
  # floor of one rank's bytes at TP = 2/4/8, offline 1k/1k at TP = 2 and 4.
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  local tp70=bench/configs/llama-3.1-70b
  if [ -n "${STEPS:-}" ]; then
    step tp_parity 300 .device/bin/tensor_parallel_tests --gtest_filter='TensorParallelCuda.*'
    for n in ${TP_SIZES:-2 4 8}; do
      [ "$gpus" -ge "$n" ] || { echo "=== TP $n skipped: $gpus GPUs"; continue; }
      step tp_allreduce 120 $T/tp_bench --tensor-parallel-size $n --config $tp70 --json "$OUT/raw/tp_allreduce_$n.json"
      step tp_decode 400 $T/engine_bench --config $tp70 --backend cuda --tensor-parallel-size $n \
        --kv-cache-memory 16GiB --skip-throughput --decode-prompt-len 1024 --decode-tokens 256 --json "$OUT/raw/tp_decode_$n.json"
      if [ "$n" -le 4 ]; then
        step tp_offline 560 $T/engine_bench --config $tp70 --backend cuda --tensor-parallel-size $n \
          --kv-cache-memory 40GiB --skip-decode --num-requests 256 --prompt-len 1024 --output-len 1024 \
          --json "$OUT/raw/tp_offline_$n.json"
      fi
    done
  fi

  if [[ " ${STEPS:-} " == *" soak "* ]]; then
    # The soak under faults (tools/soak.py, docs/reliability.md) at capacity: dummy-weight
    # Llama-3.1-8B with a 2 GiB KV pool (16k tokens) under 192 concurrent clients, so the engine
    # preempts all along; only when named in STEPS (it takes about 6 minutes).
    step soak 540 python3 tools/soak.py --flashgen $T/flashgen --duration 200 --concurrency 192 --prompts 32 \
      --prompt-len 128:1024 --max-tokens 16:128 --timeout 300 --expect-preemption --allow-mismatch \
      --log "$OUT/raw/soak_serve.log" --json "$OUT/soak.json" -- --model $CFG --tokenizer .device/tok \
      --dummy-weights --backend cuda --kv-cache-memory 2GiB
  fi

  tar -czf "$OUT/raw.tar.gz" -C "$OUT" raw && rm -rf "$OUT/raw"
  echo "=== summary"
  printf '%s\n' "${SUMMARY[@]}"
}

case "$MODE" in
  pack) pack ;;
  run) mkdir -p "${OUT:-$ROOT/gpu-suite-out}" && run_all 2>&1 | tee "${OUT:-$ROOT/gpu-suite-out}/suite.log" ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
