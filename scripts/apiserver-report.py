#!/usr/bin/env python3
"""The report of a scripts/bench-apiserver.sh run (docs/apiserver-benchmark.md), from its
results.jsonl (one line per cell). Standard library only; plots through scripts/svgplot.py.
The objects the run is made of come from scripts/apiserver-fixtures.py.

  report RESULTS.jsonl OUTDIR   tables (results.md), per-set-up means (summary.csv) and plots
                                (apiserver-{throughput,p50,p99,cpu}.svg)
  quick RESULTS.jsonl           the --quick summary line
"""

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import svgplot

LEVELS_ORDER = ("closed", "open")


def level_key(r):
    return (LEVELS_ORDER.index(r["mode"]), r.get("concurrency", 0), r.get("rate", 0))


def level_name(r):
    return f"c={r['concurrency']}" if r["mode"] == "closed" else f"{r['rate']:g}/s"


def metric(r, metric_name, **labels):
    """(count, sum) of the apiserver series `metric_name` whose labels include `labels`."""
    count = total = 0.0
    for m in r.get("apiserver_metrics", []):
        if m["name"] != metric_name:
            continue
        if all(m["labels"].get(k) == v for k, v in labels.items()):
            count += m["count"]
            total += m.get("sum", 0.0)
    return count, total


def ms_per(r, metric_name, per=None, **labels):
    count, total = metric(r, metric_name, **labels)
    if per is None:
        per = count
    return total * 1000 / per if per else float("nan")


def webhook_ms(r):
    """Per CREATE: the apiserver's time in each webhook (mutate, validate), ms."""
    n = r["requests"] - r["errors"] or 1
    out = {}
    for m in r.get("apiserver_metrics", []):
        if m["name"] != "apiserver_admission_webhook_admission_duration_seconds":
            continue
        if m["labels"].get("operation") != "CREATE":
            continue
        kind = m["labels"].get("type", "?")
        out[kind] = out.get(kind, 0.0) + m.get("sum", 0.0) * 1000 / n
    return out


def resource(r):
    """What the cell created: taskruns, or pods (set-ups pod-*)."""
    return r.get("resource") or "taskruns"


def baseline(setup):
    """The no-admission set-up the same objects are created against."""
    return "pod-none" if setup.startswith("pod-") else "none"


def derived(r):
    n = max(1, r["requests"] - r["errors"])
    d = {}
    d["req_ms"] = ms_per(r, "apiserver_request_duration_seconds", per=n, verb="POST", resource=resource(r))
    d["sli_ms"] = ms_per(r, "apiserver_request_sli_duration_seconds", per=n, verb="POST", resource=resource(r))
    # The webhook's own reads (the Pod check's GET of the owning TaskRun), as the apiserver
    # timed them, per CREATE; and how many per CREATE.
    d["get_taskrun_ms"] = ms_per(r, "apiserver_request_duration_seconds", per=n, verb="GET", resource="taskruns")
    d["get_taskruns"] = metric(r, "apiserver_request_duration_seconds", verb="GET", resource="taskruns")[0] / n
    d["etcd_ms"] = ms_per(r, "etcd_request_duration_seconds", per=n, operation="create")
    wh = webhook_ms(r)
    d["mutate_ms"] = wh.get("admit", 0.0)
    d["validate_ms"] = wh.get("validating", 0.0)
    d["admit_step_ms"] = ms_per(r, "apiserver_admission_step_admission_duration_seconds", per=n, type="admit", operation="CREATE")
    d["validate_step_ms"] = ms_per(r, "apiserver_admission_step_admission_duration_seconds", per=n, type="validate", operation="CREATE")
    d["map_ms"] = ms_per(r, "apiserver_admission_controller_admission_duration_seconds", per=n, name="MutatingAdmissionPolicy", operation="CREATE")
    cpu = r.get("cpu_ms_per_create", {})
    d["cpu_apiserver"] = cpu.get("apiserver", float("nan"))
    d["cpu_etcd"] = cpu.get("etcd", float("nan"))
    d["cpu_webhook"] = cpu.get("webhook", float("nan"))
    d["cpu_client"] = cpu.get("client", float("nan"))
    own = [m for m in r.get("webhook_metrics", []) if m["name"] == "bookend_admission_duration_seconds"]
    for m in own:
        ep = m["labels"].get("endpoint")
        if ep in ("mutate", "validate", "validate-pods") and m["count"]:
            d[f"own_{ep.replace('-', '_')}_ms"] = m["sum"] * 1000 / m["count"]
    return d


