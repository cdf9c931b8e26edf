#!/bin/sh
# Puts a copy of SRC at DST by renaming a copy made beside DST, never by
# writing into DST: a process that mapped DST (nginx loading the module,
# whose workers the master forks from its own mapping) keeps the file it
# loaded.  Written in place, the file's pages change under the master:
# the worker running then dies of SIGBUS and every worker forked after it
# runs the new code against the old data and dies at once, for good.
#   tools/replace-file.sh SRC DST
set -eu

src=$1
dst=$2
tmp=$(dirname "$dst")/.$(basename "$dst").$$

trap 'rm -f "$tmp"' EXIT
cp "$src" "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
