#!/bin/bash
# gpu-profile.sh: on the lent GPU machine, full ncu reports of the prefill
# kernel (4096 causal, 32 heads) and of the decode kernel at 1 x 4096, and
# the attention benchmark once.  Text reports and .ncu-rep files in $OUT.
#     bash tools/gpu-profile.sh      (carry .gpu-debs, see tools/gpu-run.sh)
set -u
. tools/gpu-deps.sh
B=build-gpu
mkdir -p $B; touch $B/.deps
make BUILD=$B -j16 $B/bench/gpu/attention > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
$B/bench/gpu/attention > $OUT/bench.log 2>&1
grep -E "^(ours|torch|copy)" $OUT/bench.log
timeout 200 ncu --clock-control none -k regex:prefill_attention --launch-skip 3 --launch-count 1 \
    --set full --import-source yes -o $OUT/prefill $B/bench/gpu/attention prefill-one > $OUT/ncu-prefill-run.log 2>&1
ncu --import $OUT/prefill.ncu-rep --print-details all > $OUT/ncu-prefill.txt 2>&1
timeout 120 ncu --clock-control none -k regex:decode_attention --launch-skip 3 --launch-count 1 \
    --set full -o $OUT/decode $B/bench/gpu/attention decode > $OUT/ncu-decode-run.log 2>&1
ncu --import $OUT/decode.ncu-rep --print-details all > $OUT/ncu-decode.txt 2>&1
grep -E "Duration|Compute \(SM\) Thr|Memory Thr|DRAM Thr|Achieved Occ|Registers Per|Issued Ipc|Warp Cycles Per Issued" $OUT/ncu-prefill.txt $OUT/ncu-decode.txt
ls -la $OUT
