#!/bin/sh
# Engine throughput on a Llama-2-7B-shaped model (random bf16 weights) on
# the lent GPU, side by side with transformers' generate in the same run:
# output tokens/s at several batch sizes and the batch-1 decode step,
# against the floor of reading the weights once at the measured copy
# bandwidth.  Logs under $OUT.
#   sh bench/gpu/serving.sh BUILD   (BUILD has pagedllm-engine, bench/engine-bench
#                                     and models/tiny for its tokenizer.json)
set -eu

build=$1
out=${OUT:-gpu-out}
model=/tmp/llama2-7b-random
batches=${BENCH_BATCHES:-1,16,64,256}
P=${BENCH_PROMPT:-128}
G=${BENCH_GEN:-128}
sock=/tmp/pl-serving.sock

python3 bench/gpu/serving_torch.py make-model "$model" | tee "$out/serving.log"
cp "$build/models/tiny/tokenizer.json" "$model/"
python3 bench/gpu/serving_torch.py baseline "$model" "$batches" "$P" "$G" \
    | tee -a "$out/serving.log"

"$build/pagedllm-engine" --model "$model" --listen "$sock" --device cuda \
    > "$out/engine.log" 2>&1 &
engine=$!
trap 'kill $engine 2>/dev/null || true' EXIT
i=0
while [ ! -S "$sock" ]; do
    i=$((i + 1))
    if [ $i -gt 1200 ] || ! kill -0 $engine 2>/dev/null; then
        tail -20 "$out/engine.log"
        exit 1
    fi
    sleep 0.1
done
grep -E "KV cache|weights" "$out/engine.log" | tail -3
"$build/bench/engine-bench" -s "$sock" -b "$batches" -P "$P" -G "$G" \
    -V 32000 | tee -a "$out/serving.log"
