#!/bin/sh
# gpu-run.sh: the one script a call on the lent GPU machine runs.  Builds
# with `make BUILD=build-gpu`, then runs the stages named (default: test
# bench), logs under $OUT (or ./gpu-out), a short table last:
#
#     sh tools/gpu-run.sh [test] [bench] [serving] [sweep] [profile]
#
# test     make test-gpu (every CUDA kernel against its CPU twin, the
#          model against the CPU backend and transformers' fixtures), the
#          engine tests on CUDA, compute-sanitizer over the tiny model;
# bench    make bench-gpu: attention (ours on shuffled blocks and on the
#          engine's layout, torch's scaled_dot_product_attention in the
#          same run), the small-batch GEMV against cuBLAS;
# serving  a Llama-2-7B-shaped random bf16 model: the decode step against
#          the weight-read floor (bench/gpu/step) and the engine's
#          throughput beside transformers' generate (bench/gpu/serving.sh);
# sweep    the decode benchmark under each setting of the decode kernel's
#          knobs (splits, cluster merge, KV heads a block, grid order),
#          one line of TB/s per setting, and graphs.t with the decode grid
#          rows first;
# profile  the decode and prefill kernels under ncu.
# The machine has no network: tools/gpu-deps.sh unpacks the jansson
# packages carried in .gpu-debs/ there (carry ".gpu-debs").
set -u

OUT=${OUT:-gpu-out}
TEST=0
BENCH=0
SERVING=0
SWEEP=0
PROFILE=0
[ $# -eq 0 ] && set -- test bench
for a in "$@"; do
    case $a in
    test) TEST=1 ;;
    bench) BENCH=1 ;;
    serving) SERVING=1 ;;
    sweep) SWEEP=1 ;;
    profile) PROFILE=1 ;;
    *) echo "gpu-run.sh: unknown stage '$a'" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
B=build-gpu
JOBS=$(nproc 2>/dev/null || echo 4)
status=0

log() { echo "== $*" | tee -a "$OUT/summary.log"; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm \
      --format=csv,noheader; nvcc --version | tail -1; } \
    > "$OUT/machine.log" 2>&1
log "machine: $(head -1 "$OUT/machine.log")"

. tools/gpu-deps.sh

# no apt there: mark the Debian packages as handled
mkdir -p $B && touch $B/.deps

if ! make BUILD=$B -j"$JOBS" $B/libpagedllm.a $B/mktinymodel \
        > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"
    log "BUILD FAILED"
    exit 1
fi
log "build ok"

