#!/usr/bin/env python3
"""Helpers of scripts/bench-apiserver.sh (docs/apiserver-benchmark.md). Standard library only.

  webhooks LIST.json URL CA_B64          deploy/'s webhook configurations (a kubectl List in
                                          JSON) pointed at URL: clientConfig {url: URL+path,
                                          caBundle}, everything else as bookend registers it
  map PATCH.json WEBHOOKS.json           a MutatingAdmissionPolicy + binding applying PATCH
                                          (bookend's own patch, as CEL) with the match of
                                          bookend's mutating TaskRun webhook
  kyverno OUT.json                        a Kyverno ClusterPolicy: pre-step and post-steps
                                          by patchesJson6902, as platform teams write it
  expect OBJECT.json                      an expectation (spec, annotations) from a TaskRun
  steps NAME...                           an expectation of step names only
  policies N DIR                          N-4 non-matching filler policies (as benches/ make
                                          them) into DIR/fillers.json
  replace-patch OBJECT.json ADMITTED.json the same change as one replace of the steps
  minimal-patch OBJECT.json ADMITTED.json the same change as one operation per changed place
  grow TASKRUN.json N                     the TaskRun with N user steps (its own, repeated)
  bytes BOOKEND [STEPS]                   what bookend injects into examples/taskruns/build.yaml
                                          (grown to STEPS user steps) with examples/policies:
                                          object, patch and helper bytes (deterministic)
  report RESULTS.jsonl OUTDIR             tables (results.md), per-set-up means (summary.csv)
                                          and plots (*.svg)
  quick RESULTS.jsonl                     the --quick summary line
"""

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(path):
    with open(path) as f:
        return json.load(f)


def load_items(path):
    """Objects of a file holding one JSON value, a List, or several JSON values one after
    another (what `kubectl create --dry-run=client -o json` prints for several documents)."""
    text = Path(path).read_text()
    decoder, pos, values = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)
    items = []
    for v in values:
        items.extend(v["items"] if v.get("kind") == "List" else [v])
    return items


def dump(value):
    json.dump(value, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


# ------------------------------------------------------------------------------------------
# set-ups


def cmd_webhooks(list_path, url, ca_b64):
    items = load_items(list_path)
    for item in items:
        meta = item["metadata"]
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            meta.pop(key, None)
        for hook in item.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca_b64}
    dump({"apiVersion": "v1", "kind": "List", "items": items})


