# Kyverno as a measured peer of bookend in scripts/bench-apiserver.sh (KYVERNO=1); sourced by it,
# not run on its own. Optional and not part of CI: the first run builds Kyverno from Go modules
# (the Go module proxy; ~18 minutes cold and ~2 GB of module cache on 2 cores), cached afterwards in
# $KYVERNO_DIR. Nothing of Kyverno is kept in the repository.
#
# Kyverno runs as a host process against the benchmark's apiserver, as its DEVELOPMENT.md
# ("Debugging local code") describes: it makes its own CA and serving certificate and registers
# its webhook configurations pointing at 127.0.0.1:$KYVERNO_PORT. It runs through every cell of
# the run (its informers and leases cost every set-up alike); its ClusterPolicy exists only in
# the `kyverno` cells.
#
# The policy is the one platform teams write today for "a credentials step first, SBOM steps
# last": a kyverno.io/v1 ClusterPolicy with patchesJson6902 adding the example policies' steps
# (examples/policies/10-credentials.yaml, 20-sbom.yaml) at index 0 and at the end, with a
# hand-written "not injected yet" precondition. Kyverno cannot express postStepsRun: Always
# (gates, verdict), so its TaskRuns are smaller than bookend's: compare it with `bookend` for
# what a platform team pays, not for equal work (that is `map`).
#
# Env: KYVERNO_VERSION [v1.19.1], KYVERNO_DIR [target/kyverno/<version>], KYVERNO_PORT [free].

KYVERNO_VERSION=${KYVERNO_VERSION:-v1.19.1}
KYVERNO_DIR=${KYVERNO_DIR:-$root/target/kyverno/$KYVERNO_VERSION}

kyverno_build() {
    if [[ -x $KYVERNO_DIR/kyverno ]]; then
        return 0
    fi
    log "building Kyverno $KYVERNO_VERSION from Go modules into $KYVERNO_DIR (once; minutes)"
    local src=$KYVERNO_DIR/src gomod
    mkdir -p "$src"
    gomod=$(go mod download -json "github.com/kyverno/kyverno@$KYVERNO_VERSION" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
    [[ -f $gomod ]] || { log "no go.mod for github.com/kyverno/kyverno@$KYVERNO_VERSION"; return 1; }
    # A scratch module with Kyverno's own requirements and replaces (`go install` refuses a
    # module with replace directives).
    {
        echo "module bookend.invalid/kyverno-build"
        grep -m1 '^go ' "$gomod"
        echo "require github.com/kyverno/kyverno $KYVERNO_VERSION"
        awk '/^replace \(/{b=1; next} b && /^\)/{b=0; next} b {print "replace " $0; next} /^replace /{print}' "$gomod"
    } >"$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/kyverno/kyverno/cmd/kyverno"\n' >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -p 1 -o "$KYVERNO_DIR/kyverno.tmp" \
        github.com/kyverno/kyverno/cmd/kyverno) >&2
    mv "$KYVERNO_DIR/kyverno.tmp" "$KYVERNO_DIR/kyverno"
}

kyverno_start() {
    kyverno_build
    local moddir port
    moddir=$(go mod download -json "github.com/kyverno/kyverno@$KYVERNO_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    K create -f "$moddir/config/crds" -R >/dev/null
    K create namespace kyverno >/dev/null
    # A subset of the Helm chart's defaults: Kyverno's webhooks skip kube-system and kyverno.
    K -n kyverno create configmap kyverno \
        --from-literal=resourceFilters='[Event,*,*][*/*,kube-system,*][*/*,kyverno,*][Node,*,*][Lease,*,*][APIService,*,*][TokenReview,*,*][SubjectAccessReview,*,*][SelfSubjectAccessReview,*,*][Binding,*,*][ReplicaSet,*,*][AdmissionReport,*,*][ClusterAdmissionReport,*,*][BackgroundScanReport,*,*][ClusterBackgroundScanReport,*,*]' \
        --from-literal=webhooks='{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","kyverno"]}]}}' \
        >/dev/null
    K -n kyverno create configmap kyverno-metrics >/dev/null
    # --serverIP is only the address written into the webhook configurations; the server
    # listens on --webhookServerPort (default 9443), so both name the port.
    port=${KYVERNO_PORT:-$(free_port)}
    KYVERNO_NAMESPACE=kyverno KYVERNO_SERVICEACCOUNT_NAME=kyverno-admission-controller \
        KYVERNO_DEPLOYMENT=dummy KYVERNO_POD_NAME=dummy INIT_CONFIG=kyverno METRICS_CONFIG=kyverno-metrics \
        "$KYVERNO_DIR/kyverno" --kubeconfig "$KUBECONFIG" --serverIP="127.0.0.1:$port" \
        --webhookServerPort="$port" \
        --caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca \
        --tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair \
        --backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller \
        --reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller \
        --omitEvents=PolicyApplied,PolicySkipped --controllerRuntimeMetricsAddress=0 \
        </dev/null >"$OUT/logs/kyverno.log" 2>&1 &
    PID[kyverno]=$!
    pids+=("$!")
    # Registered webhooks, and a server that answers them (any HTTP answer: its health checks
    # have opinions of their own). `grep` without -q: under pipefail, -q can fail the pipe.
    local up=0
    for _ in $(seq 120); do
        if K get mutatingwebhookconfigurations -o name 2>/dev/null | grep kyverno >/dev/null \
            && curl -sk -o /dev/null "https://127.0.0.1:$port/health/liveness"; then
            up=1
            break
        fi
        sleep 1
    done
    [[ $up == 1 ]] \
        || { log "Kyverno registered no webhooks or does not answer (see $OUT/logs/kyverno.log)"; return 1; }
    # The policy, from the example policies' steps (as JSON through the bookend CRDs' kinds).
    "$BOOKEND" crds | K create -f - >/dev/null
    K create --dry-run=client -o json -f examples/policies/10-credentials.yaml >"$F/credentials.json"
    K create --dry-run=client -o json -f examples/policies/20-sbom.yaml >"$F/sbom.json"
    $FIXTURES kyverno "$F/kyverno-policy.json" "$F/credentials.json" "$F/sbom.json"
    $FIXTURES steps bookend-credentials build test bookend-sbom bookend-sbom-upload >"$F/expect-kyverno.json"
    if [[ -n ${STEPS:-} ]]; then
        log "KYVERNO=1 with STEPS is not supported (its expectation names build.yaml's steps)"
        return 1
    fi
}

kyverno_policy() { # kyverno_policy on|off
    if [[ $1 == on ]]; then
        K apply -f "$F/kyverno-policy.json" >/dev/null
        K wait --for=condition=Ready --timeout=120s clusterpolicy/bench-org-steps >/dev/null
    else
        K delete clusterpolicy bench-org-steps --ignore-not-found --wait=true >/dev/null
    fi
}
