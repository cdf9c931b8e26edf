#!/bin/sh
# Installs what pagedllm needs from Debian (and, with --test, from npm).
# Run by make; safe to run again: it only installs what is missing.
set -eu

need=""
for pkg in nginx nginx-dev libjansson-dev make gcc perl curl openssl; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
         | grep -q "install ok installed"; then
        need="$need $pkg"
    fi
done

if [ "${1:-}" = "--test" ]; then
    # unicode-data: the tokenizer's tables are checked against it;
    # prometheus: its promtool checks /metrics (t/57-histograms.t);
    # systemd: systemd-analyze verifies the units (t/59-install.t);
    # chromium: the playground's browser test (t/60-ui-browser.t);
    # python3-jinja2: the chat templates' reference (t/31-chat-jinja2.t)
    for pkg in unicode-data openssl prometheus systemd chromium \
               python3-jinja2; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
             | grep -q "install ok installed"; then
            need="$need $pkg"
        fi
    done
    for pkg in nodejs npm; do
        if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1
        then
            if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
                 | grep -q "install ok installed"; then
                need="$need $pkg"
            fi
        fi
    done
fi

if [ "${1:-}" = "--fuzz" ]; then
    # make fuzz: clang with libFuzzer and its sanitizer runtimes, and the
    # OpenMP runtime clang links the CPU kernels with
    for pkg in clang libclang-rt-dev libomp-dev; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
             | grep -q "install ok installed"; then
            need="$need $pkg"
        fi
    done
fi

if [ -n "$need" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "pagedllm: missing Debian packages:$need" >&2
        echo "pagedllm: run as root, or: sudo apt-get install$need" >&2
        exit 1
    fi
    echo "pagedllm: installing$need"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

if [ "${1:-}" = "--test" ] && [ -f t/node/package.json ]; then
    if [ ! -d t/node/node_modules ] \
       || [ t/node/package.json -nt t/node/node_modules ]; then
        echo "pagedllm: installing test tools from npm (t/node)"
        (cd t/node && npm install --no-audit --no-fund --loglevel=error)
        touch t/node/node_modules
    fi
fi
