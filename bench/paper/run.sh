#!/usr/bin/env bash
# bench/paper/run.sh: the PagedAttention paper's evaluation (Kwon et al.,
# SOSP 2023, Sec. 6) on this engine, one figure group per argument, for
# the lent H200:
#
#     bench/paper/run.sh GROUP...          (from the repository root)
#
# Every request is served as users' requests are: pagedllm-load (Poisson
# arrivals, token-id prompts, exact output lengths through ignore_eos)
# against nginx loading ngx_http_pagedllm_module, in front of
# pagedllm-engine --device cuda.  Models are random-weight bf16
# checkpoints of real shapes (bench/paper/make_model.py), made on the
# machine.  Figure numbers are those of issue 20's list (Figs. 14-27).
#
# "Held KV" is the paper's memory-bound regime: OPT-13B on an A100-40GB
# left about 12 GB for the KV cache, 15,728 tokens at 800 KB a token; the
# engine is held to the same number of tokens (--num-blocks 15728 / block
# size: 983 blocks of 16), whatever the model's bytes per token.
#
# Groups (budget: what the group plans to spend, printed at its start; a
# group stops starting runs when it is spent):
#   basic      Figs. 14-17, 420 s.  Llama-2-7B shape, held KV.  For each
#              of --kv-policy paged, orca-max, orca-oracle, orca-pow2 (one
#              engine each): ShareGPT-like then Alpaca-like Poisson rate
#              sweeps; normalized latency (s/token) against the rate, and
#              the mean batch (running requests from /metrics, and
#              generated tokens / iterations from the engine's counters).
#              Rates: ShareGPT 4..30 req/s, 3 s of arrivals (at least 12
#              requests), Alpaca 20..300 req/s, 2 s (at least 40); Orca-Max
#              also at half the lowest.  The baselines run first; a sweep
#              stops after the first rate whose normalized latency passes
#              PAPER_STOP_X (3) x the lowest first-rate latency so far.
#   sampling   Figs. 18-19, 570 s.  Alpaca rates with parallel sampling
#              (--n 2, 4, 6) and beam search (--beam-width 2, 4, 6), paged
#              against orca-oracle (PAPER_POLICIES), held KV;
#              PAPER_SAMPLING ("n beam") picks the panels.
#   memsave    Figs. 20-21, 300 s.  KV blocks saved by sharing: a closed
#              loop of 32 Alpaca-length requests with n = W samples (or
#              beam width W) against 32 x W single-sequence requests with
#              the same lengths, both with prefix caching off; saving =
#              1 - mean used blocks (shared) / mean used blocks
#              (unshared), the same number of sequences in flight.
#   prefix     Figs. 22-23, 420 s.  Shared prefix (--shared-prefix 1shot,
#              5shot: 80 and 341 tokens) on Alpaca-length requests, paged
#              with prefix caching against orca-oracle, held KV.
#   chat       Fig. 24, 420 s.  Chatbot: --chat-turns 4 on ShareGPT
#              lengths, all four policies, held KV, 2..10 req/s.
#   blocksize  Figs. 25-26, 540 s.  Paged, block sizes 1..64 with the KV
#              held at 15,728 tokens: normalized latency at one ShareGPT
#              and one Alpaca rate past paged's knee, where fragmentation
#              costs (PAPER_BS_RATES, "40 400").
#   preempt    Fig. 27, 540 s.  ShareGPT past paged's capacity, held KV
#              (PAPER_PREEMPT_RATE, 50 req/s): --preemption-mode
#              recompute, swap and auto at block sizes 4, 16 and 64;
#              latency and preemptions.
#   h200       Figs. 14-17 on the unconstrained H200 (the engine's default
#              KV sizing, --gpu-memory-utilization 0.90), 480 s.
#   llama3     Figs. 14-17 on the Llama-3-8B shape (GQA, 8 KV heads),
#              held KV, 480 s.
#   engines    Not the paper's: one engine at --gpu-memory-utilization
#              0.90 against two at 0.45 on the same GPU behind one nginx
#              (a pagedllm_engines group, PAPER_ROUTE least_load), the
#              Llama-3-8B shape with each engine's default KV sizing:
#              ShareGPT-like Poisson sweeps (PAPER_ENGINES_RATES, 10..70
#              req/s, PAPER_ENGINES_SECS 8 s of arrivals a rate), 480 s.
#
# Output: the logs of a group (engine and nginx logs, pagedllm-load's
# output, one JSON line per run in runs.jsonl, /metrics before and after
# each run, plots, summary.txt) go to $PAPER_LOGS/paper-GROUP/ (default
# /tmp/paper-logs); $OUT (default ./paper-out) receives only
# paper-GROUP.tar.gz (all of it), the group's PNGs and
# paper-GROUP-summary.txt: at most four files a group, so two groups fit
# the eight files a call on the device machine brings back.  Each runs.jsonl line: group, panel (workload or variant),
# series (policy or setting), x (rate, width or block size), the engine's
# flags, the engine counters' change over the run (iterations,
# generated and prompt tokens, preemptions, blocks swapped out) and
# pagedllm-load's own line under "load".
#
# Environment:
#   OUT, PAPER_LOGS       as above
#   PAGEDLLM_MODULE       the nginx module .so (default BUILD's); the GPU
#                         machine cannot build it: carry one in
#   PAPER_BUILD           build folder (build-gpu; built here with make
#                         BUILD=build-gpu unless PAPER_NO_BUILD=1)
#   PAPER_NGINX           nginx binary (default /usr/sbin/nginx, else the
#                         Debian packages carried in .gpu-debs/ unpacked
#                         under /tmp/pl-deps)
#   PAPER_MODELS          where random models are kept (/tmp/paper-models)
#   PAPER_DEADLINE_S      hard limit for the whole call from its start
#                         (570): no run starts past it, packing still runs
#   PAPER_BUDGET_S        overrides every group's budget
#   PAPER_BUDGET_<group>  overrides that group's budget (PAPER_BUDGET_basic)
#   PAPER_STOP_X          the sweep stop rule's factor (3)
#   PAPER_POLICIES        policies of the groups that compare them
#   PAPER_SG_RATES, PAPER_AL_RATES
#                         the ShareGPT and Alpaca rate lists of the held-KV
#                         groups (defaults below)
#   PAPER_H200_SG_RATES, PAPER_H200_AL_RATES
#                         the h200 group's ShareGPT and Alpaca rates
#                         ("12 24 36 48 64 80", "100 200 300 400 550 700")
#   PAPER_CHAT_RATES      the chat group's rates ("2 4 6 8 10")
#   PAPER_BS_RATES        the blocksize group's ShareGPT and Alpaca rates
#   PAPER_PREEMPT_RATE    the preempt group's ShareGPT rate
#   PAPER_MEMSAVE_ROUNDS  closed-loop rounds of each memsave run (12)
#   PAPER_NO_PLOT=1       no matplotlib: runs and summary only
#   PAPER_SMOKE=1         a check of the script on a machine without a GPU:
#                         the tiny model (BUILD/models/tiny), the CPU
#                         engine, tiny rates and few requests, built
#                         beforehand with make (BUILD defaults to build)
set -u

