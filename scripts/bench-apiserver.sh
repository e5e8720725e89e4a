#!/usr/bin/env bash
# What a TaskRun CREATE costs through a real kube-apiserver (docs/apiserver-benchmark.md): the
# same load against several admission set-ups on ONE cluster (etcd + kube-apiserver from the
# e2e suite's tools), interleaved and rotated each round:
#
#   none         no admission at all
#   null         examples/null_webhook registered exactly as bookend is (deploy/base/webhooks.yaml:
#                same names, rules, failure policies, timeouts, reinvocation, namespaceSelector)
#   nullpatch    the same null webhook answering /mutate with bookend's exact patch: the cost of
#                what bookend injects, without bookend's own work
#   nullreplace, nullminimal  (optional) the same null webhook answering the same change
#                written as few operations (the record annotation, one replace of
#                spec.taskSpec.steps, one add of volumes) or as one operation per changed place
#                (an add at its index per inserted step, one per field set on a user step):
#                the two patch shapes compared at equal result
#   bookend      bookend serve, examples/policies
#   bookend-novalidate  (optional) the same, registered without taskruns.validate.bookend.dev
#                (the chart's webhook.taskRunBackstop.enabled=false): one webhook call per
#                CREATE
#   bookend-10k  bookend serve, examples/policies + 9,996 policies that do not match
#   map          a MutatingAdmissionPolicy making bookend's change (CEL JSONPatch: an add at its
#                index per step, one per field set on a user step), matched as bookend's
#                mutating webhook is: the in-tree peer at equal work
#   posts        no admission; the client posts bookend's output itself (the bigger object alone)
#   before       (BEFORE_BIN=path) a second bookend binary, e.g. a build of an earlier commit
#   kyverno      (KYVERNO=1) Kyverno, built from Go modules, with a ClusterPolicy adding the
#                pre-step and post-steps the way platform teams write it (no Always)
#
# The TaskRun is examples/taskruns/build.yaml in team-a. Load: closed loop at CREATORS creators
# and open loop at RATES CREATEs/s; every creator shares ONE HTTP/2 connection, as client-go
# does (tests/apiserver-bench, Go standard library). After each switch, dry-run CREATEs until
# the answer is right three times in a row (object, apiserver webhook calls, the serving
# process's own counter). After each cell, every TaskRun it created is listed and checked, its
# stored size read from etcd, and all are deleted.
#
# Pod CREATEs (POD_SETUPS, measured as set-ups pod-<name>, rotated with the others): the Pod
# Tekton's controller would create for build.yaml's TaskRun as bookend admitted it (one such
# TaskRun is created once; the Pod is built by examples/tekton_pod.rs, the tests' model of
# Tekton's pod builder: labels tekton.dev/taskRun and tekton.dev/taskRunUID, an ownerReference
# to it), created as the controller's ServiceAccount (impersonation through the admin token).
#   pod-none     no admission webhook
#   pod-bookend  bookend serve --source kubernetes (the policies as ClusterStepPolicies: only
#                that source reads TaskRuns) registered exactly as deployed: the Pod check GETs
#                the owning TaskRun and checks every org container. Before its cells, a
#                tampered Pod must be refused; every Pod of a cell must be admitted without a
#                warning (bookend warns when it could not check a Pod).
#
#   scripts/bench-apiserver.sh                     # the full run (about 90 min on 2 cores)
#   DURATION=5 scripts/bench-apiserver.sh --quick  # none, null, bookend at 1 and 8 creators
#   scripts/bench-apiserver.sh --patch-cost        # no cluster: what applying bookend's patch
#       costs the apiserver's own code (tests/apiserver-bench/patchcost), for build.yaml and a
#       20-step TaskRun, as bookend sends it, as one operation per place, as one replace
#
# --quick prints as its last line:
#   null_p50_ms=<a> bookend_p50_ms=<b> added_p50_ms=<b-a> rps_ratio_c8=<bookend/null> object_bytes=<n> errors=<n>
#
# Environment (defaults in brackets; --quick changes the bracketed ones marked q):
#   DURATION  measured seconds per cell [20]       WARMUP  unrecorded seconds before [3]
#   ROUNDS    rounds [3; q 1]                      CREATORS closed-loop creators [1 8 32; q 1 8]
#   RATES     open-loop CREATEs per second [100 300; q none]
#   SETUPS    [none null nullpatch bookend bookend-10k map posts; q none null bookend]
#   POD_SETUPS  Pod CREATE set-ups, without the pod- prefix [none bookend; q none]
#   BEFORE_BIN  another bookend binary, measured as set-up `before` (added to SETUPS)
#   KYVERNO=1   add the `kyverno` set-up (first run builds Kyverno: ~18 min and ~2 GB of modules)
#   STEPS     grow the TaskRun to this many user steps (its own two, repeated) []
#   OUT       output directory [target/bench-apiserver]
#   BUILD=1   rebuild bookend and the null webhook even if built
#
# Writes $OUT/results.jsonl (one line per cell), $OUT/report/results.md, summary.csv, *.svg,
# $OUT/env.txt (machine, commit, load average), logs under $OUT/logs.
# Needs: Linux, Go >= 1.26, cargo, python3, curl, openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

