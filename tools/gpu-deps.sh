# gpu-deps.sh: sourced by the scripts that run on the lent GPU machine.
# That machine has no network and no jansson: when jansson's headers are
# missing, the Debian packages carried in .gpu-debs/ are unpacked under
# /tmp/pl-deps and the compiler, linker and loader pointed at them
# (fetch them here once: mkdir .gpu-debs && cd .gpu-debs &&
# apt-get download libjansson4 libjansson-dev; then carry ".gpu-debs").
if ! printf '#include <jansson.h>\n' | cc -E - >/dev/null 2>&1; then
    for f in .gpu-debs/*.deb; do dpkg -x "$f" /tmp/pl-deps; done
    export C_INCLUDE_PATH=/tmp/pl-deps/usr/include
    export LIBRARY_PATH=/tmp/pl-deps/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=/tmp/pl-deps/usr/lib/x86_64-linux-gnu
fi