cd "$(dirname "$0")/../.." || exit 1

T0=$(date +%s)
SMOKE=${PAPER_SMOKE:-0}
OUT=${OUT:-paper-out}
LOGS=${PAPER_LOGS:-/tmp/paper-logs}
MODELS=${PAPER_MODELS:-/tmp/paper-models}
DEADLINE=$((T0 + ${PAPER_DEADLINE_S:-570}))
STOP_X=${PAPER_STOP_X:-3}
PORT=${PAPER_PORT:-18480}
HELD_TOKENS=15728
MAX_LEN=2048
SOCK=/tmp/paper-engine.sock
ENGINES=1                   # engines per served configuration
ROUTE=${PAPER_ROUTE:-least_load}
JOBS=$(nproc 2>/dev/null || echo 4)

if [ "$SMOKE" = 1 ]; then
    B=${PAPER_BUILD:-build}
    DEVICE=cpu
    HELD_TOKENS=4096
    ENGINE_COMMON="--threads 2"
    WORKERS=2
    START_S=1
else
    B=${PAPER_BUILD:-build-gpu}
    DEVICE=cuda
    ENGINE_COMMON=""
    WORKERS=4
    START_S=15                  # an engine's start-up, charged to its share
fi
MODULE=${PAGEDLLM_MODULE:-$B/ngx_http_pagedllm_module.so}
LOAD=$B/bench/pagedllm-load