QUICK=0
PATCH_COST=0
for a in "$@"; do
    case $a in
    --quick) QUICK=1 ;;
    --patch-cost) PATCH_COST=1 ;;
    -h | --help) sed -n '2,71p' "$0"; exit 0 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
    esac
done
if [[ $QUICK == 1 ]]; then
    ROUNDS=${ROUNDS:-1}; CREATORS=${CREATORS-"1 8"}; RATES=${RATES-""}
    SETUPS=${SETUPS:-"none null bookend"}
    POD_SETUPS=${POD_SETUPS-""}
fi
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
CREATORS=${CREATORS-"1 8 32"}
RATES=${RATES-"100 300"}
SETUPS=${SETUPS:-"none null nullpatch bookend bookend-10k map posts"}
POD_SETUPS=${POD_SETUPS-"none bookend"}
for p in $POD_SETUPS; do
    case $p in
    none | bookend) SETUPS="$SETUPS pod-$p" ;;
    *) echo "POD_SETUPS: unknown set-up $p (none, bookend)" >&2; exit 2 ;;
    esac
done
[[ -n ${BEFORE_BIN:-} ]] && SETUPS="$SETUPS before"
[[ ${KYVERNO:-0} == 1 ]] && SETUPS="$SETUPS kyverno"
OUT=${OUT:-target/bench-apiserver}
NAMESPACE=team-a
target=${CARGO_TARGET_DIR:-target}

log() { echo "bench-apiserver: $*" >&2; }

# --- build -----------------------------------------------------------------------------------
if [[ ! -x $target/release/bookend || ! -x $target/release/examples/null_webhook ||
    ! -x $target/release/examples/tekton_pod || ${BUILD:-0} == 1 ]]; then
    log "building bookend, the null webhook and the Pod builder (release)"
    cargo build --release --bin bookend --example null_webhook --example tekton_pod >&2
fi
mkdir -p "$OUT/bin"
if [[ $PATCH_COST == 1 ]]; then
    (cd tests/apiserver-bench/patchcost && CGO_ENABLED=0 go build -o "$root/$OUT/bin/patchcost" .)
    P=$OUT/patch-cost
    rm -rf "$P"
    mkdir -p "$P/no-policies"
    B=$target/release/bookend
    "$B" render --policies "$P/no-policies" -f examples/taskruns/build.yaml -o json >"$P/plain-2.json"
    python3 scripts/apiserver-fixtures.py grow "$P/plain-2.json" 20 >"$P/plain-20.json"
    # The loopback benchmark's TaskRun: a PipelineRun's, three steps with longer scripts.
    python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["request"]["object"]; o.pop("status",None); print(json.dumps(o))' \
        tests/fixtures/admission-review-taskrun-pipeline.json >"$P/plain-fixture.json"
    for n in 2 20 fixture; do
        "$B" render --policies examples/policies --namespace team-a -f "$P/plain-$n.json" -o json >"$P/out-$n.json" 2>/dev/null
        "$B" render --policies examples/policies --namespace team-a -f "$P/plain-$n.json" -o patch >"$P/bookend-$n.json" 2>/dev/null
        python3 scripts/apiserver-fixtures.py minimal-patch "$P/plain-$n.json" "$P/out-$n.json" >"$P/minimal-$n.json"
        python3 scripts/apiserver-fixtures.py replace-patch "$P/plain-$n.json" "$P/out-$n.json" >"$P/replace-$n.json"
        echo "== build.yaml's TaskRun: $n user steps (fixture: the PipelineRun TaskRun of tests/fixtures) (load average $(cut -d' ' -f1-3 /proc/loadavg))"
        "$OUT/bin/patchcost" "$P/plain-$n.json" "bookend=$P/bookend-$n.json" \
            "minimal=$P/minimal-$n.json" "replace=$P/replace-$n.json"
    done
    exit 0
