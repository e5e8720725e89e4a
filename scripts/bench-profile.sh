#!/usr/bin/env bash
# Instructions per iteration of one benchmark case, counted by callgrind (repeatable on a
# loaded machine, unlike wall-clock time), and the callgrind profile for callgrind_annotate.
#
#   scripts/bench-profile.sh <case> [steps] [policies] [iterations] [cached tasks]
#   scripts/bench-profile.sh review 3 10 200
#   scripts/bench-profile.sh taskref 3 10 200 10000
#   scripts/bench-profile.sh pod 3 10 200
#
# Cases: review, taskref, decide, diff, parse, scan, example, build, backstop-build, the Pod
# backstop's pod, pod-remote, pod-build, pod-build-review (benches/profile.rs). Prints
# `case,steps,policies,instructions_per_iteration`; the profile is left in
# target/callgrind.<case>-<steps>-<policies>.out.
set -euo pipefail
cd "$(dirname "$0")/.."
case=${1:-review}; steps=${2:-3}; policies=${3:-10}; iters=${4:-200}; tasks=${5:-0}
target=${CARGO_TARGET_DIR:-target}
bin=$(cargo bench --bench profile --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="profile" and m.get("executable"): print(m["executable"])' | tail -n1)
count() {
  local out=$1; shift
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$@" >/dev/null 2>&1
  grep -m1 '^summary:' "$out" | awk '{print $2}'
}
base=$(count "$target/callgrind.setup.out" setup "$steps" "$policies" 0 "$tasks")
total=$(count "$target/callgrind.$case-$steps-$policies.out" "$case" "$steps" "$policies" "$iters" "$tasks")
echo "$case,$steps,$policies,$(( (total - base) / iters ))"