ENGINE_PID=""
NGINX_PID=""
W=""                        # the running group's log folder

now() { date +%s; }
say() { echo "[$(($(now) - T0))s] $*" | tee -a "${W:-/dev/null}/summary.log"; }
left() { echo $((DEADLINE - $(now))); }


# ---- the machine: dependencies, build, nginx ------------------------------

prepare() {
    mkdir -p "$OUT" "$LOGS"
    if [ "$SMOKE" != 1 ]; then
        # jansson when missing (tools/gpu-deps.sh), nginx below
        . tools/gpu-deps.sh
    fi
    NGINX=${PAPER_NGINX:-}
    if [ -z "$NGINX" ]; then
        if [ -x /usr/sbin/nginx ]; then
            NGINX=/usr/sbin/nginx
        else
            if [ ! -x /tmp/pl-deps/usr/sbin/nginx ]; then
                for f in .gpu-debs/*.deb; do dpkg -x "$f" /tmp/pl-deps; done
            fi
            NGINX=/tmp/pl-deps/usr/sbin/nginx
        fi
    fi
    if ! "$NGINX" -v > /dev/null 2>&1; then
        echo "paper: $NGINX does not run:" >&2
        ldd "$NGINX" | grep 'not found' >&2
        exit 1
    fi
    if [ "$SMOKE" != 1 ] && [ "${PAPER_NO_BUILD:-0}" != 1 ]; then
        mkdir -p "$B" && touch "$B/.deps"
        echo "building in $B ..."
        if ! make BUILD="$B" -j"$JOBS" engine model "$LOAD" \
                > "$LOGS/build.log" 2>&1; then
            tail -30 "$LOGS/build.log"
            echo "paper: the build failed ($LOGS/build.log)" >&2
            exit 1
        fi
        echo "built in $(($(now) - T0)) s"
    fi
    for f in "$B/pagedllm-engine" "$LOAD" "$MODULE" "$NGINX" \
             "$B/models/tiny/tokenizer.json"; do
        if [ ! -e "$f" ]; then
            echo "paper: $f is missing" >&2
            exit 1
        fi
    done
    if [ "$SMOKE" != 1 ]; then
        nvidia-smi --query-gpu=name,memory.total,driver_version \
            --format=csv,noheader > "$LOGS/machine.txt" 2>&1
    fi
    uname -a >> "$LOGS/machine.txt"
}


# A random checkpoint of SHAPE, made once (the smoke test: a copy of the
# tiny model), with a tokenizer over its whole vocabulary built from the
# tiny model's (make_model.py tokenizer), so that every sampled id
# decodes to text.  Sets MODEL and VOCAB.
use_model() {
    if [ "$SMOKE" = 1 ]; then
        MODEL=$MODELS/tiny
        rm -rf "$MODEL"
        mkdir -p "$MODELS"
        cp -r "$B/models/tiny" "$MODEL"
    else
        MODEL=$MODELS/$1
        if [ ! -f "$MODEL/config.json" ]; then
            say "making the $1 model in $MODEL"
            python3 bench/paper/make_model.py "$1" "$MODEL" \
                >> "$W/logs/make-model.log" 2>&1 || return 1
            tail -1 "$W/logs/make-model.log" | tee -a "$W/summary.log"
        fi
    fi
    python3 bench/paper/make_model.py tokenizer "$MODEL" "$B/models/tiny" \
        >> "$W/logs/make-model.log" 2>&1 || return 1
    VOCAB=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$MODEL/config.json")
}


# ---- engine and nginx -----------------------------------------------------

# GET PATH from nginx on PORT, the body on stdout (bash's /dev/tcp: the GPU
# machine may have no curl)
http_get() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 1
        printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
        sed '1,/^\r$/d' <&3
    ) 2>/dev/null
}

# the engine counters a run's record carries, as JSON members
counters() {
    http_get /metrics | awk '
        /^pagedllm_iterations_total[ {]/ { it += $2 }
        /^pagedllm_generation_tokens_total[ {]/ { gen += $2 }
        /^pagedllm_prompt_tokens_total[ {]/ { pr += $2 }
        /^pagedllm_preemptions_total/ { pre += $2 }
        /^pagedllm_swapped_blocks_total\{.*direction="out"/ { sw += $2 }
        /^pagedllm_kv_blocks_capacity[ {]/ { cap += $2 }
        END { printf "%d %d %d %d %d %d\n", it, gen, pr, pre, sw, cap }'
}

# the engines' directive: one engine, or ENGINES of them in the group
# "paper" routed by ROUTE
engines_conf() {
    local i=0
    if [ "$ENGINES" -le 1 ]; then
        echo "pagedllm_engine unix:$SOCK;"
        return
    fi
    printf 'pagedllm_engines paper {'
    while [ $i -lt "$ENGINES" ]; do
        printf ' engine unix:%s;' "$(engine_sock $i)"
        i=$((i + 1))
    done
    printf ' }\n    pagedllm_route %s;\n' "$ROUTE"
}

# engine I's socket: SOCK itself for the only engine
engine_sock() {
    if [ "$ENGINES" -le 1 ]; then echo "$SOCK"; else echo "${SOCK%.sock}$1.sock"; fi
}

nginx_conf() {
    local run=$1 user=""
    [ "$(id -u)" -eq 0 ] && user="user root;"
    mkdir -p "$run/conf" "$run/logs" "$run/tmp"
    cat > "$run/conf/nginx.conf" <<EOF
load_module $(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE");
$user
worker_processes $WORKERS;
error_log stderr notice;
pid $run/nginx.pid;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $run/tmp/client_body;
    proxy_temp_path $run/tmp/proxy;
    fastcgi_temp_path $run/tmp/fastcgi;
    uwsgi_temp_path $run/tmp/uwsgi;
    scgi_temp_path $run/tmp/scgi;
    $(engines_conf)
    server {
        listen 127.0.0.1:$PORT backlog=4096;
        location /v1/ { pagedllm$( [ "$ENGINES" -gt 1 ] && echo " paper"); }
        location = /pagedllm/status { pagedllm_status; }
        location = /metrics { pagedllm_metrics; }
    }
}
EOF
}

# serve LABEL ENGINE_FLAGS...: ENGINES engines (one unless set) and nginx
# up, attached and warm; ENGINE_FLAGS is kept for the runs' records.  The
# engines start one after another, each measuring its memory on a device
# the previous ones have finished taking theirs from
serve() {
    local label=$1 i=0 k=0 sock attached
    shift
    ENGINE_FLAGS="$*"
    ENGINE_PID=""
    while [ $k -lt "$ENGINES" ]; do
        sock=$(engine_sock $k)
        rm -f "$sock"
        # shellcheck disable=SC2086
        "$B/pagedllm-engine" --model "$MODEL" --listen "$sock" \
            --device "$DEVICE" --max-model-len $MAX_LEN $ENGINE_COMMON "$@" \
            > "$W/logs/engine-$label-$k.log" 2>&1 &
        ENGINE_PID="$ENGINE_PID $!"
        i=0
        while [ ! -S "$sock" ]; do
            i=$((i + 1))
            if [ $i -gt 1800 ] || ! kill -0 $! 2>/dev/null; then
                say "engine $label $k did not start: $(tail -3 "$W/logs/engine-$label-$k.log")"
                unserve
                return 1
            fi
            sleep 0.1
        done
        k=$((k + 1))
    done
    nginx_conf "$W/nginx"
    "$NGINX" -p "$W/nginx" -c conf/nginx.conf -e stderr -g 'daemon off;' \
        > "$W/logs/nginx-$label.log" 2>&1 &
    NGINX_PID=$!
    i=0
    while :; do
        attached=$(http_get /metrics | awk '
            /^pagedllm_engine_attached[ {]/ { n += $2 } END { print n + 0 }')
        [ "$attached" -ge "$ENGINES" ] && break
        i=$((i + 1))
        if [ $i -gt 300 ]; then
            say "nginx did not attach to engine $label ($attached of $ENGINES)"
            unserve
            return 1
        fi
        sleep 0.1
    done
    # CUDA graphs and allocator warm, not measured
    "$LOAD" -p $PORT -V "$VOCAB" --rate inf -n $((8 * ENGINES)) -P 64 -G 16 \
        --metrics-url none > "$W/logs/warmup-$label.log" 2>&1
    say "serving $label: $(cat "$W"/logs/engine-"$label"-*.log \
        | grep -o 'KV cache:.*' | paste -sd ';' -)"
}

unserve() {
    local p k=0
    if [ -n "$NGINX_PID" ]; then
        kill -TERM "$NGINX_PID" 2>/dev/null
        wait "$NGINX_PID" 2>/dev/null
        NGINX_PID=""
    fi
    for p in $ENGINE_PID; do
        kill -TERM "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    ENGINE_PID=""
    while [ $k -lt "$ENGINES" ]; do
        rm -f "$(engine_sock $k)"
        k=$((k + 1))
    done
}

trap 'unserve' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# ---- runs -----------------------------------------------------------------

# run PANEL SERIES X LOAD_FLAGS...: one pagedllm-load run, its record
# appended to runs.jsonl; prints its mean normalized latency ("" when the
# run gave none)
run() {
    local panel=$1 series=$2 x=$3 name b a line t flags
    shift 3
    flags="$*"
    name=$(echo "$panel-$series-$x" | tr -c 'A-Za-z0-9.=\n-' '_')
    t=$(left)
    [ "$t" -gt 5 ] || return 0
    http_get /metrics > "$W/metrics/$name.before"
    b=$(counters)
    timeout "$t" "$LOAD" -p $PORT -V "$VOCAB" "$@" --out "$W/runs/$name.json" \
        > "$W/logs/load-$name.log" 2>&1
    a=$(counters)
    http_get /metrics > "$W/metrics/$name.after"
    line=$(tail -1 "$W/runs/$name.json" 2>/dev/null)
    [ -n "$line" ] || line=null
    set -- $b $a
    printf '{"group":"%s","panel":"%s","series":"%s","x":%s,"engine":"%s","load_flags":"%s","delta":{"iterations":%d,"generation_tokens":%d,"prompt_tokens":%d,"preemptions":%d,"swapped_out":%d,"kv_capacity":%d},"load":%s}\n' \
        "$GROUP" "$panel" "$series" "$x" "$ENGINE_FLAGS" \
        "$flags" \
        $(($7 - $1)) $(($8 - $2)) $(($9 - $3)) $((${10} - $4)) \
        $((${11} - $5)) ${12} "$line" >> "$W/runs.jsonl"
    echo "$line" | sed -n 's/.*"norm_latency_mean_s":\([0-9.eE+-]*\).*/\1/p'
}

