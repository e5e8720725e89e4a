#!/usr/bin/env bash
# Regenerates go.mod/go.sum of this tool-only module for a given Kubernetes version.
# Usage: tests/e2e/k8sbins/gen-gomod.sh [v1.36.3]
# The staging-module replace list is generated from the k8s.io/kubernetes .mod file served by the
# Go module proxy (no GitHub access needed); etcd server is pinned to what k8s.io/apiserver requires.
set -euo pipefail
KV=${1:-v1.36.3}
SV=v0.${KV#v1.}                         # v1.36.3 -> v0.36.3
cd "$(dirname "$0")"
MOD=$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$KV")
GOVER=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$MOD")
GODEBUG_LINE=$(grep -E '^godebug ' "$MOD" || true)
cat > go.mod <<GOMOD
module bookend.invalid/e2e/k8sbins

go $GOVER

$GODEBUG_LINE

// Every staging module of k8s.io/kubernetes $KV, mapped to its published tag $SV
// (k8s.io/kubernetes requires them at v0.0.0 with replaces that consumers do not inherit).
replace (
$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\t\1 => \1 '"$SV"'#p' "$MOD")
)
GOMOD
APIMOD=$(go list -m -f '{{.GoMod}}' "k8s.io/apiserver@$SV")
ETCD=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$APIMOD" | head -1)
echo "k8s.io/kubernetes $KV, staging $SV, go $GOVER, etcd server $ETCD (from k8s.io/apiserver@$SV)" >&2
go mod edit -require="k8s.io/kubernetes@$KV" -require="go.etcd.io/etcd/server/v3@$ETCD"
go mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver -tool=k8s.io/kubernetes/cmd/kubectl
go mod tidy
go mod verify
