#!/bin/sh
# Runs pagedllm on this machine: pagedllm-engine with models/kjv-small (a
# small model trained on the King James Bible, so that answers read as
# words) in the background and the stock nginx, loading our module, in
# the foreground.  Ctrl-C (or TERM) stops both.
#   tools/run.sh [--engines N | --per-gpu] BUILD_DIR
#   PAGEDLLM_PORT (default 8080), PAGEDLLM_MODEL (default models/kjv-small
#   of this checkout; BUILD/models/tiny is the random-weight test model),
#   PAGEDLLM_DEVICE (default auto), PAGEDLLM_ENGINE_ARGS (more engine flags),
#   PAGEDLLM_RUN_DIR (default BUILD/run): the run folder, holding the
#   engine's socket, the pid files, nginx's configuration and logs.
#   PAGEDLLM_NGINX (default /usr/sbin/nginx): the nginx binary (make
#   test-sanitize's, for a sanitized BUILD_DIR's module).
# --engines N starts N engines of the model (sockets engine0.sock ..,
# pid files engine0.pid ..) behind one nginx, in one pagedllm_engines
# group routed by PAGEDLLM_ROUTE (default least_load); --per-gpu starts
# one per visible GPU (CUDA_VISIBLE_DEVICES' entries when it is set, else
# nvidia-smi's), engine i with --device cuda:i.  Without either, one
# engine on engine.sock, served by pagedllm_engine.
# One run folder serves one server at a time: a folder whose engine or
# nginx is alive (by its pid file) is refused, and no socket is ever
# removed here (the engine replaces a stale one and refuses a live one).
set -eu

usage() {
    echo "usage: tools/run.sh [--engines N | --per-gpu] BUILD_DIR" >&2
    exit 2
}

engines=0
per_gpu=0

while [ $# -gt 1 ]; do
    case "$1" in
    --engines)
        engines=$2
        shift 2
        case "$engines" in
        ''|*[!0-9]*|0) usage ;;
        esac
        ;;
    --per-gpu)
        per_gpu=1
        shift
        ;;
    *)
        usage
        ;;
    esac
done

if [ $# -ne 1 ]; then
    usage
fi

build=$(cd "$1" && pwd)
port=${PAGEDLLM_PORT:-8080}
model=${PAGEDLLM_MODEL:-$(cd "$(dirname "$0")/.." && pwd)/models/kjv-small}
device=${PAGEDLLM_DEVICE:-auto}
route=${PAGEDLLM_ROUTE:-least_load}
run=${PAGEDLLM_RUN_DIR:-$build/run}

# the GPUs the CUDA runtime will number 0.. for the engines (set and
# empty, CUDA_VISIBLE_DEVICES hides them all)
visible_gpus() {
    if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
        echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true
    elif command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    else
        echo 0
    fi
}

if [ $per_gpu -eq 1 ]; then
    engines=$(visible_gpus)
    if [ "$engines" -eq 0 ]; then
        echo "pagedllm: --per-gpu: no GPU is visible" >&2
        exit 1
    fi
fi

# engine i's socket and pid file; one engine alone keeps engine.sock
names=""
if [ "$engines" -eq 0 ]; then
    names="engine"
else
    i=0
    while [ $i -lt "$engines" ]; do
        names="$names engine$i"
        i=$((i + 1))
    done
fi

for f in "$build/pagedllm-engine" "$build/ngx_http_pagedllm_module.so" \
         "$model/config.json"
do
    if [ ! -e "$f" ]; then
        echo "pagedllm: $f is missing: run make first" >&2
        exit 1
    fi
done

# the pid in file $1 if that process is alive
live_pid() {
    if [ -s "$1" ]; then
        pid=$(cat "$1")
        if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
            echo "$pid"
        fi
    fi
}

for f in $(for n in $names; do echo "$run/$n.pid"; done) "$run/nginx.pid"
do
    pid=$(live_pid "$f")
    if [ -n "$pid" ]; then
        echo "pagedllm: $run is in use by a running server (pid $pid in" \
             "$f); stop it, or give this one PAGEDLLM_RUN_DIR" >&2
        exit 1
    fi
done

# whether an engine accepts connections on socket $1
listening() {
    perl -MIO::Socket::UNIX -e \
        'exit !IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ARGV[0])' \
        "$1" 2>/dev/null
}

for n in $names; do
    if listening "$run/$n.sock"; then
        echo "pagedllm: an engine already listens on $run/$n.sock; stop it," \
             "or give this one PAGEDLLM_RUN_DIR" >&2
        exit 1
    fi
done

mkdir -p "$run/conf" "$run/logs" "$run/tmp"

user=""
if [ "$(id -u)" -eq 0 ]; then
    user="user root;"
fi

# the engines' directive, and the API location's
if [ "$engines" -eq 0 ]; then
    engines_conf="pagedllm_engine unix:$run/engine.sock;"
    api="pagedllm;"
else
    engines_conf="pagedllm_engines local {"
    for n in $names; do
        engines_conf="$engines_conf
        engine unix:$run/$n.sock;"
    done
    engines_conf="$engines_conf
    }"
    api="pagedllm local;
            pagedllm_route $route;"