# sweep PANEL SERIES BUDGET_S "RATES" SECS MIN_N LOAD_FLAGS...: Poisson
# runs at each rate, max(MIN_N, rate x SECS) requests each, until the
# stop rule, the sweep's budget or the deadline ends it.  The stop rule's
# reference (REF_<panel>) is the lowest latency at the first rate of the
# panel's sweeps so far: the unloaded latency, whichever policy ran first
sweep() {
    local panel=$1 series=$2 budget=$3 rates=$4 secs=$5 minn=$6 r n lat
    local t0 ref refvar
    shift 6
    t0=$(now)
    refvar=REF_$(echo "$panel" | tr -c 'A-Za-z0-9\n' '_')
    for r in $rates; do
        if [ $(($(now) - t0)) -ge "$budget" ] || [ "$(left)" -lt 30 ]; then
            say "  $panel $series: no time left for rates from $r"
            break
        fi
        n=$(awk -v r="$r" -v s="$secs" -v m="$minn" \
            'BEGIN { n = int(r * s + 0.5); print (n > m ? n : m) }')
        lat=$(run "$panel" "$series" "$r" --rate "$r" -n "$n" "$@")
        say "  $panel $series rate $r ($n requests): normalized latency ${lat:-none} s/token"
        [ -n "$lat" ] || break
        ref=${!refvar:-}
        if [ "$r" = "${rates%% *}" ] && { [ -z "$ref" ] || awk -v l="$lat" \
                -v f="$ref" 'BEGIN { exit !(l < f) }'; }; then
            printf -v "$refvar" '%s' "$lat"
            ref=$lat
        fi
        if awk -v l="$lat" -v f="$ref" -v x="$STOP_X" \
               'BEGIN { exit !(l > x * f) }'; then
            say "  $panel $series: past ${STOP_X}x the reference latency $ref, stopping"
            break
        fi
    done
}


