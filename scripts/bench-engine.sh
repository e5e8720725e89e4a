#!/usr/bin/env bash
# Runs the engine benchmarks (benches/engine.rs) with short, fixed settings and writes the
# medians to docs/bench/engine-<label>.csv.
#
#   scripts/bench-engine.sh [label] [criterion filter regex]
#   scripts/bench-engine.sh after '^(review|decide|diff|parts)/'
#
# Environment: WARMUP (s, default 1), MEASURE (s, default 3), OUT (default docs/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
label=${1:-current}
filter=${2:-'^(review|decide|diff|parts)/'}
out=${OUT:-docs/bench}
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$out"
since=$(date +%s)
sleep 1
cargo bench --bench engine -- --warm-up-time "${WARMUP:-1}" --measurement-time "${MEASURE:-3}" "$filter"
scripts/bench-collect.sh "$target/criterion" "$since" > "$out/engine-$label.csv"
echo "wrote $out/engine-$label.csv"
