#!/bin/sh
# Engine throughput on a Llama-2-7B-shaped model (random bf16 weights) on
# the lent GPU, side by side with transformers' generate in the same run:
# output tokens/s at several batch sizes and the batch-1 decode step,
# against the floor of reading the weights once at the measured copy
# bandwidth.  Logs under $OUT.
#   sh bench/gpu/serving.sh BUILD   (BUILD has pagedllm-engine, bench/engine-bench
#                                     and models/tiny for its tokenizer.json)
# Environment: BENCH_BATCHES (1,16,64,256), BENCH_PROMPT, BENCH_GEN (128),
# BENCH_BASELINE=0 skips transformers (the copy bandwidth is still
# measured), BENCH_VARIANTS="label:engine flags;label:flags" runs the
# engine once per variant (default: one run with default flags).
set -eu

build=$1
out=${OUT:-gpu-out}
model=/tmp/llama2-7b-random
batches=${BENCH_BATCHES:-1,16,64,256}
P=${BENCH_PROMPT:-128}
G=${BENCH_GEN:-128}
variants=${BENCH_VARIANTS:-default:}
sock=/tmp/pl-serving.sock

if [ ! -f "$model/config.json" ]; then
    python3 bench/gpu/serving_torch.py make-model "$model" \
        | tee -a "$out/serving.log"
fi
cp "$build/models/tiny/tokenizer.json" "$model/"
if [ "${BENCH_BASELINE:-1}" = 1 ]; then
    python3 bench/gpu/serving_torch.py baseline "$model" "$batches" "$P" "$G" \
        | tee -a "$out/serving.log"
else
    python3 bench/gpu/serving_torch.py copy | tee -a "$out/serving.log"
fi

run_variant() {
    label=$1
    shift
    rm -f "$sock"
    # shellcheck disable=SC2086
    "$build/pagedllm-engine" --model "$model" --listen "$sock" --device cuda \
        "$@" > "$out/engine-$label.log" 2>&1 &
    engine=$!
    i=0
    while [ ! -S "$sock" ]; do
        i=$((i + 1))
        if [ $i -gt 1200 ] || ! kill -0 $engine 2>/dev/null; then
            tail -20 "$out/engine-$label.log"
            return 1
        fi
        sleep 0.1
    done
    echo "# engine $label: flags '$*'" | tee -a "$out/serving.log"
    grep -E "KV cache|weights|graph|activation" "$out/engine-$label.log" \
        | tail -4
    rc=0
    "$build/bench/engine-bench" -s "$sock" -b "$batches" -P "$P" -G "$G" \
        -V 32000 | tee -a "$out/serving.log" || rc=1
    kill $engine 2>/dev/null || true
    wait $engine 2>/dev/null || true
    return $rc
}

status=0
old_ifs=$IFS
IFS=';'
set -f
for v in $variants; do
    IFS=$old_ifs
    # shellcheck disable=SC2086
    run_variant "${v%%:*}" ${v#*:} || status=1
    IFS=';'
done
IFS=$old_ifs
exit $status