# ---- groups ---------------------------------------------------------------

# the time left to the group, split evenly over what remains of it
share() { echo $(( (GROUP_END - $(now)) / $1 )); }

# rate sweeps of every policy on both workloads: Figs. 14-17
policy_sweeps() {
    local kv=$1 sg_rates=$2 al_rates=$3 policies k=0 p n s sg al
    # paged last: the baselines stop early (their latency passes the stop
    # rule first), and what they leave goes to the sweeps that need it
    policies=${PAPER_POLICIES:-orca-max orca-pow2 orca-oracle paged}
    n=$(echo $policies | wc -w)
    for p in $policies; do
        s=$(( $(share $((n - k))) - START_S ))
        k=$((k + 1))
        # shellcheck disable=SC2086
        serve "$p" --kv-policy "$p" $kv || continue
        # Orca-Max's knee lies below the others' lowest rate
        sg=$sg_rates al=$al_rates
        if [ "$p" = orca-max ]; then
            sg="$(awk -v r="${sg_rates%% *}" 'BEGIN { print r / 2 }') $sg"
            al="$(awk -v r="${al_rates%% *}" 'BEGIN { print r / 2 }') $al"
        fi
        sweep sharegpt "$p" $((s * 3 / 5)) "$sg" "$SG_SECS" "$SG_MIN" \
            --dist sharegpt
        sweep alpaca "$p" $((s * 2 / 5)) "$al" "$AL_SECS" "$AL_MIN" \
            --dist alpaca
        unserve
    done
}