fi
ONLY="kube-apiserver kubectl etcd crds" tests/e2e/build-tools.sh >"$OUT/build-tools.log" 2>&1 || {
    cat "$OUT/build-tools.log" >&2; exit 1; }
# The load client: Go standard library only; the Go build cache makes a rebuild instant.
(cd tests/apiserver-bench && CGO_ENABLED=0 go build -o "$root/$OUT/bin/apiserver-bench" .)
E2E_BIN=tests/e2e/bin/current
KUBECTL=$E2E_BIN/kubectl
BENCH=$OUT/bin/apiserver-bench
FIXTURES="python3 scripts/apiserver-fixtures.py"
REPORT="python3 scripts/apiserver-report.py"
# Private copies: a concurrent build relinking target/release mid-run cannot mix versions.
cp -p "$target/release/bookend" "$OUT/bin/bookend"
cp -p "$target/release/examples/null_webhook" "$OUT/bin/null_webhook"
cp -p "$target/release/examples/tekton_pod" "$OUT/bin/tekton_pod"
[[ -n ${BEFORE_BIN:-} ]] && cp -p "$BEFORE_BIN" "$OUT/bin/bookend-before"
BOOKEND=$OUT/bin/bookend

rm -rf "$OUT/logs" "$OUT/files" "$OUT/report" "$OUT/results.jsonl"
mkdir -p "$OUT/logs" "$OUT/files"
F=$OUT/files

# --- cluster and servers ---------------------------------------------------------------------
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    tests/e2e/stop-cluster.sh "$root/$OUT/cluster" >/dev/null 2>&1 || true
    return $rc
}
trap cleanup EXIT

log "starting etcd + kube-apiserver"
tests/e2e/start-cluster.sh "$root/$OUT/cluster" >"$OUT/cluster.env" 2>"$OUT/logs/start-cluster.log"
# shellcheck disable=SC1090
source "$OUT/cluster.env"
export KUBECONFIG
ETCD_URL=$(tr '\0' '\n' <"/proc/$ETCD_PID/cmdline" | grep -A1 -x -- '--listen-client-urls' | tail -n1)
K() { "$KUBECTL" "$@"; }
K create namespace "$NAMESPACE" >/dev/null

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_ready() { # wait_ready <url> <what>
    for _ in $(seq 300); do
        curl -fsS "$1" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    log "$2 did not become ready ($1)"; return 1
}

"$BOOKEND" certs --force --out-dir "$OUT/certs" --host 127.0.0.1 >/dev/null
CA_B64=$(cat "$OUT/certs/ca.crt.b64")
TLS=(--tls-cert "$OUT/certs/tls.crt" --tls-key "$OUT/certs/tls.key")

# Inputs: the TaskRun, bookend's output and patch for it, the expectations.
mkdir -p "$F/no-policies"
"$BOOKEND" render --policies "$F/no-policies" -f examples/taskruns/build.yaml -o json >"$F/plain.json"
if [[ -n ${STEPS:-} ]]; then
    $FIXTURES grow "$F/plain.json" "$STEPS" >"$F/grown.json"
    mv "$F/grown.json" "$F/plain.json"
fi
"$BOOKEND" render --policies examples/policies -f "$F/plain.json" -o json >"$F/bookend-out.json"
"$BOOKEND" render --policies examples/policies -f "$F/plain.json" -o patch >"$F/bookend.patch.json"
$FIXTURES expect "$F/plain.json" >"$F/expect-plain.json"
$FIXTURES expect "$F/bookend-out.json" >"$F/expect-bookend.json"
if [[ -n ${BEFORE_BIN:-} ]]; then
    "$OUT/bin/bookend-before" render --policies examples/policies -f "$F/plain.json" -o json >"$F/before-out.json"
    $FIXTURES expect "$F/before-out.json" >"$F/expect-before.json"
