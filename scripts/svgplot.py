"""The one SVG plot writer of the benchmark scripts (standard library only, no matplotlib):
line plots on linear or log axes, and grouped bars. Used by scripts/plot-scaling.py
(docs/bench/scaling-*.svg, memory.svg) and scripts/apiserver-report.py (apiserver-*.svg).

  lines(path, title, xlabel, ylabel, [(name, [(x, y), ...]), ...], xlog=, ylog=, note=)
  bars(path, title, ylabel, groups, series_names, {(group, series): y}, note=)

NaN values are left out; a plot with no value is not written.
"""
import math

W, H = 640, 400
L, R, T, B = 80, 150, 40, 60  # margins; the legend is in the right one
PW, PH = W - L - R, H - T - B
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]


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


def _head(title):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
            'font-family="sans-serif" font-size="12">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{L}" y="22" font-size="15" font-weight="bold">{title}</text>']


def _y_axis(out, sy, ylo, yhi, ylog):
    for t in nice_ticks(max(ylo, 1e-9) if ylog else ylo, yhi, ylog):
        y = sy(t)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + PW}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')


def _frame(out, xlabel, ylabel):
    out.append(f'<rect x="{L}" y="{T}" width="{PW}" height="{PH}" fill="none" stroke="#444"/>')
    if xlabel:
        out.append(f'<text x="{L + PW / 2}" y="{H - 18}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text transform="translate(18,{T + PH / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')


def _write(out, path, note):
    if note:
        out.append(f'<text x="{L}" y="{H - 2}" font-size="10" fill="#666">{note}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {path}")


def lines(path, title, xlabel, ylabel, series, xlog=False, ylog=False, note=""):
    """Line plot of series = [(name, [(x, y), ...]), ...]; returns whether it was written."""
    series = [(name, sorted(p for p in pts if not math.isnan(p[1]))) for name, pts in series]
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    if not xs:
        return False
    xlo, xhi = min(xs), max(xs)
    ylo, yhi = (min(ys) * 0.8, max(ys) * 1.25) if ylog else (0, max(ys) * 1.1)

    def sx(x):
        if xlog:
            return L + PW * (math.log10(x) - math.log10(xlo)) / ((math.log10(xhi) - math.log10(xlo)) or 1)
        return L + PW * (x - xlo) / ((xhi - xlo) or 1)

    def sy(y):
        if ylog:
            return T + PH * (1 - (math.log10(y) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)))
        return T + PH * (1 - (y - ylo) / ((yhi - ylo) or 1))

    out = _head(title)
    for t in nice_ticks(xlo, xhi, xlog):
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + PH}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{T + PH + 16}" text-anchor="middle">{fmt(t)}</text>')
    _y_axis(out, sy, ylo, yhi, ylog)
    _frame(out, xlabel, ylabel)
    for i, (name, pts) in enumerate(series):
        if not pts:
            continue
        c = COLORS[i % len(COLORS)]
        d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(pts))
        out.append(f'<path d="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"><title>{fmt(x)}: {y:.3g}</title></circle>')
        ly = T + 14 + 18 * i
        out.append(f'<line x1="{L + PW + 10}" y1="{ly - 4}" x2="{L + PW + 30}" y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{L + PW + 34}" y="{ly}">{name}</text>')
    _write(out, path, note)
    return True


def bars(path, title, ylabel, groups, series_names, values, note=""):
    """Grouped bars: one group per entry of `groups`, one bar per series, values[(group, series)]
    = y; returns whether it was written."""
    ys = [v for v in values.values() if not math.isnan(v)]
    if not ys:
        return False
    yhi = max(ys) * 1.1

    def sy(y):
        return T + PH * (1 - y / (yhi or 1))

    out = _head(title)
    _y_axis(out, sy, 0, yhi, False)
    _frame(out, "", ylabel)
    gw = PW / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series_names))
    for gi, g in enumerate(groups):
        out.append(f'<text x="{L + gi * gw + gw / 2:.1f}" y="{T + PH + 16}" text-anchor="middle">{g}</text>')
        for si, s in enumerate(series_names):
            v = values.get((g, s), float("nan"))
            if math.isnan(v):
                continue
            x = L + gi * gw + gw * 0.1 + si * bw
            out.append(f'<rect x="{x:.1f}" y="{sy(v):.1f}" width="{bw - 1:.1f}" height="{T + PH - sy(v):.1f}" '
                       f'fill="{COLORS[si % len(COLORS)]}"><title>{g}, {s}: {v:.3g}</title></rect>')
    for si, s in enumerate(series_names):
        ly = T + 14 + 18 * si
        out.append(f'<rect x="{L + PW + 10}" y="{ly - 10}" width="14" height="10" fill="{COLORS[si % len(COLORS)]}"/>')
        out.append(f'<text x="{L + PW + 30}" y="{ly}">{s}</text>')
    _write(out, path, note)
    return True
