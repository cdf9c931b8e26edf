#!/bin/bash
# Builds nginx itself and ngx_http_pagedllm_module with AddressSanitizer and
# UBSan, for make test-sanitize: BUILD_DIR/nginx-asan/nginx (the binary; the
# source tree beside it, linked as nginx-asan/src, and the logs) and BUILD_DIR/ngx_http_pagedllm_module.so
# (the module, built in the same tree).
#   tools/build-nginx-sanitized.sh BUILD_DIR
#
# nginx-dev ships nginx's headers and configure scripts but none of its .c
# files, so the source comes from Debian's source package: `apt-get source
# nginx`, with a private sources list (deb-src of this release, nothing
# written under /etc/apt), the installed nginx-dev's version when the
# archive still has it, else the release's own (the version of its
# last point release).  It is configured with
# the flags the stock binary was built with (nginx-dev's conf_flags).
set -eu

mkdir -p "$1/nginx-asan"
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(mkdir -p "$1" && cd "$1" && pwd)
out=$build/nginx-asan
flags=/usr/share/nginx/src/conf_flags
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# clang: its UBSan, unlike gcc's, writes its reports where log_path says
cc=${CC:-clang}

if [ ! -f "$flags" ]; then
    echo "pagedllm: $flags not found: is nginx-dev installed?" >&2
    exit 1
fi

# The source package, into $out/nginx-src once.
fetch() {
    local apt=$out/nginx-src/apt codename version
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    version=$(dpkg-query -W -f='${Version}' nginx-dev)
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    {
        echo "deb-src http://deb.debian.org/debian $codename main"
        echo "deb-src http://deb.debian.org/debian $codename-updates main"
        echo "deb-src http://deb.debian.org/debian-security" \
             "$codename-security main"
    } >"$apt/sources.list"
    opts=(-o "Dir::Etc::SourceList=$apt/sources.list"
          -o "Dir::Etc::SourceParts=$apt/none"
          -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
    apt-get "${opts[@]}" -qq update
    (
        cd "$out/nginx-src"
        apt-get "${opts[@]}" -qq source "nginx=$version" 2>/dev/null \
        || { echo "pagedllm: nginx $version is not in the archive;" \
                  "building $codename's own" >&2
             apt-get "${opts[@]}" -qq source "nginx/$codename"; }
    ) >"$out/nginx-src/fetch.log" 2>&1 \
    || { cat "$out/nginx-src/fetch.log" >&2; exit 1; }
}

tree=$(ls -d "$out"/nginx-src/nginx-*/ 2>/dev/null | head -1)
if [ -z "$tree" ]; then
    rm -rf "$out/nginx-src"
    mkdir -p "$out/nginx-src"
    fetch
    tree=$(ls -d "$out"/nginx-src/nginx-*/ | head -1)
fi
tree=${tree%/}
ln -sfn "${tree#"$out"/}" "$out/src"

# nginx's own HTTP/2 code stores 32-bit values at odd addresses of its
# output buffers (ngx_http_v2_send_settings and others; fine on x86) and
# adds 0 to a NULL buffer pointer (ngx_http_v2_process_request_body): UBSan's
# alignment and pointer-overflow checks are off for nginx's sources (named
# relative to the tree), on for the module's (named by absolute path); so is
# nonnull-attribute (ngx_pstrdup of an empty prefix in ngx_init_cycle)
#
# Every dynamic module defines ngx_modules, ngx_module_names and
# ngx_module_order, which the nginx binary defines too (and exports): the
# module's references resolve to the binary's arrays, so ASan, registering
# the module's 2-entry ngx_modules at that address, would poison the
# binary's array past its second entry, and a reload's ngx_cycle_modules
# (a memcpy of the whole array) would abort the master.  Those three
# arrays get no redzone, in the binary and in the module alike.
printf '%s\n' '[alignment|pointer-overflow|nonnull-attribute]' 'src:src/*' \
    '[address]' 'global:ngx_modules' 'global:ngx_module_names' \
    'global:ngx_module_order' >"$out/ignorelist.txt"

# A worker that exits (reload, stop) leaves its connections and events,
# allocated once in ngx_event_process_init, to the kernel: LeakSanitizer's
# report of those is nginx's design; any other leak is still reported
printf 'leak:ngx_event_process_init\n' >"$out/lsan.supp"
ignore="-fsanitize-ignorelist=$out/ignorelist.txt"

# configured again when the compiler, the ignorelist, the addon's config or
# its file list changed
key=$(cd "$top" \
      && echo "$cc" && cat "$out/ignorelist.txt" \
      && ls config ngx_http_pagedllm_module/*.[ch] proto/*.[ch] text/*.[ch])
if [ ! -f "$tree/objs/Makefile" ] \
   || [ "$key" != "$(cat "$out/configured" 2>/dev/null)" ]
then
    (
        cd "$tree"
        # shellcheck disable=SC1090
        . "$flags"
        ./configure "${NGX_CONF_FLAGS[@]}" --with-cc="$cc" \
            --with-cc-opt="-g -O1 -fno-omit-frame-pointer -fPIC $san $ignore" \
            --with-ld-opt="$san" \
            --add-dynamic-module="$top" >"$out/nginx-configure.log" 2>&1 \
        || { tail -30 "$out/nginx-configure.log" >&2; exit 1; }
    )
    printf '%s\n' "$key" >"$out/configured"
fi

make -s -j"${JOBS:-$(nproc)}" -C "$tree" -f objs/Makefile binary modules \
    >"$out/nginx-build.log" 2>&1 \
|| { tail -40 "$out/nginx-build.log" >&2; exit 1; }
# copied beside and renamed over: a test's nginx may still run the old one
cp "$tree/objs/nginx" "$out/nginx.new"
mv -f "$out/nginx.new" "$out/nginx"
cp "$tree/objs/ngx_http_pagedllm_module.so" "$build/.module.so.new"
mv -f "$build/.module.so.new" "$build/ngx_http_pagedllm_module.so"