def cel(value):
    """A JSON value as a CEL literal. Maps take dyn() values: Kubernetes CEL refuses map
    literals with values of different types, and spec.taskSpec is untyped
    (x-kubernetes-preserve-unknown-fields)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{cel(k)}: dyn({cel(v)})" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"dyn({cel(v)})" for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value)  # a JSON string is a valid CEL string literal


def mutating_taskrun_hook(webhooks_path):
    for item in load_items(webhooks_path):
        if item["kind"] != "MutatingWebhookConfiguration":
            continue
        for hook in item["webhooks"]:
            if any("taskruns" in r.get("resources", []) for r in hook["rules"]):
                return hook
    raise SystemExit("no mutating TaskRun webhook in " + webhooks_path)


def cmd_map(patch_path, webhooks_path):
    patch = load(patch_path)
    hook = mutating_taskrun_hook(webhooks_path)
    ops = []
    for op in patch:
        if op["op"] not in ("add", "replace"):
            raise SystemExit(f"unsupported op {op['op']}")
        ops.append(
            f'JSONPatch{{op: "{op["op"]}", path: {json.dumps(op["path"])}, value: {cel(op["value"])}}}'
        )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "bookend-bench"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {k: r[k] for k in ("apiGroups", "apiVersions", "operations", "resources", "scope") if k in r}
                    for r in hook["rules"]
                ],
                "matchPolicy": hook.get("matchPolicy", "Equivalent"),
                "namespaceSelector": hook.get("namespaceSelector", {}),
            },
            # Idempotency is the policy author's: only TaskRuns with an inline spec and none of
            # bookend's steps yet.
            "matchConditions": [
                {
                    "name": "not-injected",
                    "expression": "has(object.spec.taskSpec) && has(object.spec.taskSpec.steps) && "
                    "!object.spec.taskSpec.steps.exists(s, has(s.name) && s.name.startsWith('bookend-'))",
                }
            ],
            "failurePolicy": hook.get("failurePolicy", "Ignore"),
            "reinvocationPolicy": hook.get("reinvocationPolicy", "Never"),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[" + ", ".join(ops) + "]"}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "bookend-bench"},
        "spec": {"policyName": "bookend-bench"},
    }
    dump({"apiVersion": "v1", "kind": "List", "items": [policy, binding]})


def cmd_kyverno(out_path, credentials_path, sbom_path):
    """The example policies' steps the Kyverno way: a ClusterPolicy adding the pre-step at
    index 0 and the post-steps at the end, with a hand-written "not injected yet"
    precondition (no Always: Kyverno cannot express it)."""
    creds = load(credentials_path)["spec"]
    sbom = load(sbom_path)["spec"]
    patches = [{"op": "add", "path": "/spec/taskSpec/steps/0", "value": creds["preSteps"][0]}]
    for step in sbom["postSteps"]:
        patches.append({"op": "add", "path": "/spec/taskSpec/steps/-", "value": step})
    patches.append({"op": "add", "path": "/spec/taskSpec/volumes", "value": creds["volumes"]})
    # Kyverno reads `$(...)` as a reference to another field of the resource and refuses the
    # policy ("variable substitution failed") on Tekton's own `$(context.taskRun.name)`. Its
    # escape, `\$(`, is not valid inside the JSON (or YAML double-quoted) patch text, so the
    # dollar is written as the JSON escape \u0024, which Kyverno's pattern does not see.
    import_yaml = json.dumps(patches).replace("$(", "\\u0024(")  # YAML accepts JSON
    policy = {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "bench-org-steps"},
        "spec": {
            "background": False,
            "rules": [
                {
                    "name": "org-steps",
                    "match": {
                        "any": [
                            {
                                "resources": {
                                    "kinds": ["tekton.dev/v1/TaskRun"],
                                    "operations": ["CREATE"],
                                    "namespaces": ["team-*"],
                                }
                            }
                        ]
                    },
                    "preconditions": {
                        "all": [
                            {
                                "key": "{{ request.object.spec.taskSpec.steps[?starts_with(name, 'bookend-')] | length(@) }}",
                                "operator": "Equals",
                                "value": 0,
                            }
                        ]
                    },
                    "mutate": {"patchesJson6902": import_yaml},
                }
            ],
        },
    }
    Path(out_path).write_text(json.dumps(policy, indent=1) + "\n")


def cmd_expect(object_path):
    obj = load(object_path)
    dump({"spec": obj["spec"], "annotations": obj.get("metadata", {}).get("annotations", {})})


def cmd_steps(names):
    dump({"steps": names})


def one_step(step):
    return [
        {
            "name": step,
            "image": "docker.io/library/busybox:1.37",
            "command": ["/bin/sh", "-c"],
            "args": [f"echo {step}"],
        }
    ]


def filler(i):
    """benches/support/mod.rs `filler`: a policy that never matches team-a's TaskRuns."""
    name = f"filler-{i}"
    spec = {"priority": 100 + i % 7, "preSteps": one_step(f"bookend-f{i}")}
    kind, meta = "ClusterStepPolicy", {"name": name}
    m = i % 10
    if m <= 4:
        spec["match"] = {"namespaces": [f"team-x{i}"]}
    elif m == 5:
        kind, meta = "StepPolicy", {"name": name, "namespace": f"team-x{i}"}
    elif m == 6:
        spec["match"] = {"namespaces": [f"team-x{i}-*"]}
    elif m == 7:
        spec["match"] = {"namespaces": [f"*-stage-{i}"]}
    elif m == 8:
        spec["match"] = {"selector": {"matchLabels": {"app.kubernetes.io/name": f"svc-{i}"}}}
    else:
        spec["match"] = {"namespaceSelector": {"matchLabels": {"cost-center": f"cc-{i}"}}}
    return {"apiVersion": "bookend.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def cmd_policies(n, out_dir):
    n = int(n)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = [filler(i) for i in range(max(0, n - 4))]
    (out / "fillers.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, separators=(",", ":")) + "\n"
    )


def cmd_minimal_patch(object_path, admitted_path):
    """The admitted TaskRun's change as one operation per changed place: the record
    annotation, an `add` at its index for each inserted step, an operation per changed member
    of a step that was there (as bookend's minimal diff aligns steps by name)."""
    obj, adm = load(object_path), load(admitted_path)
    ops = []
    ann = adm.get("metadata", {}).get("annotations", {})
    if "annotations" not in obj.get("metadata", {}):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": ann})
    else:
        for k, v in ann.items():
            ops.append({"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"), "value": v})
    old = {s.get("name"): s for s in obj["spec"]["taskSpec"]["steps"]}
    for j, step in enumerate(adm["spec"]["taskSpec"]["steps"]):
        before = old.get(step.get("name"))
        base = f"/spec/taskSpec/steps/{j}"
        if before is None:
            ops.append({"op": "add", "path": base, "value": step})
            continue
        for k in sorted(set(step) | set(before)):
            if k not in before:
                ops.append({"op": "add", "path": f"{base}/{k}", "value": step[k]})
            elif k not in step:
                ops.append({"op": "remove", "path": f"{base}/{k}"})
            elif step[k] != before[k]:
                ops.append({"op": "replace", "path": f"{base}/{k}", "value": step[k]})
    new_vol, old_vol = adm["spec"]["taskSpec"].get("volumes"), obj["spec"]["taskSpec"].get("volumes")
    if new_vol is not None and new_vol != old_vol:
        ops.append({"op": "replace" if old_vol is not None else "add", "path": "/spec/taskSpec/volumes", "value": new_vol})
    dump(ops)


