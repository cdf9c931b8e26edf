#!/bin/sh
# Structured output's cost on the lent GPU: engine-bench -g (each batch
# unconstrained, then every request held to a JSON Schema's grammar, in
# the same run) on the Llama-3-8B shape (random bf16 weights,
# bench/paper/make_model.py) with Llama 3's real tokenizer.json, so the
# masks are computed over the real 128,256-token vocabulary.  Logs under
# $OUT.
#   sh bench/gpu/grammar.sh BUILD TOKENIZER_JSON
#   (BUILD has pagedllm-engine, pagedllm-grammar and bench/engine-bench)
# Environment: BENCH_BATCHES (1,64,256), BENCH_PROMPT, BENCH_GEN (128),
# BENCH_SCHEMA (bench/schema-open.json), PAPER_MODELS (/tmp/paper-models,
# where the random weights are kept between calls).
set -eu

build=$1
tokenizer=$2
out=${OUT:-gpu-out}
models=${PAPER_MODELS:-/tmp/paper-models}
weights=$models/llama3-8b
model=$models/llama3-8b-real-vocab
schema=${BENCH_SCHEMA:-bench/schema-open.json}
batches=${BENCH_BATCHES:-1,64,256}
sock=/tmp/pl-grammar-bench.sock

mkdir -p "$out" "$models"
if [ ! -f "$weights/config.json" ]; then
    python3 bench/paper/make_model.py llama3-8b "$weights" \
        | tee -a "$out/grammar.log"
fi
# the weights by link, the real tokenizer beside them
mkdir -p "$model"
for f in "$weights"/*.json "$weights"/*.safetensors; do
    case $(basename "$f") in
    tokenizer*.json) ;;
    *) ln -sf "$f" "$model/" ;;
    esac
done
cp "$tokenizer" "$model/tokenizer.json"

"$build/pagedllm-grammar" --schema "$schema" --print > "$out/schema.ebnf"
echo "# grammar of $schema: $(wc -c < "$out/schema.ebnf") bytes" \
    | tee -a "$out/grammar.log"

rm -f "$sock"
"$build/pagedllm-engine" --model "$model" --listen "$sock" --device cuda \
    --max-model-len 2048 > "$out/grammar-engine.log" 2>&1 &
engine=$!
trap 'kill $engine 2>/dev/null || true; wait $engine 2>/dev/null || true' EXIT
i=0
while [ ! -S "$sock" ]; do
    i=$((i + 1))
    if [ $i -gt 1800 ] || ! kill -0 $engine 2>/dev/null; then
        tail -20 "$out/grammar-engine.log"
        exit 1
    fi
    sleep 0.1
done
"$build/bench/engine-bench" -s "$sock" -b "$batches" \
    -P "${BENCH_PROMPT:-128}" -G "${BENCH_GEN:-128}" -V 128256 \
    -g "$out/schema.ebnf" | tee -a "$out/grammar.log"