fi
K create --dry-run=client -o json -f deploy/base/webhooks.yaml >"$F/webhooks-deploy.json"

declare -A URL ADMIN PID COUNTER
start_server() { # start_server <setup> <command...>
    local setup=$1 port admin; shift
    port=$(free_port); admin=$(free_port)
    "$@" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
        </dev/null >"$OUT/logs/$setup.log" 2>&1 &
    PID[$setup]=$!
    pids+=("$!")
    URL[$setup]="https://127.0.0.1:$port"
    ADMIN[$setup]="http://127.0.0.1:$admin"
    wait_ready "${ADMIN[$setup]}/readyz" "$setup"
    $FIXTURES webhooks "$F/webhooks-deploy.json" "${URL[$setup]}" "$CA_B64" >"$F/webhooks-$setup.json"
}
# The Pod set-ups' user: Tekton's controller (bookend's default --tekton-controller), allowed to
# create Pods; the admin token impersonates it.
CONTROLLER=system:serviceaccount:tekton-pipelines:tekton-pipelines-controller
want() { [[ " $SETUPS " == *" $1 "* ]]; }
if want bookend; then
    start_server bookend "$BOOKEND" serve --source files --policies examples/policies "${TLS[@]}"
    COUNTER[bookend]=bookend_admission_requests_total
fi
if want bookend-novalidate; then
    start_server bookend-novalidate "$BOOKEND" serve --source files --policies examples/policies "${TLS[@]}"
    COUNTER[bookend-novalidate]=bookend_admission_requests_total
    $FIXTURES webhooks "$F/webhooks-deploy.json" "${URL[bookend-novalidate]}" "$CA_B64" \
        -taskruns.validate.bookend.dev >"$F/webhooks-bookend-novalidate.json"
