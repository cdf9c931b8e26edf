#!/bin/sh
# Serving benchmark: starts engine + nginx (tools/run.sh) on a loopback
# port, in its own run folder BUILD_DIR/bench-run (so a server of make run,
# in BUILD_DIR/run, goes on undisturbed), and drives it with
# pagedllm-load, printing a table; each run's
# JSON line (pagedllm-load --help lists its fields) is kept in
# BUILD_DIR/bench-serve.jsonl.
#   bench/serve.sh BUILD_DIR
#   PAGEDLLM_MODEL, PAGEDLLM_DEVICE, PAGEDLLM_ENGINE_ARGS as for tools/run.sh;
#   BENCH_PORT (18080);
#   closed loop: BENCH_CONC ("1 16 64") clients, BENCH_PROMPT (128) and
#     BENCH_GEN (128) tokens, BENCH_REQUESTS (4 x concurrency, at least 16);
#   Poisson arrivals, when BENCH_RATES is set (e.g. "1 2 4"): BENCH_DIST
#     (sharegpt) lengths, BENCH_REQUESTS (64) a rate, BENCH_LOAD_ARGS more
#     pagedllm-load flags (e.g. "--n 4" or "--shared-prefix 5shot")
set -eu

build=$(cd "$1" && pwd)
port=${BENCH_PORT:-18080}
model=${PAGEDLLM_MODEL:-$build/models/tiny}
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json")
log=$build/bench-serve.log
jsonl=$build/bench-serve.jsonl

PAGEDLLM_PORT=$port PAGEDLLM_RUN_DIR=$build/bench-run \
    setsid tools/run.sh "$build" >"$log" 2>&1 &
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

: >"$jsonl"

# a row of the table from pagedllm-load's JSON line: the first column,
# then the named fields
row() {
    tee -a "$jsonl" | awk -v first="$1" -v keys="$2" '
        { n = split(keys, k, " "); line = sprintf("%-10s", first)
          for (i = 1; i <= n; i++) {
              v = "-"
              if (match($0, "\"" k[i] "\":[^,}]*")) {
                  v = substr($0, RSTART + length(k[i]) + 3,
                             RLENGTH - length(k[i]) - 3)
                  if (v != "null") v = sprintf("%.4g", v)
              }
              line = line sprintf(" %-12s", v)
          }
          print line }'
}

echo "model $model, device ${PAGEDLLM_DEVICE:-auto}, $(date -u +%Y-%m-%d)," \
     "$(nproc) cores"

cols="output_tokens_per_s total_tokens_per_s ttft_p50_ms tpot_p50_ms failed"
echo "closed loop: prompt ${BENCH_PROMPT:-128}, generated ${BENCH_GEN:-128}"
printf '%-10s %-12s %-12s %-12s %-12s %-12s\n' clients "output tok/s" \
    "total tok/s" "ttft p50 ms" "tpot p50 ms" failed

for c in ${BENCH_CONC:-1 16 64}; do
    n=${BENCH_REQUESTS:-$((c * 4 > 16 ? c * 4 : 16))}
    "$build/bench/pagedllm-load" -p "$port" -c "$c" -n "$n" \
        -P "${BENCH_PROMPT:-128}" -G "${BENCH_GEN:-128}" -V "$vocab" \
    | row "$c" "$cols"
done

if [ -n "${BENCH_RATES:-}" ]; then
    cols="request_rate output_tokens_per_s norm_latency_mean_s ttft_p50_ms"
    cols="$cols running_mean kv_usage_mean failed"
    echo "Poisson arrivals: ${BENCH_DIST:-sharegpt} lengths," \
         "${BENCH_REQUESTS:-64} requests a rate ${BENCH_LOAD_ARGS:-}"
    printf '%-10s %-12s %-12s %-12s %-12s %-12s %-12s %-12s\n' "req/s" \
        "achieved" "output tok/s" "norm s/tok" "ttft p50 ms" running \
        "kv usage" failed
    for r in $BENCH_RATES; do
        # shellcheck disable=SC2086
        "$build/bench/pagedllm-load" -p "$port" --rate "$r" \
            -n "${BENCH_REQUESTS:-64}" --dist "${BENCH_DIST:-sharegpt}" \
            -V "$vocab" ${BENCH_LOAD_ARGS:-} \
        | row "$r" "$cols"
    done
fi
