#!/bin/bash
# Soak: hours of mixed load on the CPU build, with the faults a server meets
# in service, and what they cost.
#   tools/soak.sh BUILD_DIR MINUTES [OUT_DIR]
#   SOAK_CONCURRENCY (default 16 clients), SOAK_RELOAD_EVERY (seconds,
#   default 180), SOAK_PORT (default a free one)
#
# It starts pagedllm-engine (cpu, one thread) and nginx with two workers on
# copies of the build's engine, module and tiny model (a rebuild during the
# run changes nothing), runs tools/soak-load.mjs (streams, whole answers,
# n > 1, aborted streams) for MINUTES, reloads nginx every SOAK_RELOAD_EVERY
# seconds and restarts the engine once, halfway. At the end it waits for the
# engine to go idle and prints, and writes to OUT_DIR/summary.txt: the
# requests by outcome (failures other than those cut by the restart are
# listed), the KV blocks still used (a leak when not 0) and the RSS of the
# engine and of the nginx workers every minute (and just before the
# restart), so the first engine's figures and the second's each show
# whether they stay flat. It exits 1 when a request failed or a block leaked.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: tools/soak.sh BUILD_DIR MINUTES [OUT_DIR]" >&2
    exit 2
fi

src=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
minutes=$2
out=${3:-$(mktemp -d /tmp/pagedllm-soak-XXXXXX)}
concurrency=${SOAK_CONCURRENCY:-16}
reload_every=${SOAK_RELOAD_EVERY:-180}
free_port='print IO::Socket::INET->new(LocalAddr => "127.0.0.1",
                                      LocalPort => 0, Listen => 1)->sockport'
port=${SOAK_PORT:-$(perl -MIO::Socket::INET -e "$free_port")}
seconds=$((minutes * 60))

mkdir -p "$out/bin" "$out/logs" "$out/tmp"
out=$(cd "$out" && pwd)
cp "$build/pagedllm-engine" "$build/ngx_http_pagedllm_module.so" "$out/bin/"
cp -r "$build/models/tiny" "$out/bin/model"
sock=$out/engine.sock
windows=$out/restart-windows
: >"$windows"

user=""
if [ "$(id -u)" -eq 0 ]; then
    user="user root;"
fi

cat >"$out/nginx.conf" <<EOF
load_module $out/bin/ngx_http_pagedllm_module.so;
$user
worker_processes 2;
pid $out/nginx.pid;
error_log $out/logs/error.log notice;

events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path $out/tmp/client_body;
    proxy_temp_path $out/tmp/proxy;
    fastcgi_temp_path $out/tmp/fastcgi;
    uwsgi_temp_path $out/tmp/uwsgi;
    scgi_temp_path $out/tmp/scgi;

    pagedllm_engine unix:$sock;
    pagedllm_reattach_interval 200ms;

    server {
        listen 127.0.0.1:$port;
        location /v1/ { pagedllm; }
        location = /pagedllm/status { pagedllm_status; }
    }
}
EOF

engine_pid=""
nginx_pid=""
load_pid=""

now_ms() { date +%s%3N; }

start_engine() {
    rm -f "$sock"
    "$out/bin/pagedllm-engine" --model "$out/bin/model" --device cpu \
        --listen "$sock" --threads 1 --kv-cache-memory 64 \
        >>"$out/logs/engine.log" 2>&1 &
    engine_pid=$!
    local i=0
    until [ -S "$sock" ]; do
        kill -0 "$engine_pid" 2>/dev/null \
            || { echo "soak: the engine exited at start" >&2; exit 1; }
        i=$((i + 1))
        if [ $i -ge 600 ]; then
            echo "soak: the engine did not listen" >&2
            exit 1
        fi
        sleep 0.1
    done
}

status() {
    curl -s "http://127.0.0.1:$port/pagedllm/status"
}

# waits until every worker is attached to the engine and it is idle
wait_attached() {
    local i=0
    until status | grep -q '"workers": *2,'; do
        i=$((i + 1))
        if [ $i -ge 300 ]; then
            echo "soak: the workers did not attach" >&2
            return 1
        fi
        sleep 0.1
    done
}

