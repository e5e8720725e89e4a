#!/usr/bin/env bash
# Builds the end-to-end test tools from Go modules (Go module proxy only, no Docker, no downloads
# of prebuilt binaries):
#   kube-apiserver, kubectl  - k8s.io/kubernetes (version pinned in tests/e2e/k8sbins/go.mod)
#   etcd                     - go.etcd.io/etcd/server/v3 at the version k8s.io/apiserver pins
#   tekton-validate          - Tekton's own SetDefaults+Validate (tests/e2e/tektonvalidate)
# and copies Tekton's CRDs (from the tektoncd/pipeline module download) next to them:
#   tests/e2e/bin/<k8s-version>/{kube-apiserver,kubectl,etcd,tekton-validate,crds/}
#   tests/e2e/bin/current -> <k8s-version>
# A binary is skipped when it exists and was built from the same go.mod/go.sum/sources
# (a .stamp file next to it records that). Force a rebuild with FORCE=1.
# Prints the time of each step; the last lines are shell-sourceable paths (E2E_BIN_DIR=..., ...).
# Env: FORCE=1 rebuild everything; ONLY="kube-apiserver kubectl etcd tekton-validate crds" subset.
#      ONLY=chains-provenance builds Tekton Chains' formatters (tests/runtime/chains), which no
#      default set includes.
#      BOOKEND_TEKTON_VERSION=v0.62.3 builds the Tekton tools (tekton-validate, CRDs, the runtime
#      suite's controller, entrypoint, resolvers, conversion webhook and config) at that release
#      instead of the default (the version tests/e2e/tektonvalidate pins), from the committed
#      module tests/runtime/tekton/v<major>.<minor> (its go.mod/go.sum pin that release), into
#      tests/e2e/bin/<k8s-version>/tekton/<version>/ with the other tools linked beside them;
#      E2E_BIN_DIR then names that directory. The default version's layout is unchanged.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8SBINS="$E2E_DIR/k8sbins"
TVDIR="$E2E_DIR/tektonvalidate"
ONLY=${ONLY:-kube-apiserver kubectl etcd tekton-validate crds helm promtool promql-selectors actionlint}
FORCE=${FORCE:-0}

command -v go >/dev/null || { echo "build-tools.sh: go not found on PATH" >&2; exit 2; }

export CGO_ENABLED=0
# Do not touch GOPROXY/GOSUMDB/GOFLAGS: the machine's settings are used as they are.
# go.mod/go.sum are committed, so the default -mod=readonly works.

