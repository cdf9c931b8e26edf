#!/bin/bash
# gpu-final.sh: one call on the lent GPU machine for the numbers of
# docs/BENCHMARKS.md's serving section: builds, runs the GPU tests and the
# engine tests on CUDA, the decode step table (bench/gpu/step; batch 1
# and 16 again with fp16 activations), the small-batch GEMM table
# (bench/gpu/gemv) and the serving benchmark with transformers' generate
# in the same run (bench/gpu/serving.sh).  Logs under $OUT; a short table
# last.
#     bash tools/gpu-final.sh      (carry .gpu-debs, see tools/gpu-run.sh)
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
B=build-gpu
M=/tmp/llama2-7b-random
. tools/gpu-deps.sh
[ -f $M/config.json ] || python3 bench/gpu/serving_torch.py make-model $M \
    > "$OUT/make-model.log" 2>&1 &
mkdir -p $B && touch $B/.deps
targets="engine model $B/bench/engine-bench $B/bench/gpu/step $B/bench/gpu/gemv
         $B/t/engine_kv.t $B/t/engine_ipc.t
         $(ls t/gpu/*.c | sed "s|t/gpu/\(.*\)\.c|$B/t/gpu/\1.t|")"
# shellcheck disable=SC2086
if ! make BUILD=$B -j"$(nproc)" $targets > "$OUT/build.log" 2>&1; then
    tail -20 "$OUT/build.log"
    exit 1
fi
status=0
for t in $B/t/gpu/*.t; do
    PAGEDLLM_BUILD=$PWD/$B timeout 120 $t >> "$OUT/test.log" 2>&1 || status=1
done
for t in engine_kv engine_ipc; do
    PAGEDLLM_TEST_DEVICE=cuda PAGEDLLM_BUILD=$PWD/$B timeout 120 $B/t/$t.t \
        >> "$OUT/test.log" 2>&1 || status=1
done
wait
$B/bench/gpu/gemv > "$OUT/gemv.log" 2>&1 || status=1
$B/bench/gpu/step $M 1,16,64,256 192 2>&1 | grep -v 'loading weights' \
    > "$OUT/step.log" || status=1
# fp16 activations (the weights converted at load)
PAGEDLLM_STEP_DTYPE=float16 $B/bench/gpu/step $M 1,16 192 2>&1 \
    | grep 'step batch' | sed 's/^/fp16: /' >> "$OUT/step.log" || status=1
OUT=$OUT sh bench/gpu/serving.sh $B > "$OUT/serving.out" 2>&1 || status=1

echo "---- tests: $(grep -c '^ok' "$OUT/test.log") ok, $(grep -c '^not ok' "$OUT/test.log") not ok"
grep '^not ok' "$OUT/test.log" | head
echo "---- gemv ----"
grep -E 'step n=|copy' "$OUT/gemv.log"
echo "---- step ----"
cat "$OUT/step.log"
echo "---- serving ----"
grep -E 'copy|transformers|^[0-9]|^# engine|^batch' "$OUT/serving.log"
exit $status
