#!/bin/sh
# gpu-run.sh: the one script a call on the lent GPU machine runs.  Builds
# with `make BUILD=build-gpu`, runs the GPU tests (make test-gpu), the
# kernel benchmarks (make bench-gpu, ours and torch's in the same run) and
# prints a short table last.  Logs go to $OUT (or ./gpu-out).
#
#     sh tools/gpu-run.sh [sweep] [profile]
#
# "sweep" also runs the decode benchmark under fixed split counts and
# pipeline depths; "profile" runs it and the prefill one under ncu.
# The machine has no network: when jansson's headers are missing there,
# the Debian packages carried in .gpu-debs/ are unpacked under /tmp
# (fetch them here once: mkdir .gpu-debs && cd .gpu-debs &&
# apt-get download libjansson4 libjansson-dev; then carry ".gpu-debs").
set -u

OUT=${OUT:-gpu-out}
SWEEP=0
PROFILE=0
for a in "$@"; do
    case $a in
    sweep) SWEEP=1 ;;
    profile) PROFILE=1 ;;
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

if ! printf '#include <jansson.h>\n' | cc -E - >/dev/null 2>&1; then
    for f in .gpu-debs/*.deb; do dpkg -x "$f" /tmp/pl-deps; done
    export C_INCLUDE_PATH=/tmp/pl-deps/usr/include
    export LIBRARY_PATH=/tmp/pl-deps/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=/tmp/pl-deps/usr/lib/x86_64-linux-gnu
fi

# no apt there: mark the Debian packages as handled
mkdir -p $B && touch $B/.deps

if ! make BUILD=$B -j"$JOBS" $B/libpagedllm.a $B/mktinymodel \
        > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"
    log "BUILD FAILED"
    exit 1
fi
log "build ok"

if command -v prove >/dev/null 2>&1; then
    make BUILD=$B -j"$JOBS" test-gpu > "$OUT/test.log" 2>&1 || status=1
else
    make BUILD=$B -j"$JOBS" model $(ls t/gpu/*.c | sed "s|t/gpu/\(.*\)\.c|$B/t/gpu/\1.t|") \
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

make BUILD=$B -j"$JOBS" bench-gpu > "$OUT/bench.log" 2>&1 || status=1
if [ $SWEEP = 1 ]; then
    for v in "2 128" "3 128" "2 512"; do
        set -- $v
        echo "# stages $1 split_min $2" >> "$OUT/sweep.log"
        PAGEDLLM_CUDA_ATTN_STAGES=$1 PAGEDLLM_CUDA_ATTN_SPLIT_MIN=$2 \
            $B/bench/gpu/attention decode >> "$OUT/sweep.log" 2>&1
    done
fi
if [ $PROFILE = 1 ] && command -v ncu >/dev/null 2>&1; then
    for skip in 3 175; do
        timeout 120 ncu --clock-control none -k regex:decode_attention \
            --launch-skip $skip --launch-count 1 --section SpeedOfLight \
            --section Occupancy --section WarpStateStats \
            --section MemoryWorkloadAnalysis $B/bench/gpu/attention decode \
            >> "$OUT/ncu.log" 2>&1
    done
fi

echo
echo "---- tests ----"
grep -v '^  ok' "$OUT/test-summary.log"
echo "---- benchmarks (median of 40 calls) ----"
grep -E "^(ours|torch|#)" "$OUT/bench.log"
if [ -f "$OUT/sweep.log" ]; then
    echo "---- sweep ----"
    grep -E "^(# |ours decode)" "$OUT/sweep.log"
fi
if [ -f "$OUT/ncu.log" ]; then
    echo "---- ncu ----"
    grep -E "decode_attention|prefill_attention|DRAM Through|Memory Through|Compute \(SM\)|Achieved Occ|Theoretical Occ|Duration|Warp Cycles Per Issued|Issued Ipc|Block Limit" "$OUT/ncu.log"
fi
exit $status
