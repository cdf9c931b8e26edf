#!/bin/bash
# gpu-step.sh: on the lent GPU machine, the decode step of a
# Llama-2-7B-shaped model (bench/gpu/step: graphs and eager at batch 1,
# 16, 64, 256, against the weight-read floor; batch 1 and 16 again under
# each of STEP_VARIANTS, none by default) and, under ncu, the
# time of each kernel of one eager step at batch 1 and 64 (STEP_NCU).  First the GPU tests of the kernels
# the step runs (STEP_TESTS, default "gemv model graphs").  Logs under $OUT.
#     bash tools/gpu-step.sh      (carry .gpu-debs, see tools/gpu-run.sh)
set -u
. tools/gpu-deps.sh
M=/tmp/llama2-7b-random
[ -f $M/config.json ] || python3 bench/gpu/serving_torch.py make-model $M > $OUT/make-model.log 2>&1 &
mkdir -p build-gpu; touch build-gpu/.deps
TESTS=${STEP_TESTS:-gemv model graphs}
make BUILD=build-gpu -j16 engine model build-gpu/bench/gpu/step build-gpu/bench/engine-bench $(for t in $TESTS; do echo build-gpu/t/gpu/$t.t; done) > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
# the GPU tests of what the step runs (STEP_TESTS; "" for none)
for t in $TESTS; do
    PAGEDLLM_BUILD=$PWD/build-gpu timeout 200 build-gpu/t/gpu/$t.t > $OUT/test-$t.log 2>&1
    echo "test $t: exit $?, $(grep -c '^ok' $OUT/test-$t.log) ok, $(grep -c '^not ok' $OUT/test-$t.log) not ok"
    grep '^not ok' $OUT/test-$t.log | head -5
done
wait
cp build-gpu/models/tiny/tokenizer.json $M/
build-gpu/bench/gpu/step $M 1,16,64,256 192 2>&1 | tee $OUT/step.log
# batch 1 and 16 under other settings (STEP_VARIANTS, ";"-separated
# environment settings, e.g. "PAGEDLLM_CUDA_PDL=0")
IFS=';' read -ra VARIANTS <<< "${STEP_VARIANTS:-}"
for v in "${VARIANTS[@]}"; do
    env $v build-gpu/bench/gpu/step $M 1,16 192 2>&1 | grep "step batch" | sed "s/^/$v: /" | tee -a $OUT/step-variants.log
done
for bs in ${STEP_NCU:-1 64}; do
PAGEDLLM_STEP_PROFILE=1 timeout 150 ncu --clock-control none --cache-control none --nvtx --nvtx-include "step/" --metrics gpu__time_duration.sum --csv --page raw build-gpu/bench/gpu/step $M $bs 192 > $OUT/ncu-step-$bs.csv 2> $OUT/ncu-step-$bs.err
BS=$bs python3 - <<'PY'
import csv, os, collections
rows = list(csv.reader(open(os.environ["OUT"] + "/ncu-step-" + os.environ["BS"] + ".csv")))
hdr = None
data = []
for r in rows:
    if "Kernel Name" in r:
        hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].isdigit():
        data.append(dict(zip(hdr, r)))
agg = collections.OrderedDict()
for d in data:
    name = d["Kernel Name"][:70]
    t = float(d["gpu__time_duration.sum"].replace(",", ""))
    a = agg.setdefault(name, [0, 0.0]); a[0] += 1; a[1] += t
tot = sum(v[1] for v in agg.values())
print(f"== batch {os.environ['BS']}: {len(data)} kernels, {tot/1e6:.3f} ms")
for k, v in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
    print(f"  {v[1]/1e6:8.3f} ms  {v[0]:4d}x  {k}")
PY
done
tail -2 $OUT/ncu-step-1.err