fi

cat >"$run/conf/nginx.conf" <<EOF
load_module $build/ngx_http_pagedllm_module.so;
$user
worker_processes 2;
worker_rlimit_nofile 8192;
error_log stderr notice;
pid $run/nginx.pid;

events {
    worker_connections 4096;
}

http {
    access_log $run/logs/access.log;

    client_body_temp_path $run/tmp/client_body;
    proxy_temp_path $run/tmp/proxy;
    fastcgi_temp_path $run/tmp/fastcgi;
    uwsgi_temp_path $run/tmp/uwsgi;
    scgi_temp_path $run/tmp/scgi;

    $engines_conf

    server {
        listen 127.0.0.1:$port;

        # what nginx answers itself (413, 404, 405, ...) in OpenAI's JSON
        error_page 400 401 403 404 405 408 413 414 429 500 502 503 504
                   @pagedllm_error;
        location @pagedllm_error {
            pagedllm_error;
        }

        location /v1/ {
            $api
        }

        location = /pagedllm/status {
            pagedllm_status;
        }

        location = /metrics {
            pagedllm_metrics;
        }

        location = /health {
            pagedllm_health;
        }

        location /ui/ {
            pagedllm_ui;
        }
    }
}
EOF

engine_pids=""
nginx_pid=""

stop() {
    trap - INT TERM EXIT
    if [ -n "$nginx_pid" ]; then
        kill -TERM "$nginx_pid" 2>/dev/null || true
        wait "$nginx_pid" 2>/dev/null || true
    fi
    for pid in $engine_pids; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $engine_pids; do
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "$engine_pids" ]; then
        for n in $names; do
            rm -f "$run/$n.pid"
        done
    fi
}

trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# engine $1 on its socket; engine i of --per-gpu on GPU i
i=0
for n in $names; do
    dev=$device
    if [ $per_gpu -eq 1 ]; then
        dev=cuda:$i
    fi
    "$build/pagedllm-engine" --model "$model" --listen "$run/$n.sock" \
        --device "$dev" ${PAGEDLLM_ENGINE_ARGS:-} &
    engine_pids="$engine_pids $!"
    echo "$!" >"$run/$n.pid"
    i=$((i + 1))
done

for n in $names; do
    pid=$(cat "$run/$n.pid")
    i=0
    until listening "$run/$n.sock"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "pagedllm: the engine $n exited before listening" >&2
            exit 1
        fi
        i=$((i + 1))
        if [ $i -gt 600 ]; then
            echo "pagedllm: the engine did not listen on $run/$n.sock in" \
                 "60 s" >&2
            exit 1
        fi
        sleep 0.1
    done
done

cat <<EOF

pagedllm is up on http://127.0.0.1:$port (Ctrl-C stops it)

  curl -N http://127.0.0.1:$port/v1/completions -d '{"prompt":"Hello","max_tokens":16,"ignore_eos":true,"stream":true}'
  curl http://127.0.0.1:$port/pagedllm/status
  curl http://127.0.0.1:$port/metrics

EOF

${PAGEDLLM_NGINX:-/usr/sbin/nginx} -p "$run" -c conf/nginx.conf -e stderr \
    -g 'daemon off;' &
nginx_pid=$!
wait "$nginx_pid" || true
nginx_pid=""
