#!/usr/bin/env python3
"""Plots the scaling CSVs of scripts/bench-scaling.sh as SVG through scripts/svgplot.py
(standard library only): docs/bench/scaling-policies.svg, scaling-steps.svg, memory.svg.

Usage: plot-scaling.py [dir]   (default docs/bench)
"""
import csv
import os
import sys

from svgplot import lines


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "docs/bench"
    machine = ""
    if os.path.exists(os.path.join(d, "machine.txt")):
        with open(os.path.join(d, "machine.txt")) as f:
            info = dict(line.rstrip("\n").split(": ", 1) for line in f if ": " in line)
        machine = f"{info.get('nproc', '?')} cores, {info.get('cpu', '?')}, {info.get('rustc', '')}"
    lat = os.path.join(d, "scaling-latency.csv")
    if os.path.exists(lat):
        with open(lat) as f:
            rows = list(csv.DictReader(f))
        pol = [(int(r["value"]), float(r["median_ns"]) / 1000) for r in rows if r["group"] == "scale_policies"]
        steps = [(int(r["value"]), float(r["median_ns"]) / 1000) for r in rows if r["group"] == "scale_steps"]
        if pol:
            lines(os.path.join(d, "scaling-policies.svg"),
                  "One decision vs loaded policies (typical TaskRun, 3 match)",
                  "loaded policies (log)", "median latency (µs)",
                  [("p50", pol)], xlog=True, note=machine)
        if steps:
            lines(os.path.join(d, "scaling-steps.svg"),
                  "One decision vs TaskRun size (10 policies, 3 match)",
                  "steps in the TaskRun (log)", "median latency (µs)",
                  [("p50", steps)], xlog=True, note=machine)
    mem = os.path.join(d, "memory.csv")
    if os.path.exists(mem):
        with open(mem) as f:
            rows = list(csv.DictReader(f))
        series = []
        for tasks in sorted({int(r["tasks"]) for r in rows}):
            sel = [r for r in rows if int(r["tasks"]) == tasks]
            series.append((f"{tasks:,} Tasks: kept", [(int(r["policies"]), int(r["rss_trimmed_kib"]) / 1024) for r in sel]))
            series.append((f"{tasks:,} Tasks: peak", [(int(r["policies"]), int(r["peak_rss_kib"]) / 1024) for r in sel]))
        lines(os.path.join(d, "memory.svg"), "Resident memory vs loaded policies",
              "loaded policies (log)", "RSS (MiB)", series, xlog=True, note=machine)


if __name__ == "__main__":
    main()