modver() { # modver <module dir> <module path> -> version required by that module's build list
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

K8S_VERSION=$(modver "$K8SBINS" k8s.io/kubernetes)
ETCD_VERSION=$(modver "$K8SBINS" go.etcd.io/etcd/server/v3)
TEKTON_VERSION=$(modver "$TVDIR" github.com/tektoncd/pipeline)
BIN="$E2E_DIR/bin/$K8S_VERSION"
mkdir -p "$BIN"
# one build at a time (e.g. two test binaries calling this script concurrently)
if command -v flock >/dev/null; then
  exec 9>"$E2E_DIR/bin/.lock"
  flock 9
fi
ln -sfn "$K8S_VERSION" "$E2E_DIR/bin/current"

# Another Tekton release (BOOKEND_TEKTON_VERSION): its module and output directory.
DEFAULT_TEKTON_VERSION=$TEKTON_VERSION
TEKTON_BIN=$BIN
RUNTIME_MOD="$E2E_DIR/../runtime/standins"
CONVERSION_MOD=$RUNTIME_MOD
if [[ -n ${BOOKEND_TEKTON_VERSION:-} && $BOOKEND_TEKTON_VERSION != "$DEFAULT_TEKTON_VERSION" ]]; then
  line=${BOOKEND_TEKTON_VERSION#v}; line="v${line%.*}"
  TVDIR="$E2E_DIR/../runtime/tekton/$line"
  [[ -f $TVDIR/go.mod ]] || {
    echo "build-tools.sh: no module for Tekton $BOOKEND_TEKTON_VERSION (tests/runtime/tekton/$line/go.mod); lines: $(cd "$E2E_DIR/../runtime/tekton" && echo v*) and the default $DEFAULT_TEKTON_VERSION" >&2
    exit 2
  }
  TVDIR=$(cd "$TVDIR" && pwd)
  TEKTON_VERSION=$(modver "$TVDIR" github.com/tektoncd/pipeline)
  [[ $TEKTON_VERSION == "$BOOKEND_TEKTON_VERSION" ]] || {
    echo "build-tools.sh: tests/runtime/tekton/$line pins tektoncd/pipeline $TEKTON_VERSION, not $BOOKEND_TEKTON_VERSION" >&2
    exit 2
  }
  RUNTIME_MOD=$TVDIR
  CONVERSION_MOD=$TVDIR
  TEKTON_BIN="$BIN/tekton/$TEKTON_VERSION"
  mkdir -p "$TEKTON_BIN"
fi

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
K8S_LDFLAGS="-s -w \
 -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitTreeState=clean"

echo "build-tools: k8s.io/kubernetes $K8S_VERSION, etcd $ETCD_VERSION, tektoncd/pipeline $TEKTON_VERSION"
echo "build-tools: output $BIN ($(go version | cut -d' ' -f3), $(nproc) cores)"

wanted() { [[ " $ONLY " == *" $1 "* ]]; }

# key of a module's inputs: go.mod, go.sum and every .go file (plus the build flags)
srckey() { # srckey <module dir> <extra string>
  # -L: a version module's packages are links to the default module's sources
  (cd "$1" && { cat go.mod go.sum; find -L . -name '*.go' -type f | LC_ALL=C sort | xargs cat; echo "$2"; } \
    | sha256sum | cut -d' ' -f1)
}

total_start=$SECONDS
build() { # build <name> <module dir> <package> <ldflags> [<output dir>]
  local name=$1 dir=$2 pkg=$3 ldflags=$4 key out="${5:-$BIN}/$1"
  wanted "$name" || return 0
  key=$(srckey "$dir" "$pkg $ldflags")
  if [[ $FORCE != 1 && -x $out && -f $out.stamp && $(cat "$out.stamp") == "$key" ]]; then
    echo "build-tools: $name: up to date, skipped ($out)"
    return 0
  fi
  echo "build-tools: $name: building $pkg ..."
  local t0=$SECONDS
  (cd "$dir" && go build -buildvcs=false -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
  echo "$key" >"$out.stamp"
  echo "build-tools: $name: built in $((SECONDS - t0)) s ($(du -h "$out" | cut -f1))"
}

build kube-apiserver  "$K8SBINS" k8s.io/kubernetes/cmd/kube-apiserver "$K8S_LDFLAGS"
build kubectl         "$K8SBINS" k8s.io/kubernetes/cmd/kubectl        "$K8S_LDFLAGS"
build etcd            "$K8SBINS" ./cmd/etcd                            "-s -w"
if [[ $TVDIR == "$E2E_DIR/tektonvalidate" ]]; then tv_pkg=.; else tv_pkg=./tektonvalidate; fi
build tekton-validate "$TVDIR"   "$tv_pkg"                             "-s -w" "$TEKTON_BIN"
# tests/chart_pod: the Deployment, ReplicaSet, EndpointSlice and disruption controllers, from the
# same module as kube-apiserver. Like the runtime tools, built by default but not when ONLY
# comes from the environment.
[[ $(declare -p ONLY) == "declare -x"* ]] || ONLY+=" kube-controller-manager"
build kube-controller-manager "$K8SBINS" k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_LDFLAGS"
# tests/chart_pod's placement test: the chart's spread and anti-affinity under the real scheduler.
[[ $(declare -p ONLY) == "declare -x"* ]] || ONLY+=" kube-scheduler"
build kube-scheduler "$K8SBINS" k8s.io/kubernetes/cmd/kube-scheduler "$K8S_LDFLAGS"

# Tekton CRDs, taken from the tektoncd/pipeline module (no GitHub access needed).
#   crds/upstream/300-*.yaml  as shipped by Tekton
#   crds/300-*.yaml           the same with `spec.conversion` replaced by `strategy: None`:
#     Tekton's conversion webhook (v1beta1 <-> v1) does not run in the test cluster. With None the
#     apiserver only rewrites apiVersion, v1beta1-only fields are NOT converted: send tekton.dev/v1.
#     (Before v0.63 the StepAction CRD has no `conversion`: copied as it is.)
CRDS="$TEKTON_BIN/crds"
if wanted crds && [[ $FORCE != 1 && -f $CRDS/TEKTON_VERSION && $(cat "$CRDS/TEKTON_VERSION") == "$TEKTON_VERSION" \
  && -f $CRDS/300-taskrun.yaml && -f $CRDS/300-task.yaml && -f $CRDS/300-stepaction.yaml ]]; then
  echo "build-tools: crds: up to date, skipped ($CRDS)"
elif wanted crds; then
  t0=$SECONDS
  moddir=$(cd "$TVDIR" && go mod download -json "github.com/tektoncd/pipeline@$TEKTON_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -d $moddir/config/300-crds ]] || { echo "build-tools: no config/300-crds in '$moddir'" >&2; exit 1; }
  rm -rf "$CRDS"
  mkdir -p "$CRDS/upstream"
  for f in 300-taskrun.yaml 300-task.yaml 300-stepaction.yaml; do
    install -m 0644 "$moddir/config/300-crds/$f" "$CRDS/upstream/$f"
    awk '
      /^  conversion:[[:space:]]*$/ { print "  conversion:"; print "    strategy: None"; skip=1; n++; next }
      skip && /^(  [^ ]|[^ ])/ { skip=0 }
      !skip { print }
      END { if (n > 1) exit 1 }
    ' "$CRDS/upstream/$f" >"$CRDS/$f" \
      || { echo "build-tools: could not rewrite spec.conversion of $f" >&2; exit 1; }
  done
  echo "$TEKTON_VERSION" >"$CRDS/TEKTON_VERSION"
  echo "build-tools: crds: copied from $moddir/config/300-crds in $((SECONDS - t0)) s"
fi

# Chart, monitoring and workflow checks (tests/chart.rs, tests/monitoring.rs, tests/workflows.rs):
#   helm              - helm.sh/helm/v4 (tests/e2e/helm: go.mod `tool` directive)
#   promtool          - github.com/prometheus/prometheus (tests/e2e/promtool)
#   promql-selectors  - Prometheus's PromQL parser; lists the series an expression reads
#   actionlint        - github.com/rhysd/actionlint (tests/e2e/actionlint)
# Each module pins its version in go.mod/go.sum; the stamp covers them as for the tools above.
echo "build-tools: helm $(modver "$E2E_DIR/helm" helm.sh/helm/v4), prometheus $(modver "$E2E_DIR/promtool" github.com/prometheus/prometheus), actionlint $(modver "$E2E_DIR/actionlint" github.com/rhysd/actionlint)"
build helm             "$E2E_DIR/helm"       helm.sh/helm/v4/cmd/helm                  "-s -w -X helm.sh/helm/v4/internal/version.version=$(modver "$E2E_DIR/helm" helm.sh/helm/v4)"
build promtool         "$E2E_DIR/promtool"   github.com/prometheus/prometheus/cmd/promtool "-s -w"
build promql-selectors "$E2E_DIR/promtool"   ./cmd/promql-selectors                    "-s -w"
build actionlint       "$E2E_DIR/actionlint" github.com/rhysd/actionlint/cmd/actionlint "-s -w"
# chains-provenance - Tekton Chains' own provenance formatters on a TaskRun (tests/runtime/chains,
#   github.com/tektoncd/chains at the version its go.mod pins). Never in the default set: only
#   runtime scenario 19 uses it, and it builds it with ONLY=chains-provenance when it runs.
build chains-provenance "$E2E_DIR/../runtime/chains" .                        "-s -w"

# --- Runtime suite (tests/runtime, docs/testing.md): Tekton's own controller, entrypoint and
# remote resolvers, the stand-ins (kubelet, conversion webhook, podnet) and the rest of Tekton's
# CRDs, its config maps and RBAC. Module tests/runtime/standins pins Tekton: its go.mod names
# the controller, entrypoint and resolvers as `tool`s. When ONLY comes from the environment it
# selects, as above; the default list predates these entries, so without ONLY they are built too.
RUNTIME_TOOLS="tekton-controller tekton-entrypoint tekton-resolvers kubelet-standin tekton-conversion podnet runtime-config"
[[ $(declare -p ONLY) == "declare -x"* ]] || ONLY+=" $RUNTIME_TOOLS"
RUNTIME_TEKTON=$(modver "$RUNTIME_MOD" github.com/tektoncd/pipeline)
if [[ $RUNTIME_TEKTON != "$TEKTON_VERSION" ]]; then
  echo "build-tools: tests/runtime/standins pins tektoncd/pipeline $RUNTIME_TEKTON, tests/e2e/tektonvalidate $TEKTON_VERSION: make them equal" >&2
  exit 1
fi
build tekton-controller "$RUNTIME_MOD" github.com/tektoncd/pipeline/cmd/controller "-s -w" "$TEKTON_BIN"
build tekton-entrypoint "$RUNTIME_MOD" github.com/tektoncd/pipeline/cmd/entrypoint "-s -w" "$TEKTON_BIN"
build tekton-resolvers  "$RUNTIME_MOD" github.com/tektoncd/pipeline/cmd/resolvers  "-s -w" "$TEKTON_BIN"
build kubelet-standin   "$E2E_DIR/../runtime/standins" ./kubelet                   "-s -w"
build tekton-conversion "$CONVERSION_MOD" ./tektonconversion                       "-s -w" "$TEKTON_BIN"
build podnet            "$E2E_DIR/../runtime/standins" ./podnet                    "-s -w"
# runtime/crds: the CRDs start-cluster.sh does not create, with `conversion: None` (as crds/
# above); runtime/config: Tekton's config maps as shipped; runtime/rbac: Tekton's ServiceAccounts,
# (Cluster)Roles and bindings as shipped (the controller runs as its ServiceAccount);
# runtime/resolvers: config/resolvers as shipped, without its Deployment and Service. The stamp
# names the layout, so a directory from an older layout is copied again.
RUNTIME_DIR="$TEKTON_BIN/runtime"
RUNTIME_LAYOUT="$TEKTON_VERSION crds+clustertask config rbac resolvers"
if wanted runtime-config && [[ $FORCE != 1 && -f $RUNTIME_DIR/TEKTON_VERSION && $(cat "$RUNTIME_DIR/TEKTON_VERSION") == "$RUNTIME_LAYOUT" ]]; then
  echo "build-tools: runtime-config: up to date, skipped ($RUNTIME_DIR)"
elif wanted runtime-config; then
  moddir=$(cd "$RUNTIME_MOD" && go mod download -json "github.com/tektoncd/pipeline@$TEKTON_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  rm -rf "$RUNTIME_DIR"
  mkdir -p "$RUNTIME_DIR/crds" "$RUNTIME_DIR/config" "$RUNTIME_DIR/rbac" "$RUNTIME_DIR/resolvers"
  # ClusterTask only before Tekton v1.0 (removed there): scenario 14 runs one.
  for f in 300-pipelinerun.yaml 300-pipeline.yaml 300-customrun.yaml 300-resolutionrequest.yaml 300-verificationpolicy.yaml 300-clustertask.yaml; do
    [[ -f $moddir/config/300-crds/$f ]] || continue
    awk '
      /^  conversion:[[:space:]]*$/ { print "  conversion:"; print "    strategy: None"; skip=1; next }
      skip && /^(  [^ ]|[^ ])/ { skip=0 }
      !skip { print }
    ' "$moddir/config/300-crds/$f" >"$RUNTIME_DIR/crds/$f"
  done
  install -m 0644 "$moddir"/config/config-*.yaml "$RUNTIME_DIR/config/"
  install -m 0644 "$moddir"/config/200-*.yaml "$moddir"/config/201-*.yaml "$RUNTIME_DIR/rbac/"
  for f in "$moddir"/config/resolvers/*.yaml; do
    case ${f##*/} in resolvers-deployment.yaml | resolvers-service.yaml) continue ;; esac
    install -m 0644 "$f" "$RUNTIME_DIR/resolvers/"
  done
  echo "$RUNTIME_LAYOUT" >"$RUNTIME_DIR/TEKTON_VERSION"
  echo "build-tools: runtime-config: copied from $moddir/config"
fi

# Another Tekton release: the version-independent tools linked beside its own, so that its
# directory is a complete E2E_BIN_DIR (start-cluster.sh takes crds/ from it).
if [[ $TEKTON_BIN != "$BIN" ]]; then
  for tool in kube-apiserver kubectl etcd kubelet-standin podnet helm promtool promql-selectors actionlint chains-provenance; do
    if [[ -e $BIN/$tool ]]; then ln -sfn "../../$tool" "$TEKTON_BIN/$tool"; fi
  done
fi

cat >"$TEKTON_BIN/env.sh" <<EOF
# generated by tests/e2e/build-tools.sh
E2E_BIN_DIR=$TEKTON_BIN
E2E_K8S_VERSION=$K8S_VERSION
E2E_ETCD_VERSION=$ETCD_VERSION
E2E_TEKTON_VERSION=$TEKTON_VERSION
E2E_CRDS_DIR=$CRDS
EOF
echo "build-tools: done in $((SECONDS - total_start)) s; bin dir $(du -sh "$TEKTON_BIN" | cut -f1)"
cat "$TEKTON_BIN/env.sh" | grep -v '^#'
