#!/bin/sh
# Serving benchmark: starts engine + nginx (tools/run.sh) on a loopback
# port and drives it with pagedllm-load at several concurrency levels.
#   bench/serve.sh BUILD_DIR
#   PAGEDLLM_MODEL, PAGEDLLM_DEVICE, PAGEDLLM_ENGINE_ARGS as for tools/run.sh;
#   BENCH_PORT (18080), BENCH_CONC ("1 16 64"), BENCH_PROMPT (128),
#   BENCH_GEN (128), BENCH_REQUESTS (4 x concurrency, at least 16)
set -eu

build=$(cd "$1" && pwd)
port=${BENCH_PORT:-18080}
model=${PAGEDLLM_MODEL:-$build/models/tiny}
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json")
log=$build/bench-serve.log

PAGEDLLM_PORT=$port setsid tools/run.sh "$build" >"$log" 2>&1 &
server=$!
trap 'kill -TERM -- -$server 2>/dev/null || kill -TERM $server; wait $server 2>/dev/null || true' EXIT

i=0
until curl -sf "http://127.0.0.1:$port/pagedllm/status" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then
        echo "bench: the server did not come up; see $log" >&2
        exit 1
    fi
    sleep 0.1
done

echo "model $model, device ${PAGEDLLM_DEVICE:-auto}," \
     "prompt ${BENCH_PROMPT:-128}, generated ${BENCH_GEN:-128}," \
     "$(date -u +%Y-%m-%d), $(nproc) cores"
printf '%-12s %-14s %-14s %-12s %-12s\n' concurrency "output tok/s" \
    "total tok/s" "ttft p50 ms" "tpot ms"

for c in ${BENCH_CONC:-1 16 64}; do
    n=${BENCH_REQUESTS:-$((c * 4 > 16 ? c * 4 : 16))}
    "$build/bench/pagedllm-load" -p "$port" -c "$c" -n "$n" \
        -P "${BENCH_PROMPT:-128}" -G "${BENCH_GEN:-128}" -V "$vocab" \
    | awk -v c="$c" '
        { for (i = 1; i < NF; i++) {
              if ($i == "output") out = $(i + 1)
              if ($i == "total") tot = $(i + 1)
              if ($i == "p50") p50 = $(i + 1)
              if ($i == "tpot") tpot = $(i + 2)
          } }
        END { printf "%-12s %-14s %-14s %-12s %-12s\n", c, out, tot, p50, tpot }'
done
