#!/bin/sh
# build.sh: makes models/kjv-small from a fresh checkout, on the CPU: the
# corpus (prepare-corpus.sh), the tokenizer and the training (train.py, in
# three stages: 900 steps from scratch, then 700 and 400 more, each from a
# warm restart of the learning rate, reading the books' first chapters
# four times as often again), the golden references and the model card
# (make_golden.py).
#
#     sh tools/train-small/build.sh [OUTDIR]      (default models/kjv-small)
#
# Needs apt-get (a Debian source list); Debian's python3-torch,
# python3-numpy and python3-matplotlib for /usr/bin/python3 are installed
# with it when /usr/bin/python3 cannot import them.  Debian's
# torch does its matrix products through libblas.so.3, which is the
# reference BLAS unless an optimized one is installed; this script unpacks
# Debian's libopenblas0-pthread into .train-corpus/blas (dpkg -x, nothing
# installed) and puts it first on LD_LIBRARY_PATH for the training, which
# is then some 50 times faster.  About 50 minutes on two shared cores.
set -eu

outdir=${1:-models/kjv-small}
corpus=.train-corpus
blas=$corpus/blas

if ! /usr/bin/python3 -c 'import torch, numpy, matplotlib' 2>/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3-torch python3-numpy python3-matplotlib
fi

sh tools/train-small/prepare-corpus.sh "$corpus"

if [ ! -f "$blas/VERSION" ]; then
    work=$(mktemp -d)
    (cd "$work" && apt-get download libopenblas0-pthread >/dev/null)
    dpkg -x "$work"/libopenblas0-pthread_*.deb "$work/root"
    mkdir -p "$blas"
    cp "$work"/root/usr/lib/x86_64-linux-gnu/openblas-pthread/* "$blas/"
    dpkg-deb -f "$work"/libopenblas0-pthread_*.deb Version >"$blas/VERSION"
    rm -rf "$work"
fi

# one stage of train.py, its log kept in $corpus/LOG (shown if it fails)
stage() {
    log=$corpus/$1
    shift
    /usr/bin/python3 tools/train-small/train.py --corpus "$corpus" "$@" \
        >"$log" 2>&1 || { cat "$log"; exit 1; }
}

export LD_LIBRARY_PATH="$(cd "$blas" && pwd)" OPENBLAS_NUM_THREADS=1
stage stage1.log "$corpus/stage1"
stage stage2.log --continue-from "$corpus/stage1" --steps 700 --lr 0.002 \
    --warmup 30 --opening-weight 16 --seed 1612 "$corpus/stage2"
stage stage3.log --continue-from "$corpus/stage2" --steps 400 --lr 0.0015 \
    --warmup 20 --opening-weight 16 --seed 1613 "$outdir"
cat "$corpus"/stage1.log "$corpus"/stage2.log "$corpus"/stage3.log \
    >"$outdir/train.log"
/usr/bin/python3 tools/train-small/make_golden.py --corpus "$corpus" "$outdir"