group_basic() {
    use_model llama2-7b || return 1
    policy_sweeps "--num-blocks $HELD" "$SG_RATES" "$AL_RATES"
}

group_h200() {
    use_model llama2-7b || return 1
    if [ "$SMOKE" = 1 ]; then
        policy_sweeps "" "$SG_RATES" "$AL_RATES"
    else
        policy_sweeps "" "${PAPER_H200_SG_RATES:-12 24 36 48 64 80}" \
            "${PAPER_H200_AL_RATES:-100 200 300 400 550 700}"
    fi
}

group_llama3() {
    use_model llama3-8b || return 1
    policy_sweeps "--num-blocks $HELD" "$SG_RATES" "$AL_RATES"
}

group_engines() {
    local rates=${PAPER_ENGINES_RATES:-10 20 30 40 45 50 55 60 70}
    local secs=${PAPER_ENGINES_SECS:-8} s
    use_model llama3-8b || return 1
    ENGINES=1
    s=$(( $(share 2) - START_S ))
    if serve one-engine --gpu-memory-utilization 0.90; then
        sweep sharegpt "1x0.90" "$s" "$rates" "$secs" "$SG_MIN" \
            --dist sharegpt
        unserve
    fi
    ENGINES=2
    s=$(( $(share 1) - 2 * START_S ))
    if serve two-engines --gpu-memory-utilization 0.45; then
        sweep sharegpt "2x0.45" "$s" "$rates" "$secs" "$SG_MIN" \
            --dist sharegpt
        unserve
    fi
    ENGINES=1
}

group_sampling() {
    local policies p w k=0 n s mode flag modes=${PAPER_SAMPLING:-n beam}
    use_model llama2-7b || return 1
    policies=${PAPER_POLICIES:-orca-oracle paged}
    n=$(echo $policies | wc -w)
    for p in $policies; do
        s=$(( ($(share $((n - k))) - START_S) / (3 * $(echo $modes | wc -w)) ))
        k=$((k + 1))
        serve "$p" --kv-policy "$p" --num-blocks $HELD || continue
        for mode in $modes; do
            flag=--n
            [ "$mode" = beam ] && flag=--beam-width
            for w in 2 4 6; do
                sweep "$mode=$w" "$p" $s "$AL_RATES" "$AL_SECS" "$AL_MIN" \
                    --dist alpaca $flag $w
            done
        done
        unserve
    done
}