def cmd_replace_patch(object_path, admitted_path):
    """The admitted TaskRun's change as few operations: the record annotation, one replace
    (or add) of spec.taskSpec.steps and of spec.taskSpec.volumes."""
    obj, adm = load(object_path), load(admitted_path)
    ops = []
    ann = adm.get("metadata", {}).get("annotations", {})
    if "annotations" not in obj.get("metadata", {}):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": ann})
    else:
        for k, v in ann.items():
            ops.append({"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"), "value": v})
    for member in ("steps", "volumes"):
        new = adm["spec"]["taskSpec"].get(member)
        old = obj["spec"]["taskSpec"].get(member)
        if new is None or new == old:
            continue
        ops.append({"op": "replace" if old is not None else "add", "path": f"/spec/taskSpec/{member}", "value": new})
    dump(ops)


def grown(taskrun, n):
    """The TaskRun with `n` user steps: its own repeated, renamed `<name>-<i>`."""
    base = taskrun["spec"]["taskSpec"]["steps"]
    steps = []
    for i in range(n):
        step = json.loads(json.dumps(base[i % len(base)]))
        step["name"] = f"{step['name']}-{i + 1}"
        steps.append(step)
    taskrun["spec"]["taskSpec"]["steps"] = steps
    return taskrun


def cmd_grow(taskrun_path, n):
    dump(grown(load(taskrun_path), int(n)))


