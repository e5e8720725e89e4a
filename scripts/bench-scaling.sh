#!/usr/bin/env bash
# Scaling curves for docs/benchmarks.md (issue 6): decision latency as policies grow
# (1 -> 10,000), as TaskRuns grow (3 -> 500 steps) and with 0 or 10,000 cached Tasks, and
# memory with N policies and M cached Tasks. Writes CSVs and SVG plots into docs/bench/.
#
#   scripts/bench-scaling.sh            # everything (about 2 minutes of benchmarking)
#   SKIP_LATENCY=1 scripts/bench-scaling.sh   # memory only
#
# Environment: WARMUP (s, default 1), MEASURE (s, default 3), OUT (default docs/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-docs/bench}
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$out"

{
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "rustc: $(rustc -V)"
  echo "kernel: $(uname -r)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
cat "$out/machine.txt"

if [ -z "${SKIP_LATENCY:-}" ]; then
  since=$(date +%s)
  sleep 1
  cargo bench --bench engine -- --warm-up-time "${WARMUP:-1}" --measurement-time "${MEASURE:-3}" \
    '^scale_(policies|steps|tasks)/'
  scripts/bench-collect.sh "$target/criterion" "$since" > "$out/scaling-latency.csv"
  echo "wrote $out/scaling-latency.csv"
fi

# Memory: one process per point, so each peak is its own.
cargo bench --bench memory --no-run
echo "policies,tasks,rss_start_kib,rss_end_kib,peak_rss_kib,build_ms,outcome,rss_trimmed_kib" > "$out/memory.csv"
for tasks in 0 10000; do
  for policies in 1 10 100 1000 10000; do
    cargo bench -q --bench memory -- "$policies" "$tasks" | tail -n 1 | tee -a "$out/memory.csv"
  done
done
echo "wrote $out/memory.csv"

python3 scripts/plot-scaling.py "$out"
