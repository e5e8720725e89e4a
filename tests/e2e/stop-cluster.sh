#!/usr/bin/env bash
# Stops what tests/e2e/start-cluster.sh started in WORKDIR (default tests/e2e/.work/cluster):
# SIGTERM to the recorded PIDs (apiserver first, then etcd), SIGKILL after 10 s.
# Usage: tests/e2e/stop-cluster.sh [WORKDIR] [--clean]   (--clean also deletes WORKDIR)
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=$E2E_DIR/.work/cluster
CLEAN=0
for a in "$@"; do
  case $a in
    --clean) CLEAN=1 ;;
    *) D=$a ;;
  esac
done
[[ -d $D ]] || { echo "stop-cluster: no such directory $D" >&2; exit 0; }

for name in kube-apiserver etcd; do
  pf="$D/$name.pid"
  [[ -f $pf ]] || continue
  pid=$(cat "$pf")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-cluster: $name ($pid) did not stop on SIGTERM, killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stop-cluster: stopped $name ($pid)" >&2
  fi
  rm -f "$pf"
done
if [[ $CLEAN == 1 ]]; then
  rm -rf "$D"
fi
