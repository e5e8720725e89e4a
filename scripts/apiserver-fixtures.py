#!/usr/bin/env python3
"""Fixtures of scripts/bench-apiserver.sh (docs/apiserver-benchmark.md): the objects each set-up
is made of, and sizes. Standard library only; each command prints JSON to stdout or writes the
file named. The report of a run is scripts/apiserver-report.py.

  webhooks LIST.json URL CA_B64 [-NAME]  deploy/'s webhook configurations (a kubectl List in
                                          JSON) pointed at URL: clientConfig {url: URL+path,
                                          caBundle}, everything else as bookend registers it;
                                          -NAME leaves the webhook NAME out (as the chart's
                                          webhook.taskRunBackstop.enabled=false does for
                                          taskruns.validate.bookend.dev)
  map PATCH.json WEBHOOKS.json           a MutatingAdmissionPolicy + binding applying PATCH
                                          (bookend's own patch, as CEL) with the match of
                                          bookend's mutating TaskRun webhook
  kyverno OUT.json CREDS.json SBOM.json  a Kyverno ClusterPolicy: pre-step and post-steps
                                          by patchesJson6902, as platform teams write it
  expect OBJECT.json                      an expectation (spec, annotations) from a TaskRun
  steps NAME...                           an expectation of step names only
  pod-expect POD.json                     an expectation of a TaskRun's Pod: its containers'
                                          names in order and its tekton.dev labels
  tamper POD.json                         the Pod with its first org container's image
                                          changed (the Pod check must refuse it)
  policies N DIR                          N-4 non-matching filler policies (as benches/ make
                                          them) into DIR/fillers.json
  replace-patch OBJECT.json ADMITTED.json the same change as one replace of the steps
  minimal-patch OBJECT.json ADMITTED.json the same change as one operation per changed place
  grow TASKRUN.json N                     the TaskRun with N user steps (its own, repeated)
  bytes BOOKEND [STEPS]                   what bookend injects into examples/taskruns/build.yaml
                                          (grown to STEPS user steps) with examples/policies:
                                          object, patch and helper bytes (deterministic)
"""

import json
import sys
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


def cmd_webhooks(list_path, url, ca_b64, *drop):
    dropped = {d.removeprefix("-") for d in drop}
    items = load_items(list_path)
    for item in items:
        if "webhooks" in item:
            names = {h["name"] for h in item["webhooks"]}
            item["webhooks"] = [h for h in item["webhooks"] if h["name"] not in dropped]
            dropped -= names
    if dropped:
        raise SystemExit(f"webhooks: no webhook named {sorted(dropped)} in {list_path}")
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


def cmd_pod_expect(pod_path):
    pod = load(pod_path)
    labels = pod["metadata"]["labels"]
    dump({
        "containers": [c["name"] for c in pod["spec"]["containers"]],
        "labels": {k: labels[k] for k in ("tekton.dev/taskRun", "tekton.dev/taskRunUID")},
    })


def cmd_tamper(pod_path):
    pod = load(pod_path)
    for c in pod["spec"]["containers"]:
        if c["name"].startswith("step-bookend-"):
            c["image"] = "docker.io/library/busybox:tampered"
            dump(pod)
            return
    raise SystemExit(f"tamper: no org container (step-bookend-*) in {pod_path}")


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

def main():
    commands = {
        "webhooks": cmd_webhooks,
        "map": cmd_map,
        "kyverno": cmd_kyverno,
        "expect": cmd_expect,
        "steps": lambda *names: cmd_steps(list(names)),
        "pod-expect": cmd_pod_expect,
        "tamper": cmd_tamper,
        "policies": cmd_policies,
        "replace-patch": cmd_replace_patch,
        "minimal-patch": cmd_minimal_patch,
        "bytes": cmd_bytes,
        "grow": cmd_grow,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__)
        sys.exit(2)
    commands[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