fi
if want bookend-10k; then
    $FIXTURES policies 10000 "$F/policies-10k"
    cp examples/policies/*.yaml "$F/policies-10k/"
    start_server bookend-10k "$BOOKEND" serve --source files --policies "$F/policies-10k" "${TLS[@]}"
    COUNTER[bookend-10k]=bookend_admission_requests_total
fi
if want before; then
    start_server before "$OUT/bin/bookend-before" serve --source files --policies examples/policies "${TLS[@]}"
    COUNTER[before]=bookend_admission_requests_total
fi
if want null; then
    start_server null "$OUT/bin/null_webhook" "${TLS[@]}"
    COUNTER[null]=null_webhook_requests_total
fi
if want nullpatch; then
    start_server nullpatch "$OUT/bin/null_webhook" --patch-file "$F/bookend.patch.json" "${TLS[@]}"
    COUNTER[nullpatch]=null_webhook_requests_total
fi
if want nullreplace; then
    $FIXTURES replace-patch "$F/plain.json" "$F/bookend-out.json" >"$F/bookend.replace.json"
    start_server nullreplace "$OUT/bin/null_webhook" --patch-file "$F/bookend.replace.json" "${TLS[@]}"
    COUNTER[nullreplace]=null_webhook_requests_total
fi
if want nullminimal; then
    $FIXTURES minimal-patch "$F/plain.json" "$F/bookend-out.json" >"$F/bookend.minimal.json"
    start_server nullminimal "$OUT/bin/null_webhook" --patch-file "$F/bookend.minimal.json" "${TLS[@]}"
    COUNTER[nullminimal]=null_webhook_requests_total
fi
if want map; then
    # Written the way a policy author would: an add at its index per step, the fields set on
    # the user's steps one by one (bookend's minimal diff), whatever shape bookend sends.
    $FIXTURES minimal-patch "$F/plain.json" "$F/bookend-out.json" >"$F/map.patch.json"
    $FIXTURES map "$F/map.patch.json" "$F/webhooks-deploy.json" >"$F/map.json"
fi
if want kyverno; then
    # shellcheck source=scripts/bench-apiserver-kyverno.sh
    source scripts/bench-apiserver-kyverno.sh
    kyverno_start # sets PID[kyverno], writes $F/kyverno-policy.json and $F/expect-kyverno.json
fi
if want pod-bookend; then
    # The Pod check reads the owning TaskRun from the API server: bookend with the cluster as
    # its source, the example policies as objects (created before the TaskRun they apply to).
    K apply -f deploy/base/crds.yaml >/dev/null
    K wait --for condition=established --timeout=60s -f deploy/base/crds.yaml >/dev/null
    K apply -f examples/policies >/dev/null
    start_server pod-bookend "$BOOKEND" serve --source kubernetes "${TLS[@]}"
    COUNTER[pod-bookend]=bookend_admission_requests_total
fi

{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "kube-apiserver: $("$E2E_BIN/kube-apiserver" --version 2>/dev/null)"
    echo "settings: DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS CREATORS='$CREATORS' RATES='$RATES' SETUPS='$SETUPS' STEPS='${STEPS:-}'"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"
log "$(tr '\n' ';' <"$OUT/env.txt")"

CONN=(--server "$E2E_API_URL" --ca "$E2E_API_CA" --token "$E2E_TOKEN" --namespace "$NAMESPACE")
AS_CONTROLLER=(--as "$CONTROLLER" --no-warnings)

if [[ -n $POD_SETUPS ]]; then
    # Tekton's controller may create Pods.
    K apply -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
  "metadata": {"name": "bench-tekton-controller"},
  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]},
 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
  "metadata": {"name": "bench-tekton-controller"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
              "name": "bench-tekton-controller"},
  "subjects": [{"kind": "ServiceAccount", "namespace": "tekton-pipelines",
                "name": "${CONTROLLER##*:}"}]}]}
EOF
    # The TaskRun the Pods belong to, admitted by bookend as deployed (all of deploy/'s
    # webhooks), then the Pod Tekton would make of it.
    owner=bookend
    if want pod-bookend; then owner=pod-bookend; fi
    [[ -n ${URL[$owner]:-} ]] || { log "POD_SETUPS needs bookend in SETUPS or POD_SETUPS"; exit 2; }
    K apply -f "$F/webhooks-$owner.json" >/dev/null
    "$BENCH" probe "${CONN[@]}" --body "$F/plain.json" --expect "$F/expect-bookend.json" \
        --webhook-calls 2 >>"$OUT/logs/probe.log"
    K create -n "$NAMESPACE" -f "$F/plain.json" -o json >"$F/owner.json"
    python3 -c 'import json,sys; o,e=(json.load(open(p)) for p in sys.argv[1:]); sys.exit(o["spec"]!=e["spec"] and "the owning TaskRun is not as bookend admits it")' \
        "$F/owner.json" "$F/expect-bookend.json"
    K delete mutatingwebhookconfiguration,validatingwebhookconfiguration bookend.dev >/dev/null
    "$OUT/bin/tekton_pod" "$F/owner.json" >"$F/pod.json"
    $FIXTURES pod-expect "$F/pod.json" >"$F/expect-pod.json"
    $FIXTURES tamper "$F/pod.json" >"$F/pod-tampered.json"
    log "the Pod of TaskRun $NAMESPACE/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["name"])' "$F/owner.json"): $(wc -c <"$F/pod.json") bytes"
fi

# --- switching set-ups -----------------------------------------------------------------------
deactivate_all() {
    K delete mutatingwebhookconfiguration bookend.dev --ignore-not-found >/dev/null
    K delete validatingwebhookconfiguration bookend.dev --ignore-not-found >/dev/null
    if want map; then K delete -f "$F/map.json" --ignore-not-found >/dev/null; fi
    if want kyverno; then kyverno_policy off; fi
}

body_of() {
    case $1 in
    posts) echo "$F/bookend-out.json" ;;
    pod-*) echo "$F/pod.json" ;;
    *) echo "$F/plain.json" ;;
    esac
}
expect_of() {
    case $1 in
    pod-*) echo "$F/expect-pod.json" ;;
    none | null) echo "$F/expect-plain.json" ;;
    before) echo "$F/expect-before.json" ;;
    kyverno) echo "$F/expect-kyverno.json" ;;
    *) echo "$F/expect-bookend.json" ;;
    esac
}

activate() { # activate <setup>: switch, then probe until the answers are right
    local s=$1
    deactivate_all
    case $s in
    none | posts | pod-none) ;;
    map) K apply -f "$F/map.json" >/dev/null ;;
    kyverno) kyverno_policy on ;;
    *) K apply -f "$F/webhooks-$s.json" >/dev/null ;;
    esac
    local probe=("$BENCH" probe "${CONN[@]}")
    case $s in
    none) "${probe[@]}" --body "$F/plain.json" --expect "$F/expect-plain.json" --webhook-calls 0 ;;
    posts)
        # nothing may still inject into the plain TaskRun, then the posted output stays as it is
        "${probe[@]}" --body "$F/plain.json" --expect "$F/expect-plain.json" --webhook-calls 0
        "${probe[@]}" --body "$F/bookend-out.json" --expect "$F/expect-bookend.json" --webhook-calls 0 ;;
    map) "${probe[@]}" --body "$F/plain.json" --expect "$F/expect-bookend.json" --webhook-calls 0 ;;
    kyverno) "${probe[@]}" --body "$F/plain.json" --expect "$F/expect-kyverno.json" --webhook-calls -1 ;;
    pod-none) "${probe[@]}" "${AS_CONTROLLER[@]}" --body "$F/pod.json" --expect "$F/expect-pod.json" --webhook-calls 0 ;;
    pod-bookend)
        # The check is on: a tampered Pod is refused; then Tekton's Pod is admitted, checked
        # (no warning) by one call of the Pod webhook.
        "${probe[@]}" "${AS_CONTROLLER[@]}" --body "$F/pod-tampered.json" --denied-by pods.validate.bookend.dev
        "${probe[@]}" "${AS_CONTROLLER[@]}" --body "$F/pod.json" --expect "$F/expect-pod.json" --webhook-calls 1 \
            --counter-url "${ADMIN[$s]}/metrics" --counter "${COUNTER[$s]}" --counter-delta 1 ;;
    bookend-novalidate) "${probe[@]}" --body "$F/plain.json" --expect "$F/expect-bookend.json" --webhook-calls 1 \
        --counter-url "${ADMIN[$s]}/metrics" --counter "${COUNTER[$s]}" --counter-delta 1 ;;
    *) "${probe[@]}" --body "$F/plain.json" --expect "$(expect_of "$s")" --webhook-calls 2 \
        --counter-url "${ADMIN[$s]}/metrics" --counter "${COUNTER[$s]}" --counter-delta 2 ;;
    esac >>"$OUT/logs/probe.log"
}

cell() { # cell <setup> <round> <closed|open> <n>
    local s=$1 r=$2 mode=$3 n=$4 load id
    if [[ $mode == closed ]]; then load=(--concurrency "$n"); id="$s-r$r-c$n"; else load=(--rate "$n"); id="$s-r$r-o$n"; fi
    local extra=()
    if [[ $s == pod-* ]]; then extra+=("${AS_CONTROLLER[@]}"); fi
    if [[ -n ${PID[$s]:-} ]]; then extra+=(--pid "webhook=${PID[$s]}"); fi
    if [[ -n ${COUNTER[$s]:-} && ${COUNTER[$s]} == bookend_* ]]; then extra+=(--webhook-metrics "${ADMIN[$s]}/metrics"); fi
    "$BENCH" run "${CONN[@]}" --setup "$s" --round "$r" --cell "$id" "${load[@]}" \
        --body "$(body_of "$s")" --expect "$(expect_of "$s")" \
        --warmup "${WARMUP}s" --duration "${DURATION}s" --etcd "$ETCD_URL" \
        --pid "apiserver=$APISERVER_PID" --pid "etcd=$ETCD_PID" "${extra[@]}" \
        --clk-tck "$(getconf CLK_TCK)" --out "$OUT/results.jsonl" >&2
}

read -r -a setups <<<"$SETUPS"
n=${#setups[@]}
t0=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
        s=${setups[$(((i + r - 1) % n))]}
        activate "$s"
        for c in $CREATORS; do cell "$s" "$r" closed "$c"; done
        for q in $RATES; do cell "$s" "$r" open "$q"; done
    done
    log "round $r of $ROUNDS done after $((SECONDS - t0)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
deactivate_all
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"
echo "took: $((SECONDS - t0)) s of cells" >>"$OUT/env.txt"

$REPORT report "$OUT/results.jsonl" "$OUT/report" >&2
trap - EXIT
cleanup 2>/dev/null
if [[ $QUICK == 1 ]]; then
    $REPORT quick "$OUT/results.jsonl"
fi
