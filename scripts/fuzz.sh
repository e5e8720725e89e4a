#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/) for a bounded time and prints one summary line per target.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]     default: 60 s, every target
#
# Targets: review (AdmissionReview bytes → admission::review), policy_load (text →
# parse_policies → PolicySet::build → engine), engine (structured TaskRuns → engine::decide →
# json-patch check → second pass). Only a stable toolchain is installed, so the nightly flags
# cargo-fuzz passes are enabled with RUSTC_BOOTSTRAP=1; the sanitizer is off (`-s none`: the
# crate forbids unsafe code, and it doubles the executions per second).
#
# A crash exits 1 and leaves the input in fuzz/artifacts/<target>/ (replay it with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> -s none fuzz/artifacts/<target>/<file>`); turn each
# into a regression test. When cargo-fuzz is missing and cannot be installed, prints SKIP and
# exits 0 (FUZZ_REQUIRED=1 makes that an error).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(review policy_load engine)

skip() {
    echo "SKIP fuzzing: $1"
    [ "${FUZZ_REQUIRED:-0}" = 1 ] && exit 1
    exit 0
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz not found: cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked >/tmp/cargo-fuzz-install.log 2>&1 ||
        skip "cargo-fuzz could not be installed (see /tmp/cargo-fuzz-install.log)"
fi
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never
mkdir -p fuzz/artifacts

if ! cargo fuzz build -s none >fuzz/artifacts/build.log 2>&1; then
    tail -30 fuzz/artifacts/build.log
    if grep -q "the option \`Z\` is only accepted on the nightly compiler" fuzz/artifacts/build.log; then
        skip "this compiler refuses -Z flags even with RUSTC_BOOTSTRAP=1"
    fi
    echo "FAIL: cargo fuzz build (fuzz/artifacts/build.log)"
    exit 1
fi

status=0
for target in "${targets[@]}"; do
    corpus=fuzz/corpus/$target
    mkdir -p "$corpus" "fuzz/artifacts/$target"
    seeds=()
    [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
    dict=()
    [ -f "fuzz/$target.dict" ] && dict=("-dict=fuzz/$target.dict")
    log=fuzz/artifacts/$target.log
    started=$(date +%s)
    set +e
    cargo fuzz run "$target" -s none "$corpus" "${seeds[@]}" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -timeout=10 \
        -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
    rc=$?
    set -e
    took=$(($(date +%s) - started))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
    units=$(find "$corpus" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "fuzz $target: ok, ${took}s, ${execs:-?} executions, coverage ${cov:-?}, corpus $units"
    else
        status=1
        echo "fuzz $target: FAILED (exit $rc) after ${took}s, ${execs:-?} executions: see $log"
        grep -E "panicked at|ERROR: libFuzzer|SUMMARY|Test unit written" "$log" | head -10
    fi
done
exit $status
