#!/usr/bin/env bash
# Collects criterion results written since a given time into a CSV on stdout.
#   scripts/bench-collect.sh <criterion-dir> <since-epoch-seconds>
# Columns: group,function,value,median_ns,median_lo_ns,median_hi_ns,mean_ns
# (median_lo/hi: the 95% confidence interval of the median).
set -euo pipefail
exec python3 - "$@" <<'PY'
import json
import os
import sys


def main():
    root, since = sys.argv[1], float(sys.argv[2])
    rows = []
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
            continue
        est_path = os.path.join(dirpath, "estimates.json")
        if os.path.getmtime(est_path) < since:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        with open(est_path) as f:
            est = json.load(f)
        med = est["median"]
        rows.append((
            bench["group_id"],
            bench.get("function_id") or "",
            bench.get("value_str") or "",
            med["point_estimate"],
            med["confidence_interval"]["lower_bound"],
            med["confidence_interval"]["upper_bound"],
            est["mean"]["point_estimate"],
        ))

    def key(r):
        v = r[2]
        return (r[0], r[1], int(v) if v.isdigit() else 0, v)

    print("group,function,value,median_ns,median_lo_ns,median_hi_ns,mean_ns")
    for r in sorted(rows, key=key):
        print(f"{r[0]},{r[1]},{r[2]},{r[3]:.1f},{r[4]:.1f},{r[5]:.1f},{r[6]:.1f}")


if __name__ == "__main__":
    main()
PY
