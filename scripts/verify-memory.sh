#!/usr/bin/env bash
# Memory of post-run verification (docs/operations.md, "Memory"): bookend serve --source
# kubernetes against a real kube-apiserver (tests/e2e/start-cluster.sh) with N TaskRuns it
# injected into (label bookend.dev/verify=true), first all running (watched), then all finished
# (each verified: mark, Events, PolicyReport results are off here, metrics). Prints bookend's
# RSS (VmRSS) and peak (VmHWM) from /proc at each stage. Then the count of the policies'
# verdicts (status.verification, every COUNT_INTERVAL, default 30s): when org-sbom's status
# shows all N, bookend's RSS, its own timing of the count (debug log), and the metadata-only
# list it makes, read once more by this script: pages, bytes, seconds (and the full list, to
# compare).
#
# Usage: scripts/verify-memory.sh [N]          (default 10000)
# Needs: the e2e tools (tests/e2e/build-tools.sh), python3, and target/release/bookend
#        (cargo build --release).
set -euo pipefail

N=${1:-10000}
# How often bookend counts the policies' verdicts (status.verification) here.
COUNT_INTERVAL=${COUNT_INTERVAL:-30s}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BOOKEND=$(realpath "${BOOKEND:-$ROOT/target/release/bookend}")
[[ -x $BOOKEND ]] || { echo "verify-memory: $BOOKEND missing: cargo build --release" >&2; exit 2; }
eval "$("$ROOT/tests/e2e/build-tools.sh" | grep '^E2E_BIN_DIR=')"
export E2E_BIN_DIR
KUBECTL=$E2E_BIN_DIR/kubectl

WORK=$(mktemp -d -t bookend-verify-memory-XXXXXX)
BOOKEND_PID=
cleanup() {
  [[ -n $BOOKEND_PID ]] && kill "$BOOKEND_PID" 2>/dev/null && wait "$BOOKEND_PID" 2>/dev/null
  "$ROOT/tests/e2e/stop-cluster.sh" "$WORK/cluster" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$ROOT/tests/e2e/start-cluster.sh" "$WORK/cluster" >/dev/null
export KUBECONFIG=$WORK/cluster/kubeconfig
k() { "$KUBECTL" "$@"; }

"$BOOKEND" crds | k apply -f - >/dev/null
k wait --for=condition=Established --timeout=60s crd/clustersteppolicies.bookend.dev crd/steppolicies.bookend.dev >/dev/null
k create namespace team-a >/dev/null
k apply -f "$ROOT/examples/policies" >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ADMIN=$(free_port)
(cd "$WORK" && exec "$BOOKEND" serve --source kubernetes --policy-reports=false \
  --verification-count-interval "$COUNT_INTERVAL" \
  --listen "127.0.0.1:$(free_port)" --admin-listen "127.0.0.1:$ADMIN" \
  --log-level warn,bookend::verification::counts=debug) \
  >"$WORK/bookend.log" 2>&1 &
BOOKEND_PID=$!
metric() { curl -fsS "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
until curl -fsS "http://127.0.0.1:$ADMIN/readyz" >/dev/null 2>&1; do sleep 0.5; done
rss() { awk '/^VmRSS|^VmHWM/ {printf "%s %d MiB  ", $1, $2/1024}' "/proc/$BOOKEND_PID/status"; echo; }
echo "ready, no TaskRuns:            $(rss)"

# N TaskRuns as admission leaves them (bookend render of the example, the label included).
"$BOOKEND" render --policies "$ROOT/examples/policies" -f "$ROOT/examples/taskruns/build.yaml" -o json \
  >"$WORK/admitted.json"
python3 - "$WORK" "$N" <<'EOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
admitted = json.load(open(f"{work}/admitted.json"))
assert admitted["metadata"]["labels"]["bookend.dev/verify"] == "true", admitted["metadata"]
items, statuses = [], []
steps = [s["name"] for s in admitted["spec"]["taskSpec"]["steps"]]
for i in range(n):
    tr = json.loads(json.dumps(admitted))
    tr["metadata"].pop("generateName", None)
    tr["metadata"]["name"] = f"build-{i:05d}"
    items.append(tr)
    done = json.loads(json.dumps(tr))
    done["status"] = {
        "podName": f"build-{i:05d}-pod",
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                        "lastTransitionTime": "2026-02-01T10:01:00Z"}],
        "steps": [{"name": s, "container": f"step-{s}", "terminationReason": "Completed",
                   "terminated": {"exitCode": 0, "reason": "Completed",
                                  "startedAt": "2026-02-01T10:00:00Z",
                                  "finishedAt": "2026-02-01T10:00:02Z"}} for s in steps],
    }
    statuses.append(done)
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(f"{work}/taskruns.json", "w"))
json.dump({"apiVersion": "v1", "kind": "List", "items": statuses}, open(f"{work}/finished.json", "w"))
EOF

start=$SECONDS
k create -f "$WORK/taskruns.json" >/dev/null
until [[ $(metric bookend_taskruns_watched) == "$N" ]]; do sleep 1; done
echo "$N TaskRuns watched ($((SECONDS - start)) s): $(rss)"

start=$SECONDS
k replace --subresource=status -f "$WORK/finished.json" >/dev/null
want=$((N * 2)) # org-credentials and org-sbom apply in team-a
until [[ $(metric 'bookend_run_verdicts_total{policy="ClusterStepPolicy/org-sbom",verdict="pass",cause="none"}') == "$N" ]]; do sleep 1; done
echo "$N TaskRuns verified ($((SECONDS - start)) s): $(rss)"
echo "watched now: $(metric bookend_taskruns_watched); verdicts expected: $want"

# The count: org-sbom's status.verification shows all N once a count after the last mark ran.
start=$SECONDS
until [[ $(k get clustersteppolicy org-sbom -o jsonpath='{.status.verification.passed}') == "$N" ]]; do sleep 1; done
echo "status.verification.passed = $N ($((SECONDS - start)) s after the last verdict): $(rss)"
grep "counted the policies' verdicts" "$WORK/bookend.log" | tail -n 2 | sed 's/^/bookend: /'

# The list bookend makes, once more from here: metadata-only, 500 a page; then whole objects.
# shellcheck disable=SC1091
source "$WORK/cluster/env"
python3 - "$E2E_API_URL" "$E2E_API_CA" "$E2E_TOKEN" <<'EOF'
import json, ssl, sys, time, urllib.parse, urllib.request
url, ca, token = sys.argv[1:4]
ctx = ssl.create_default_context(cafile=ca)
def list_all(accept):
    pages, size, cont, t = 0, 0, "", time.monotonic()
    while True:
        q = {"labelSelector": "bookend.dev/verify=true", "limit": "500"}
        if cont:
            q["continue"] = cont
        req = urllib.request.Request(f"{url}/apis/tekton.dev/v1/taskruns?{urllib.parse.urlencode(q)}",
                                     headers={"Authorization": f"Bearer {token}", "Accept": accept})
        body = urllib.request.urlopen(req, context=ctx).read()
        pages, size = pages + 1, size + len(body)
        cont = json.loads(body)["metadata"].get("continue", "")
        if not cont:
            return pages, size, time.monotonic() - t
for what, accept in [("metadata-only", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                     ("whole objects", "application/json")]:
    pages, size, secs = list_all(accept)
    print(f"list {what}: {pages} pages, {size / 2**20:.1f} MiB, {secs:.2f} s")
EOF
