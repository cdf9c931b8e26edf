#!/bin/bash
# Builds ngx_http_pagedllm_module.so against Debian's packaged nginx: a copy
# of the configure tree from nginx-dev, configured with the exact flags the
# stock binary was built with (conf_flags), so /usr/sbin/nginx can load it.
#   tools/build-module.sh BUILD_DIR
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
out=$1
src=/usr/share/nginx/src
tree=$out/nginx

if [ ! -f "$src/conf_flags" ]; then
    echo "pagedllm: $src/conf_flags not found: is nginx-dev installed?" >&2
    exit 1
fi

mkdir -p "$out"

if [ ! -f "$tree/configure" ] || [ "$src/conf_flags" -nt "$tree/configure" ]
then
    rm -rf "$tree"
    cp -r "$src" "$tree"
fi

# configure again whenever the addon's config script or its file list changed
configure() {
    (
        cd "$tree"
        # shellcheck disable=SC1091
        . ./conf_flags
        ./configure "${NGX_CONF_FLAGS[@]}" \
            --with-cc-opt="-g -O2 -fPIC -fstack-protector-strong -Wformat -Werror=format-security -D_FORTIFY_SOURCE=2" \
            --with-ld-opt="-Wl,-z,relro -Wl,-z,now -fPIC" \
            --add-dynamic-module="$top" >configure.log 2>&1 \
        || { tail -30 configure.log >&2; exit 1; }
    )
    printf '%s\n' "$srcs" >"$out/module-srcs"
}

srcs=$(cd "$top" \
       && ls ngx_http_pagedllm_module/*.[ch] proto/*.[ch] text/*.[ch] \
             grammar/*.[ch] \
             2>/dev/null)
if [ ! -f "$tree/objs/Makefile" ] || [ "$top/config" -nt "$tree/objs/Makefile" ] \
   || [ "$srcs" != "$(cat "$out/module-srcs" 2>/dev/null)" ]
then
    configure
fi

# the page pagedllm_ui serves, compiled in
page=$tree/objs/addon/pagedllm-ui/ngx_http_pagedllm_ui_page.h
if [ ! -f "$page" ] || [ "$top/ui/index.html" -nt "$page" ]; then
    sh "$top/tools/embed-ui.sh" "$top/ui/index.html" "$page"
fi

# A configure feature test that fails for a passing reason (seen on a
# loaded machine: "EPOLLRDHUP ... not found" with nothing in autoconf.err)
# leaves a config nginx's own headers then trip over under -Werror; one
# fresh configure before giving up.
if ! make -s -C "$tree" -f objs/Makefile modules >/dev/null 2>"$out/module-build.err"
then
    echo "pagedllm: module build failed, configuring nginx again" >&2
    configure
    make -s -C "$tree" -f objs/Makefile modules >/dev/null \
        || { cat "$out/module-build.err" >&2; exit 1; }
fi
"$top/tools/replace-file.sh" "$tree/objs/ngx_http_pagedllm_module.so" \
    "$out/ngx_http_pagedllm_module.so"