def cmd_bytes(bookend, steps=None):
    """Compact-JSON sizes of what `bookend render` admits for build.yaml (or a copy grown to
    `steps` user steps, each like build.yaml's `test`), with examples/policies."""
    import subprocess
    import tempfile

    def render(path, fmt):
        return subprocess.run(
            [bookend, "render", "--policies", "examples/policies", "-f", path, "-o", fmt],
            capture_output=True, text=True, check=True,
        ).stdout

    src = "examples/taskruns/build.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        plain = json.loads(subprocess.run(
            [bookend, "render", "--policies", tmp, "-f", src, "-o", "json"],
            capture_output=True, text=True, check=True).stdout)
        if steps:
            plain = grown(plain, int(steps))
        path = Path(tmp) / "taskrun.json"
        path.write_text(json.dumps(plain))
        admitted = json.loads(render(str(path), "json"))
        patch = render(str(path), "patch").strip()
    size = lambda v: len(json.dumps(v, separators=(",", ":")))
    all_steps = admitted["spec"]["taskSpec"]["steps"]
    helpers = [s for s in all_steps if s["name"].startswith("bookend-gate-") or s["name"] == "bookend-verdict"]
    gated = [s for s in all_steps if any("bookend-gate-" in w.get("input", "") for w in s.get("when", []))]
    print(
        f"user_steps={len(plain['spec']['taskSpec']['steps'])} object_bytes={size(admitted)} input_bytes={size(plain)} "
        f"patch_bytes={len(patch)} patch_ops={len(json.loads(patch))} helpers={len(helpers)} "
        f"helper_bytes={sum(size(h) for h in helpers)} "
        f"record_bytes={size(admitted['metadata'].get('annotations', {}))} gated_steps={len(gated)}"
    )


# ------------------------------------------------------------------------------------------
# report

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


def derived(r):
    n = max(1, r["requests"] - r["errors"])
    d = {}
    d["req_ms"] = ms_per(r, "apiserver_request_duration_seconds", per=n, verb="POST", resource="taskruns")
    d["sli_ms"] = ms_per(r, "apiserver_request_sli_duration_seconds", per=n, verb="POST", resource="taskruns")
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
        if ep in ("mutate", "validate") and m["count"]:
            d[f"own_{ep}_ms"] = m["sum"] * 1000 / m["count"]
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


def svg_lines(title, xlabel, ylabel, series, path, logx=False):
    """A small line plot: series = {name: [(x, y), ...]}."""
    w, h, ml, mr, mt, mb = 640, 380, 64, 170, 34, 46
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts if not math.isnan(y)]
    if not xs or not ys:
        return
    tx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    x0, x1 = min(map(tx, xs)), max(map(tx, xs))
    if x1 == x0:
        x1 = x0 + 1
    y1 = max(ys) * 1.1 or 1
    sx = lambda x: ml + (tx(x) - x0) / (x1 - x0) * (w - ml - mr)
    sy = lambda y: h - mb - y / y1 * (h - mt - mb)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{ml}" y1="{h-mb}" x2="{w-mr}" y2="{h-mb}" stroke="black"/>',
           f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h-mb}" stroke="black"/>',
           f'<text x="{(ml+w-mr)/2}" y="{h-10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="14" y="{(mt+h-mb)/2}" text-anchor="middle" transform="rotate(-90 14 {(mt+h-mb)/2})">{ylabel}</text>']
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<line x1="{ml-4}" y1="{sy(y):.1f}" x2="{w-mr}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.3g}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{h-mb+16}" text-anchor="middle">{x:g}</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = colors[i % len(colors)]
        pts = sorted(p for p in pts if not math.isnan(p[1]))
        if not pts:
            continue
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>')
        ly = mt + 14 + i * 18
        out.append(f'<line x1="{w-mr+10}" y1="{ly-4}" x2="{w-mr+28}" y2="{ly-4}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{w-mr+32}" y="{ly}">{name}</text>')
    out.append("</svg>")
    Path(path).write_text("\n".join(out) + "\n")