def med(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else float("nan")


def fmt(v, digits=2):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return f"{v:,}"


def aggregate(rows):
    """Per (set-up, level): medians over rounds."""
    cells = defaultdict(list)
    for r in rows:
        cells[(r["setup"], level_name(r))].append(r)
    out = {}
    for key, rs in cells.items():
        ds = [derived(r) for r in rs]
        agg = {
            "rounds": len(rs),
            "requests": sum(r["requests"] for r in rs),
            "errors": sum(r["errors"] + r.get("mismatched", 0) + max(0, r.get("missing", 0)) for r in rs),
            "checked": sum(r.get("checked", 0) for r in rs),
            "throughput": med(r["throughput"] for r in rs),
            "p50": med(r["p50_ms"] for r in rs),
            "p90": med(r["p90_ms"] for r in rs),
            "p99": med(r["p99_ms"] for r in rs),
            "object_bytes": med(r.get("object_bytes", 0) for r in rs),
            "busy": med(r.get("machine_busy_cores", float("nan")) for r in rs),
            "others": med(r.get("others_busy_cores", float("nan")) for r in rs),
            "load": [r.get("loadavg_start", "") for r in rs] + [r.get("loadavg_end", "") for r in rs],
            "mode": rs[0]["mode"],
            "level": key[1],
            "sort": level_key(rs[0]),
        }
        for k in ds[0]:
            agg[k] = med(d.get(k, float("nan")) for d in ds)
        out[key] = agg
    return out


def load_range(loads):
    firsts = []
    for l in loads:
        try:
            firsts.append(float(l.split()[0]))
        except (ValueError, IndexError):
            pass
    if not firsts:
        return "–"
    return f"{min(firsts):.1f}–{max(firsts):.1f}"

def cmd_report(results_path, out_dir):
    rows = [json.loads(l) for l in open(results_path) if l.strip()]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(rows)
    setups = []
    for r in rows:
        if r["setup"] not in setups:
            setups.append(r["setup"])
    levels = sorted({(a["sort"], a["level"]) for a in agg.values()})
    levels = [l for _, l in levels]
    lines = []
    extra = [f"{r['setup']} r{r['round']} {level_name(r)}: {r['connections']}" for r in rows if r.get("connections", 1) > 1]
    lines.append(f"{len(rows)} cells, {sum(r['requests'] for r in rows):,} measured CREATEs, "
                 f"{sum(r.get('checked', 0) for r in rows):,} objects (TaskRuns, Pods) checked, "
                 f"errors (failed CREATEs + wrong or missing objects): "
                 f"{sum(r['errors'] + r.get('mismatched', 0) + max(0, r.get('missing', 0)) for r in rows)}; "
                 f"load average {load_range([x for a in agg.values() for x in a['load']])}.")
    if extra:
        lines.append("")
        lines.append("Cells whose client had to dial again (the apiserver closed its connection): " + "; ".join(extra) + ".")
    lines.append("")
    # Client view, per level.
    lines.append("### Client latency and throughput (median over rounds)")
    lines.append("")
    lines.append("| set-up | " + " | ".join(f"{l} p50 / p90 / p99 ms, rps" for l in levels) + " |")
    lines.append("|---|" + "---|" * len(levels))
    for s in setups:
        cells = []
        for l in levels:
            a = agg.get((s, l))
            cells.append("–" if a is None else f"{fmt(a['p50'])} / {fmt(a['p90'])} / {fmt(a['p99'])}, {fmt(a['throughput'])}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append("")
    # Ratios against null.
    if "null" in setups:
        lines.append("### Against the null webhook")
        lines.append("")
        lines.append("| set-up | " + " | ".join(f"{l}: +p50 ms, rps ÷ null" for l in levels) + " | apiserver CPU ÷ null (c=1) |")
        lines.append("|---|" + "---|" * (len(levels) + 1))
        for s in setups:
            cells = []
            for l in levels:
                a, n = agg.get((s, l)), agg.get(("null", l))
                if a is None or n is None:
                    cells.append("–")
                else:
                    cells.append(f"{a['p50'] - n['p50']:+.2f}, {a['throughput'] / n['throughput']:.2f}")
            a1, n1 = agg.get((s, "c=1")), agg.get(("null", "c=1"))
            cpu = "–" if a1 is None or n1 is None else f"{a1['cpu_apiserver'] / n1['cpu_apiserver']:.2f}"
            lines.append(f"| {s} | " + " | ".join(cells) + f" | {cpu} |")
        lines.append("")
    # Ratios against no admission (Pods: against Pods without a webhook).
    if any(baseline(s) in setups and s != baseline(s) for s in setups):
        lines.append("### Against no admission (TaskRuns: none; Pods: pod-none)")
        lines.append("")
        lines.append("| set-up | " + " | ".join(f"{l}: p50 ×, p99 ×, rps ×" for l in levels) + " |")
        lines.append("|---|" + "---|" * len(levels))
        for s in setups:
            if baseline(s) not in setups or s == baseline(s):
                continue
            cells = []
            for l in levels:
                a, b = agg.get((s, l)), agg.get((baseline(s), l))
                if a is None or b is None:
                    cells.append("–")
                else:
                    cells.append(f"{a['p50'] / b['p50']:.2f}, {a['p99'] / b['p99']:.2f}, {a['throughput'] / b['throughput']:.2f}")
            lines.append(f"| {s} ÷ {baseline(s)} | " + " | ".join(cells) + " |")
        for s, b in (("bookend-novalidate", "bookend"),):
            if s in setups and b in setups:
                cells = []
                for l in levels:
                    x, y = agg.get((s, l)), agg.get((b, l))
                    cells.append("–" if x is None or y is None else
                                 f"{x['p50'] / y['p50']:.2f}, {x['p99'] / y['p99']:.2f}, {x['throughput'] / y['throughput']:.2f}")
                lines.append(f"| {s} ÷ {b} | " + " | ".join(cells) + " |")
        lines.append("")
    # Pod CREATEs: where the Pod check's time goes.
    pod_setups = [s for s in setups if s.startswith("pod-")]
    if pod_setups:
        lines.append("### Pod CREATEs inside the apiserver (ms per CREATE, median over rounds)")
        lines.append("")
        lines.append("| set-up | level | request | SLI | validating webhook | bookend's own /validate-pods | its TaskRun GETs per CREATE, ms (apiserver) | etcd | CPU apiserver | CPU etcd | CPU webhook | busy (others) | stored bytes |")
        lines.append("|---|---|" + "---:|" * 11)
        for s in pod_setups:
            for l in levels:
                a = agg.get((s, l))
                if a is None:
                    continue
                lines.append(
                    f"| {s} | {l} | {fmt(a['req_ms'])} | {fmt(a['sli_ms'])} | {fmt(a['validate_ms'])} | "
                    f"{fmt(a.get('own_validate_pods_ms', float('nan')), 3)} | {fmt(a['get_taskruns'])}, {fmt(a['get_taskrun_ms'])} | "
                    f"{fmt(a['etcd_ms'])} | {fmt(a['cpu_apiserver'])} | {fmt(a['cpu_etcd'])} | {fmt(a['cpu_webhook'])} | "
                    f"{fmt(a['busy'])} ({fmt(a['others'])}) | {fmt(int(a['object_bytes']))} |"
                )
        lines.append("")
    # Where the time goes, per level.
    for l in levels:
        lines.append(f"### Inside the apiserver, {l} (ms per CREATE, median over rounds)")
        lines.append("")
        lines.append("| set-up | request | request without webhook HTTP (SLI) | mutating webhook | validating webhook | MutatingAdmissionPolicy | etcd | CPU apiserver | CPU etcd | CPU webhook | CPU client | bookend's own mutate / validate | machine busy cores (others) | stored bytes |")
        lines.append("|---|" + "---:|" * 13)
        for s in setups:
            a = agg.get((s, l))
            if a is None:
                continue
            own = "–"
            if not math.isnan(a.get("own_mutate_ms", float("nan"))):
                own = f"{fmt(a['own_mutate_ms'], 3)} / {fmt(a.get('own_validate_ms', float('nan')), 3)}"
            lines.append(
                f"| {s} | {fmt(a['req_ms'])} | {fmt(a['sli_ms'])} | {fmt(a['mutate_ms'])} | {fmt(a['validate_ms'])} | "
                f"{fmt(a['map_ms'])} | {fmt(a['etcd_ms'])} | {fmt(a['cpu_apiserver'])} | {fmt(a['cpu_etcd'])} | "
                f"{fmt(a['cpu_webhook'])} | {fmt(a['cpu_client'])} | {own} | {fmt(a['busy'])} ({fmt(a['others'])}) | {fmt(int(a['object_bytes']))} |"
            )
        lines.append("")
    # Every cell.
    lines.append("### Every cell")
    lines.append("")
    lines.append("| round | set-up | load | CREATEs | errors | rps | p50 | p90 | p99 | p99.9 ms | CPU ms/CREATE apiserver / etcd / webhook | busy (others) | load avg | checked |")
    lines.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
    for r in rows:
        cpu = r.get("cpu_ms_per_create", {})
        lines.append(
            f"| {r['round']} | {r['setup']} | {level_name(r)} | {r['requests']:,} | {r['errors'] + r.get('mismatched', 0) + max(0, r.get('missing', 0))} | "
            f"{r['throughput']:.0f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | "
            f"{fmt(cpu.get('apiserver', float('nan')))} / {fmt(cpu.get('etcd', float('nan')))} / {fmt(cpu.get('webhook', float('nan')))} | "
            f"{r.get('machine_busy_cores', 0):.2f} ({r.get('others_busy_cores', 0):.2f}) | {r.get('loadavg_end', '')} | {r.get('checked', 0):,} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    # summary.csv
    with open(out / "summary.csv", "w") as f:
        keys = ["throughput", "p50", "p90", "p99", "req_ms", "sli_ms", "mutate_ms", "validate_ms", "map_ms", "etcd_ms",
                "cpu_apiserver", "cpu_etcd", "cpu_webhook", "cpu_client", "object_bytes", "busy", "others", "errors", "rounds",
                "get_taskrun_ms"]
        f.write("setup,level," + ",".join(keys) + "\n")
        for s in setups:
            for l in levels:
                a = agg.get((s, l))
                if a is None:
                    continue
                f.write(f"{s},{l}," + ",".join(f"{a[k]:.4g}" if isinstance(a[k], float) else str(a[k]) for k in keys) + "\n")
    # plots
    closed = [l for l in levels if l.startswith("c=")]
    if closed:
        xs = {l: int(l[2:]) for l in closed}
        for key, name, ylabel in (("throughput", "throughput", "CREATEs per second"),
                                  ("p50", "p50 latency", "p50 ms"), ("p99", "p99 latency", "p99 ms")):
            title = "TaskRun CREATE" if not pod_setups else "CREATE (TaskRuns; pod-*: Pods)"
            svgplot.lines(out / f"apiserver-{key}.svg", f"{title}: {name}, closed loop",
                          "creators (one HTTP/2 connection)", ylabel,
                          [(s, [(xs[l], agg[(s, l)][key]) for l in closed if (s, l) in agg]) for s in setups],
                          xlog=True)
    if any(l == "c=1" for l in levels):
        parts = ["CPU apiserver", "CPU etcd", "CPU webhook"]
        keys = {"CPU apiserver": "cpu_apiserver", "CPU etcd": "cpu_etcd", "CPU webhook": "cpu_webhook"}
        vals = {}
        for s in setups:
            a = agg.get((s, "c=1"))
            if a:
                for p in parts:
                    vals[(s, p)] = a[keys[p]]
        svgplot.bars(out / "apiserver-cpu.svg", "CPU per CREATE (1 creator)" if pod_setups else "CPU per TaskRun CREATE (1 creator)", "ms of CPU", setups, parts, vals)
    print(f"report: {out / 'results.md'}, {out / 'summary.csv'}, {out}/*.svg")

def cmd_quick(results_path):
    rows = [json.loads(l) for l in open(results_path) if l.strip()]
    agg = aggregate(rows)
    null1, book1 = agg.get(("null", "c=1")), agg.get(("bookend", "c=1"))
    null8, book8 = agg.get(("null", "c=8")), agg.get(("bookend", "c=8"))
    if not all((null1, book1, null8, book8)):
        raise SystemExit("quick: missing cells")
    errors = sum(r["errors"] + r.get("mismatched", 0) + max(0, r.get("missing", 0)) for r in rows)
    print(
        f"null_p50_ms={null1['p50']:.3f} bookend_p50_ms={book1['p50']:.3f} "
        f"added_p50_ms={book1['p50'] - null1['p50']:.3f} rps_ratio_c8={book8['throughput'] / null8['throughput']:.3f} "
        f"object_bytes={int(book1['object_bytes'])} errors={errors}"
    )

def main():
    commands = {"report": cmd_report, "quick": cmd_quick}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__)
        sys.exit(2)
    commands[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