# "used running" lines, /metrics read every 0.1 s while FILE exists
# (pagedllm-load reads it only every 0.5 s)
kv_sampler() {
    while [ -e "$1" ]; do
        http_get /metrics | awk '
            /^pagedllm_kv_blocks\{state="used"\}/ { u = $2 }
            /^pagedllm_requests_running / { r = $2 }
            END { if (r > 0) print u, r }'
        sleep 0.1
    done
}

# run_sampled PANEL SERIES X LOAD_FLAGS...: run with kv_sampler beside it,
# the samples kept in metrics/PANEL-SERIES-X.kv
run_sampled() {
    local f=$W/metrics/$1-$2-$3.kv sampler
    touch "$f.on"
    kv_sampler "$f.on" > "$f" &
    sampler=$!
    run "$@" > /dev/null
    rm -f "$f.on"
    wait "$sampler" 2>/dev/null
    say "  $1 $2 width $3: mean used blocks $(awk '{ u += $1; n++ }
        END { if (n) printf "%.1f over %d samples", u / n, n }' "$f")"
}

# shared (n = W or beam width W) against unshared (W x the requests, n =
# 1) at the same sequences in flight; used blocks sampled from /metrics
group_memsave() {
    local c=32 rounds=${PAPER_MEMSAVE_ROUNDS:-12} w mode flag
    [ "$SMOKE" = 1 ] && c=4 rounds=20
    use_model llama2-7b || return 1
    serve nocache --no-prefix-caching --num-blocks $((HELD * 4)) || return 1
    for mode in parallel beam; do
        flag=--n
        [ $mode = beam ] && flag=--beam-width
        for w in 2 4 6; do
            run_sampled "$mode" shared "$w" --rate inf -c $c \
                -n $((c * rounds)) --dist alpaca $flag "$w"
            run_sampled "$mode" unshared "$w" --rate inf -c $((c * w)) \
                -n $((c * w * rounds)) --dist alpaca
        done
    done
    unserve
}

group_prefix() {
    local policies p shot k=0 n s
    use_model llama2-7b || return 1
    policies=${PAPER_POLICIES:-orca-oracle paged}
    n=$(echo $policies | wc -w)
    for p in $policies; do
        s=$(( ($(share $((n - k))) - START_S) / 2 ))
        k=$((k + 1))
        serve "$p" --kv-policy "$p" --num-blocks $HELD || continue
        for shot in 1shot 5shot; do
            sweep "$shot" "$p" $s "$AL_RATES" "$AL_SECS" "$AL_MIN" \
                --dist alpaca --shared-prefix $shot
        done
        unserve
    done
}

group_chat() {
    local policies p k=0 n s rates=${PAPER_CHAT_RATES:-2 4 6 8 10}
    use_model llama2-7b || return 1
    [ "$SMOKE" = 1 ] && rates="0.5 1"
    policies=${PAPER_POLICIES:-orca-max orca-pow2 orca-oracle paged}
    n=$(echo $policies | wc -w)
    for p in $policies; do
        s=$(( $(share $((n - k))) - START_S ))
        k=$((k + 1))
        serve "$p" --kv-policy "$p" --num-blocks $HELD || continue
        sweep chat "$p" $s "$rates" "$SG_SECS" 4 --dist sharegpt \
            --chat-turns 4
        unserve
    done
}

group_blocksize() {
    local bs k=0 sizes="1 2 4 8 16 32 64" sg al
    use_model llama2-7b || return 1
    read -r sg al <<< "${PAPER_BS_RATES:-$BS_RATES}"
    for bs in $sizes; do
        k=$((k + 1))
        serve "bs$bs" --block-size "$bs" --num-blocks $((HELD_TOKENS / bs)) \
            || continue
        run sharegpt paged "$bs" --rate "$sg" \
            -n "$(awk -v r="$sg" -v s="$SG_SECS" 'BEGIN { print int(r * s) }')" \
            --dist sharegpt > /dev/null
        run alpaca paged "$bs" --rate "$al" \
            -n "$(awk -v r="$al" -v s="$AL_SECS" 'BEGIN { print int(r * s) }')" \
            --dist alpaca > /dev/null
        say "  block size $bs done"
        unserve
    done
}

