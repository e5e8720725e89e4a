#!/usr/bin/env python3
"""Plots the scaling CSVs of scripts/bench-scaling.sh as SVG, with the standard library only
(no matplotlib needed): docs/bench/scaling-policies.svg, scaling-steps.svg, memory.svg.

Usage: plot-scaling.py [dir]   (default docs/bench)
"""
import csv
import math
import os
import sys

W, H = 640, 400
L, R, T, B = 80, 150, 40, 60  # margins
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def nice_ticks(lo, hi, log):
    if log:
        ticks, e = [], math.floor(math.log10(lo))
        while 10 ** e <= hi * 1.0001:
            for m in (1, 2, 5):
                v = m * 10 ** e
                if lo * 0.9999 <= v <= hi * 1.0001:
                    ticks.append(v)
            e += 1
        return ticks
    span = hi - lo or 1
    step = 10 ** math.floor(math.log10(span / 5))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2) if start + i * step <= hi * 1.0001]


def fmt(v):
    if v >= 1000 and v == int(v):
        return f"{int(v):,}"
    if v == int(v):
        return str(int(v))
    return f"{v:g}"


def chart(path, title, xlabel, ylabel, series, xlog=True, ylog=False, note=""):
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    xlo, xhi = min(xs), max(xs)
    ylo, yhi = (min(ys) * 0.8, max(ys) * 1.25) if ylog else (0, max(ys) * 1.1)
    pw, ph = W - L - R, H - T - B

    def sx(x):
        if xlog:
            return L + pw * (math.log10(x) - math.log10(xlo)) / ((math.log10(xhi) - math.log10(xlo)) or 1)
        return L + pw * (x - xlo) / ((xhi - xlo) or 1)

    def sy(y):
        if ylog:
            return T + ph * (1 - (math.log10(y) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)))
        return T + ph * (1 - (y - ylo) / ((yhi - ylo) or 1))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="15" font-weight="bold">{title}</text>']
    for t in nice_ticks(xlo, xhi, xlog):
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{T + ph + 16}" text-anchor="middle">{fmt(t)}</text>')
    for t in nice_ticks(max(ylo, 1e-9) if ylog else ylo, yhi, ylog):
        y = sy(t)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 18}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text transform="translate(18,{T + ph / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
    for i, (name, pts) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(pts))
        out.append(f'<path d="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"><title>{fmt(x)}: {y:.3g}</title></circle>')
        ly = T + 14 + 18 * i
        out.append(f'<line x1="{L + pw + 10}" y1="{ly - 4}" x2="{L + pw + 30}" y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{L + pw + 34}" y="{ly}">{name}</text>')
    if note:
        out.append(f'<text x="{L}" y="{H - 2}" font-size="10" fill="#666">{note}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {path}")


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
            chart(os.path.join(d, "scaling-policies.svg"),
                  "One decision vs loaded policies (typical TaskRun, 3 match)",
                  "loaded policies (log)", "median latency (µs)",
                  [("p50", pol)], xlog=True, note=machine)
        if steps:
            chart(os.path.join(d, "scaling-steps.svg"),
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
        chart(os.path.join(d, "memory.svg"), "Resident memory vs loaded policies",
              "loaded policies (log)", "RSS (MiB)", series, xlog=True, note=machine)


if __name__ == "__main__":
    main()