rss_kb() {
    awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

rss_line() {
    local workers w sum=0 list=""
    workers=$(pgrep -P "$nginx_pid" || true)
    for w in $workers; do
        sum=$((sum + $(rss_kb "$w")))
        list="$list $(rss_kb "$w")"
    done
    echo "engine $(rss_kb "$engine_pid") kB, workers$list kB (sum $sum kB)"
}

stop_all() {
    trap - EXIT INT TERM
    [ -z "$load_pid" ] || kill "$load_pid" 2>/dev/null || true
    [ -z "$nginx_pid" ] || kill -QUIT "$nginx_pid" 2>/dev/null || true
    [ -z "$engine_pid" ] || kill -TERM "$engine_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -f "$sock"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_engine
/usr/sbin/nginx -p "$out/" -c "$out/nginx.conf" -e "$out/logs/error.log" \
    -g 'daemon off;' 2>>"$out/logs/nginx.stderr" &
nginx_pid=$!
wait_attached

begin=$(date +%s)
echo "soak: $minutes min, $concurrency clients, port $port, out $out"
node "$src/soak-load.mjs" "$port" "$seconds" "$concurrency" "$windows" \
    >"$out/load.json" 2>"$out/logs/load.stderr" &
load_pid=$!

restarted=0
reloads=0
next_reload=$((begin + reload_every))
next_rss=$((begin + 60))
while kill -0 "$load_pid" 2>/dev/null; do
    t=$(date +%s)
    if [ "$t" -ge "$next_rss" ]; then
        echo "$((t - begin)) s: $(rss_line)" >>"$out/rss.log"
        next_rss=$((t + 60))
    fi
    if [ "$t" -ge "$next_reload" ] && [ $((t - begin)) -lt $((seconds - 30)) ]
    then
        kill -HUP "$nginx_pid"
        reloads=$((reloads + 1))
        next_reload=$((t + reload_every))
    fi
    if [ $restarted -eq 0 ] && [ $((t - begin)) -ge $((seconds / 2)) ]; then
        echo "$((t - begin)) s: $(rss_line) (before the restart)" \
            >>"$out/rss.log"
        cut_start=$(now_ms)
        kill -TERM "$engine_pid"
        wait "$engine_pid" 2>/dev/null || true
        start_engine
        wait_attached || true
        # requests in flight when the engine went away end within the
        # worker's error path; a few seconds more cover the slowest
        sleep 3
        echo "$cut_start $(now_ms)" >>"$windows"
        restarted=1
        echo "soak: engine restarted at $((t - begin)) s"
    fi
    sleep 1
done
wait "$load_pid" || true
load_pid=""
ran=$(( $(date +%s) - begin ))

# the engine frees an aborted request's blocks in its next iteration
i=0
until status | grep -q '"running": *0, *"waiting": *0'; do
    i=$((i + 1))
    [ $i -lt 100 ] || break
    sleep 0.1
done
sleep 1
final=$(status)
used=$(echo "$final" \
       | sed -n 's/.*"kv_blocks": *{[^}]*"used": *\([0-9]*\).*/\1/p')
rss_end=$(rss_line)

{
    echo "soak: ran $ran s ($minutes min asked), $concurrency clients,"
    echo "  $reloads reloads, $restarted engine restart"
    echo "requests: $(cat "$out/load.json")"
    echo "kv blocks used at the end: ${used:-unknown}"
    echo "rss (engine, each worker), every minute:"
    cat "$out/rss.log"
    echo "$ran s: $rss_end (at the end, idle)"
    crashes=$(grep -c 'exited on signal' "$out/logs/error.log" || true)
    echo "worker crashes: $crashes"
} | tee "$out/summary.txt"

failed=$(sed -n 's/^ "failed": \([0-9]*\),/\1/p' "$out/load.json")
[ "${failed:-1}" -eq 0 ] && [ "${used:-1}" -eq 0 ]