group_preempt() {
    local bs mode rate n
    use_model llama2-7b || return 1
    rate=${PAPER_PREEMPT_RATE:-$PREEMPT_RATE}
    n=$(awk -v r="$rate" -v s="$SG_SECS" 'BEGIN { print int(r * s) }')
    for mode in recompute swap auto; do
        for bs in 4 16 64; do
            serve "$mode-bs$bs" --preemption-mode $mode --block-size "$bs" \
                --num-blocks $((HELD_TOKENS / bs)) || continue
            run "$mode" "$mode" "$bs" --rate "$rate" -n "$n" \
                --dist sharegpt > /dev/null
            say "  $mode block size $bs done"
            unserve
        done
    done
}

budget_of() {
    case $1 in
    basic) echo 420 ;;
    sampling) echo 570 ;;
    memsave) echo 300 ;;
    prefix|chat) echo 420 ;;
    blocksize|preempt) echo 540 ;;
    h200|llama3|engines) echo 480 ;;
    *) echo 0 ;;
    esac
}

# pack the group: everything in the tarball, the PNGs and the summary
# beside it
pack() {
    local png
    if [ "${PAPER_NO_PLOT:-0}" = 1 ]; then
        python3 bench/paper/plot.py --no-plot "$W" > "$W/summary.txt" 2>&1
    else
        python3 bench/paper/plot.py "$W" > "$W/summary.txt" 2>&1
    fi
    cat "$W/summary.log" >> "$W/summary.txt"
    cp "$W/summary.txt" "$OUT/paper-$GROUP-summary.txt"
    for png in "$W"/*.png; do
        [ -f "$png" ] && cp "$png" "$OUT/paper-$GROUP-$(basename "$png")"
    done
    tar czf "$OUT/paper-$GROUP.tar.gz" -C "$LOGS" "paper-$GROUP"
}

if [ $# -eq 0 ]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d'
    exit 2
fi
for g in "$@"; do
    if [ "$(budget_of "$g")" = 0 ]; then
        echo "paper: unknown group '$g'" >&2
        exit 2
    fi
done

if [ "$SMOKE" = 1 ]; then
    SG_RATES="1 2 4"; SG_SECS=2; SG_MIN=4
    AL_RATES="4 8 16"; AL_SECS=1; AL_MIN=6
    BS_RATES="2 8"; PREEMPT_RATE=4
else
    SG_RATES=${PAPER_SG_RATES:-4 8 12 16 20 25 30 40 50}; SG_SECS=3; SG_MIN=12
    AL_RATES=${PAPER_AL_RATES:-20 40 70 110 160 220 300 400 500}
    AL_SECS=2; AL_MIN=40
    BS_RATES="40 400"; PREEMPT_RATE=50
fi
HELD=$((HELD_TOKENS / 16))

prepare
status=0
for GROUP in "$@"; do
    W=$LOGS/paper-$GROUP
    rm -rf "$W"
    mkdir -p "$W/logs" "$W/runs" "$W/metrics"
    cp "$LOGS/machine.txt" "$W/" 2>/dev/null
    unset "${!REF_@}"
    budget=${PAPER_BUDGET_S:-$(budget_of "$GROUP")}
    gb=PAPER_BUDGET_$GROUP
    budget=${!gb:-$budget}
    [ "$SMOKE" = 1 ] && budget=${PAPER_BUDGET_S:-120}
    GROUP_T0=$(now)
    GROUP_END=$((GROUP_T0 + budget))
    [ $GROUP_END -gt $((DEADLINE - 15)) ] && GROUP_END=$((DEADLINE - 15))
    say "group $GROUP: budget $budget s (until +$((GROUP_END - T0)) s of" \
        "the call's $((DEADLINE - T0)) s), logs in $W, device $DEVICE," \
        "held KV $HELD_TOKENS tokens"
    "group_$GROUP" || status=1
    unserve
    say "group $GROUP: done in $(($(now) - GROUP_T0)) s"
    pack
    cat "$W/summary.txt"
done
exit $status