def svg_bars(title, ylabel, groups, series_names, values, path):
    """Grouped bars: values[(group, series)] = y."""
    w, h, ml, mr, mt, mb = 680, 380, 64, 170, 34, 60
    ys = [v for v in values.values() if not math.isnan(v)]
    if not ys:
        return
    y1 = max(ys) * 1.1
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]
    gw = (w - ml - mr) / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series_names))
    sy = lambda y: h - mb - y / y1 * (h - mt - mb)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{ml}" y1="{h-mb}" x2="{w-mr}" y2="{h-mb}" stroke="black"/>',
           f'<text x="14" y="{(mt+h-mb)/2}" text-anchor="middle" transform="rotate(-90 14 {(mt+h-mb)/2})">{ylabel}</text>']
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<line x1="{ml-4}" y1="{sy(y):.1f}" x2="{w-mr}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.3g}</text>')
    for gi, g in enumerate(groups):
        gx = ml + gi * gw + gw * 0.1
        out.append(f'<text x="{ml + gi*gw + gw/2:.1f}" y="{h-mb+16}" text-anchor="middle">{g}</text>')
        for si, s in enumerate(series_names):
            v = values.get((g, s), float("nan"))
            if math.isnan(v):
                continue
            x = gx + si * bw
            out.append(f'<rect x="{x:.1f}" y="{sy(v):.1f}" width="{bw-1:.1f}" height="{h-mb-sy(v):.1f}" fill="{colors[si % len(colors)]}"/>')
    for si, s in enumerate(series_names):
        ly = mt + 14 + si * 18
        out.append(f'<rect x="{w-mr+10}" y="{ly-10}" width="14" height="10" fill="{colors[si % len(colors)]}"/>')
        out.append(f'<text x="{w-mr+30}" y="{ly}">{s}</text>')
    out.append("</svg>")
    Path(path).write_text("\n".join(out) + "\n")


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
                 f"{sum(r.get('checked', 0) for r in rows):,} TaskRuns checked, "
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
                "cpu_apiserver", "cpu_etcd", "cpu_webhook", "cpu_client", "object_bytes", "busy", "others", "errors", "rounds"]
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
        svg_lines("TaskRun CREATE: throughput, closed loop", "creators (one HTTP/2 connection)", "CREATEs per second",
                  {s: [(xs[l], agg[(s, l)]["throughput"]) for l in closed if (s, l) in agg] for s in setups},
                  out / "apiserver-throughput.svg", logx=True)
        svg_lines("TaskRun CREATE: p50 latency, closed loop", "creators (one HTTP/2 connection)", "p50 ms",
                  {s: [(xs[l], agg[(s, l)]["p50"]) for l in closed if (s, l) in agg] for s in setups},
                  out / "apiserver-p50.svg", logx=True)
        svg_lines("TaskRun CREATE: p99 latency, closed loop", "creators (one HTTP/2 connection)", "p99 ms",
                  {s: [(xs[l], agg[(s, l)]["p99"]) for l in closed if (s, l) in agg] for s in setups},
                  out / "apiserver-p99.svg", logx=True)
    if any(l == "c=1" for l in levels):
        parts = ["CPU apiserver", "CPU etcd", "CPU webhook"]
        keys = {"CPU apiserver": "cpu_apiserver", "CPU etcd": "cpu_etcd", "CPU webhook": "cpu_webhook"}
        vals = {}
        for s in setups:
            a = agg.get((s, "c=1"))
            if a:
                for p in parts:
                    vals[(s, p)] = a[keys[p]]
        svg_bars("CPU per TaskRun CREATE (1 creator)", "ms of CPU", setups, parts, vals, out / "apiserver-cpu.svg")
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
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, args = sys.argv[1], sys.argv[2:]
    fns = {
        "webhooks": cmd_webhooks,
        "map": cmd_map,
        "kyverno": cmd_kyverno,
        "expect": cmd_expect,
        "steps": lambda *names: cmd_steps(list(names)),
        "policies": cmd_policies,
        "replace-patch": cmd_replace_patch,
        "minimal-patch": cmd_minimal_patch,
        "bytes": cmd_bytes,
        "grow": cmd_grow,
        "report": cmd_report,
        "quick": cmd_quick,
    }
    if cmd not in fns:
        print(__doc__)
        sys.exit(2)
    fns[cmd](*args)


if __name__ == "__main__":
    main()
