#!/bin/sh
# Runs pagedllm on this machine: pagedllm-engine with the tiny model in the
# background and the stock nginx, loading our module, in the foreground.
# Ctrl-C (or TERM) stops both.
#   tools/run.sh BUILD_DIR
#   PAGEDLLM_PORT (default 8080), PAGEDLLM_MODEL (default BUILD/models/tiny),
#   PAGEDLLM_DEVICE (default auto), PAGEDLLM_ENGINE_ARGS (more engine flags),
#   PAGEDLLM_RUN_DIR (default BUILD/run): the run folder, holding the
#   engine's socket, both pid files, nginx's configuration and logs.
#   PAGEDLLM_NGINX (default /usr/sbin/nginx): the nginx binary (make
#   test-sanitize's, for a sanitized BUILD_DIR's module).
# One run folder serves one server at a time: a folder whose engine or
# nginx is alive (by its pid file) is refused, and no socket is ever
# removed here (the engine replaces a stale one and refuses a live one).
set -eu

if [ $# -ne 1 ]; then
    echo "usage: tools/run.sh BUILD_DIR" >&2
    exit 2
fi

build=$(cd "$1" && pwd)
port=${PAGEDLLM_PORT:-8080}
model=${PAGEDLLM_MODEL:-$build/models/tiny}
device=${PAGEDLLM_DEVICE:-auto}
run=${PAGEDLLM_RUN_DIR:-$build/run}
sock=$run/engine.sock

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

for f in "$run/engine.pid" "$run/nginx.pid"; do
    pid=$(live_pid "$f")
    if [ -n "$pid" ]; then
        echo "pagedllm: $run is in use by a running server (pid $pid in" \
             "$f); stop it, or give this one PAGEDLLM_RUN_DIR" >&2
        exit 1
    fi
done

# whether an engine accepts connections on the socket
listening() {
    perl -MIO::Socket::UNIX -e \
        'exit !IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ARGV[0])' \
        "$sock" 2>/dev/null
}

if listening; then
    echo "pagedllm: an engine already listens on $sock; stop it, or give" \
         "this one PAGEDLLM_RUN_DIR" >&2
    exit 1
fi

mkdir -p "$run/conf" "$run/logs" "$run/tmp"

user=""
if [ "$(id -u)" -eq 0 ]; then
    user="user root;"
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

    pagedllm_engine unix:$sock;

    server {
        listen 127.0.0.1:$port;

        location /v1/ {
            pagedllm;
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

engine_pid=""
nginx_pid=""

stop() {
    trap - INT TERM EXIT
    if [ -n "$nginx_pid" ]; then
        kill -TERM "$nginx_pid" 2>/dev/null || true
        wait "$nginx_pid" 2>/dev/null || true
    fi
    if [ -n "$engine_pid" ]; then
        kill -TERM "$engine_pid" 2>/dev/null || true
        wait "$engine_pid" 2>/dev/null || true
        rm -f "$run/engine.pid"
    fi
}

trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$build/pagedllm-engine" --model "$model" --listen "$sock" \
    --device "$device" ${PAGEDLLM_ENGINE_ARGS:-} &
engine_pid=$!
echo "$engine_pid" >"$run/engine.pid"

i=0
until listening; do
    if ! kill -0 "$engine_pid" 2>/dev/null; then
        echo "pagedllm: the engine exited before listening" >&2
        engine_pid=""
        exit 1
    fi
    i=$((i + 1))
    if [ $i -gt 600 ]; then
        echo "pagedllm: the engine did not listen on $sock in 60 s" >&2
        exit 1
    fi
    sleep 0.1
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
