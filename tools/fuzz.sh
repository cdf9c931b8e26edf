#!/bin/sh
# Runs libFuzzer targets built by make fuzzers, each for SECONDS, one after
# another, and prints a line per target from libFuzzer's final stats:
# executions, coverage (cov: edges, ft: features), corpus size.
#   tools/fuzz.sh BUILD_DIR SECONDS NAME...
# Each target starts from its seed corpus t/fuzz/corpus/NAME/ (read only)
# and from the inputs earlier runs kept in BUILD_DIR/fuzz/corpus/NAME/;
# t/fuzz/NAME.options, when there, adds flags (one per line).  A crash,
# a leak, a sanitizer report or a timeout stops that target, leaves its
# input in BUILD_DIR/fuzz/crash-NAME-*, and fails the script at the end.
set -u

build=$1
# request_fuzz finds the tiny model there
export PAGEDLLM_BUILD="$build"
seconds=$2
shift 2
failed=""

for name in "$@"; do
    work=$build/fuzz/corpus/$name
    log=$build/fuzz/$name.log
    opts=""
    mkdir -p "$work"
    if [ -f "t/fuzz/$name.options" ]; then
        opts=$(cat "t/fuzz/$name.options")
    fi
    # shellcheck disable=SC2086
    "$build/fuzz/$name" -max_total_time="$seconds" -print_final_stats=1 \
        -timeout=60 -artifact_prefix="$build/fuzz/crash-$name-" $opts \
        "$work" "t/fuzz/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    secs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
    printf 'fuzz %-12s %ss: %s executions (%s/s), cov %s, ft %s, corpus %s' \
        "$name" "$seconds" "${execs:-?}" "${secs:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}"
    if [ "$rc" -ne 0 ]; then
        printf ': FAILED (exit %s)\n' "$rc"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" \
            | head -8
        failed="$failed $name"
    else
        printf '\n'
    fi
done

if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed (logs in $build/fuzz/NAME.log)" >&2
    exit 1
fi