if [ $TEST = 1 ]; then
    if command -v prove >/dev/null 2>&1; then
        make BUILD=$B -j"$JOBS" test-gpu > "$OUT/test.log" 2>&1 || status=1
    else
        make BUILD=$B -j"$JOBS" engine model $(ls t/gpu/*.c | sed "s|t/gpu/\(.*\)\.c|$B/t/gpu/\1.t|") \
            > "$OUT/test.log" 2>&1 || status=1
        for t in $B/t/gpu/*.t; do
            PAGEDLLM_BUILD=$(pwd)/$B $t >> "$OUT/test.log" 2>&1 || status=1
        done
    fi
    grep -E "^(not ok|ok)|^# seed|Result|Files=" "$OUT/test.log" \
        | sed 's/^/  /' > "$OUT/test-summary.log"
    log "tests: $(grep -c '^ok' "$OUT/test.log") ok," \
        "$(grep -c '^not ok' "$OUT/test.log") not ok"

    if command -v compute-sanitizer >/dev/null 2>&1; then
        PAGEDLLM_BUILD=$(pwd)/$B timeout 120 compute-sanitizer --tool memcheck \
            --error-exitcode 9 $B/t/gpu/model.t > "$OUT/memcheck.log" 2>&1
        log "memcheck on the tiny model: exit $? ($(grep -c '^ok' \
            "$OUT/memcheck.log") ok, $(tail -1 "$OUT/memcheck.log"))"
    fi
    make BUILD=$B -j"$JOBS" engine $B/t/engine_kv.t $B/t/engine_ipc.t \
        >> "$OUT/build.log" 2>&1 || status=1
    for t in engine_kv engine_ipc; do
        PAGEDLLM_TEST_DEVICE=cuda PAGEDLLM_BUILD=$(pwd)/$B timeout 300 \
            $B/t/$t.t > "$OUT/test-cuda-$t.log" 2>&1 || status=1
        log "$t.t on cuda: $(grep -c '^ok' "$OUT/test-cuda-$t.log") ok," \
            "$(grep -c '^not ok' "$OUT/test-cuda-$t.log") not ok"
    done
fi

if [ $BENCH = 1 ]; then
    make BUILD=$B -j"$JOBS" bench-gpu > "$OUT/bench.log" 2>&1 || status=1
fi
if [ $SERVING = 1 ]; then
    M=/tmp/llama2-7b-random
    make BUILD=$B -j"$JOBS" engine $B/bench/engine-bench $B/bench/gpu/step \
        > "$OUT/build-serving.log" 2>&1 || status=1
    [ -f $M/config.json ] || python3 bench/gpu/serving_torch.py make-model \
        $M > "$OUT/make-model.log" 2>&1
    $B/bench/gpu/step $M 1,16,64,256 192 2>&1 | grep -v 'loading weights' \
        > "$OUT/step.log" || status=1
    OUT=$OUT sh bench/gpu/serving.sh $B > "$OUT/serving.out" 2>&1 || status=1
fi
if [ $SWEEP = 1 ]; then
    # the decode benchmark under each setting of the decode kernel's
    # knobs (PAGEDLLM_CUDA_ATTN_<name>=<value>, kernels/pl_cuda.cuh);
    # the first line is the defaults
    for v in "" "SPLIT_MIN=64" "SPLIT_MIN=128" "SPLITS=12" "SPLITS=16" \
             "CLUSTER=0" "HEADS=1" "ORDER=0"; do
        echo "# ${v:-defaults}" >> "$OUT/sweep.log"
        env $(for kv in $v; do echo "PAGEDLLM_CUDA_ATTN_$kv"; done) \
            $B/bench/gpu/attention decode >> "$OUT/sweep.log" 2>&1
    done
    # the defaults on caches whose blocks lie in order, in shuffled runs
    # of four (one 64-token tile) and as the engine lays them: what the
    # scatter of shuffled blocks costs
    echo "# bench blocks in order" >> "$OUT/sweep.log"
    PAGEDLLM_BENCH_BLOCKS=ordered $B/bench/gpu/attention decode \
        >> "$OUT/sweep.log" 2>&1
    echo "# bench blocks in runs of 4" >> "$OUT/sweep.log"
    PAGEDLLM_BENCH_BLOCKS=runs:4 $B/bench/gpu/attention decode \
        >> "$OUT/sweep.log" 2>&1
    echo "# bench blocks as the engine's block manager lays them" \
        >> "$OUT/sweep.log"
    PAGEDLLM_BENCH_BLOCKS=engine $B/bench/gpu/attention decode \
        >> "$OUT/sweep.log" 2>&1
    # where the blocks' time goes (bench/gpu/attention-trace)
    PAGEDLLM_BENCH_TRACE=1 $B/bench/gpu/attention-trace decode \
        | grep '^trace' > "$OUT/trace.log" 2>&1
    # the decode grid rows first inside CUDA graphs
    PAGEDLLM_BUILD=$(pwd)/$B PAGEDLLM_CUDA_ATTN_ORDER=0 $B/t/gpu/graphs.t \
        > "$OUT/sweep-tests.log" 2>&1
    echo "# graphs.t with ORDER=0: exit $?" >> "$OUT/sweep-tests.log"
fi
if [ $PROFILE = 1 ] && command -v ncu >/dev/null 2>&1; then
    for skip in 3 175; do
        timeout 120 ncu --clock-control none -k regex:decode_attention \
            --launch-skip $skip --launch-count 1 --section SpeedOfLight \
            --section Occupancy --section WarpStateStats \
            --section MemoryWorkloadAnalysis $B/bench/gpu/attention decode \
            >> "$OUT/ncu.log" 2>&1
    done
    # the prefill kernel (4th launch: after the warm-up) with TMA and with
    # cp.async loads; sections first, then stall
    # reasons and tensor-pipe use as raw metrics (a separate call, so a
    # metric this ncu lacks costs only that part)
    for v in "" PAGEDLLM_CUDA_PREFILL_LOADS=cpasync; do
        echo "# prefill ${v:-default}" >> "$OUT/ncu-prefill.log"
        env $v timeout 120 ncu --clock-control none \
            -k regex:prefill_attention --launch-skip 3 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis \
            --section WarpStateStats --section MemoryWorkloadAnalysis \
            $B/bench/gpu/attention prefill-one >> "$OUT/ncu-prefill.log" 2>&1
        env $v timeout 120 ncu --clock-control none \
            -k regex:prefill_attention --launch-skip 3 --launch-count 1 \
            --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,lts__t_sector_hit_rate.pct \
            $B/bench/gpu/attention prefill-one >> "$OUT/ncu-prefill.log" 2>&1
    done
fi

echo
if [ $TEST = 1 ]; then
    echo "---- tests ----"
    grep -v '^  ok' "$OUT/test-summary.log"
fi
if [ $BENCH = 1 ]; then
    echo "---- benchmarks (median of 40 calls) ----"
    grep -E "^(ours|torch|#)" "$OUT/bench.log"
fi
if [ $SERVING = 1 ]; then
    echo "---- decode step ----"
    cat "$OUT/step.log"
    echo "---- serving ----"
    grep -E 'copy|transformers|^[0-9]|^# engine|^batch' "$OUT/serving.log"
fi
if [ -f "$OUT/sweep.log" ]; then
    echo "---- sweep: decode TB/s per shape (order of the bench lines) ----"
    awk '/^# / { if (n) print line; line = sprintf("%-44s", substr($0, 3));
                 n = 1; next }
         /^ours decode/ { line = line " " $6 }
         END { if (n) print line }' "$OUT/sweep.log"
    grep -E "^ours decode" "$OUT/sweep.log" | head -8 | awk '{ print "  " $3 }' \
        | tr '\n' ' '; echo
    grep -E "^not ok|^# .*exit" "$OUT/sweep-tests.log"
    cut -c1-400 "$OUT/trace.log"
fi
if [ -f "$OUT/ncu.log" ]; then
    echo "---- ncu ----"
    grep -E "decode_attention|prefill_attention|DRAM Through|Memory Through|Compute \(SM\)|Achieved Occ|Theoretical Occ|Duration|Warp Cycles Per Issued|Issued Ipc|Block Limit" "$OUT/ncu.log"
fi
if [ -f "$OUT/ncu-prefill.log" ]; then
    echo "---- ncu prefill ----"
    grep -E "^# prefill|^ours|Duration|Compute \(SM\)|Memory Through|L2 Cache Through|L1/TEX Hit|L2 Hit|Warp Cycles Per Issued|Issued Ipc|Executed Ipc|SM Busy|sm__pipe|stalled|lts__t_sector|==ERROR|==WARNING" "$OUT/ncu-prefill.log"
fi
exit $status
