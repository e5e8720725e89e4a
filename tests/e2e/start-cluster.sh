#!/usr/bin/env bash
# Starts a throw-away control plane for end-to-end tests: etcd + kube-apiserver (built by
# tests/e2e/build-tools.sh) on free loopback ports, plus Tekton's CRDs (TaskRun, Task, StepAction;
# spec.conversion = None, see build-tools.sh). No controllers, no kubelet: objects are only
# admitted (mutating/validating webhooks, CRD schema) and stored.
#
# Usage: tests/e2e/start-cluster.sh [WORKDIR]      (default: tests/e2e/.work/cluster)
#        tests/e2e/stop-cluster.sh  [WORKDIR]
# Env:   E2E_BIN_DIR  directory with etcd, kube-apiserver, kubectl, crds/ (default tests/e2e/bin/current)
#        E2E_START_TIMEOUT  seconds to wait for readiness (default 120)
#        E2E_APISERVER_ARGS  more kube-apiserver flags, split on spaces (tests/chart_pod:
#          --enable-aggregator-routing=true)
#        E2E_AUDIT_USERS  comma-separated user names whose requests the apiserver writes to
#                         WORKDIR/audit.log (audit level Metadata, one JSON event per line)
#        E2E_SERVICE_ACCOUNT_ADMISSION=1  leaves the ServiceAccount admission plugin on, as on a
#          real cluster: it mounts the service account token (kube-api-access-<random>) into
#          every container of a Pod, and refuses a Pod whose ServiceAccount does not exist. No
#          controller creates `default` here: this creates it in namespace default, the tests in
#          their own namespaces.
#
# On success prints KEY=VALUE lines (also written to WORKDIR/env, shell-sourceable):
#   KUBECONFIG, E2E_API_URL, E2E_API_CA (PEM file of the apiserver's self-signed cert),
#   E2E_TOKEN (bearer token, group system:masters), ETCD_PID, APISERVER_PID, E2E_WORKDIR
# Logs: WORKDIR/etcd.log, WORKDIR/kube-apiserver.log. Exit status non-zero (and everything that
# was started is stopped again) when the cluster does not come up.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${1:-$E2E_DIR/.work/cluster}
BIN=${E2E_BIN_DIR:-$E2E_DIR/bin/current}
TIMEOUT=${E2E_START_TIMEOUT:-120}

for b in etcd kube-apiserver kubectl; do
  [[ -x $BIN/$b ]] || { echo "start-cluster: $BIN/$b missing - run tests/e2e/build-tools.sh first" >&2; exit 2; }
done
[[ -f $BIN/crds/300-taskrun.yaml ]] || { echo "start-cluster: $BIN/crds missing - run tests/e2e/build-tools.sh" >&2; exit 2; }

mkdir -p "$D"
D=$(cd "$D" && pwd)
for p in "$D"/*.pid; do
  [[ -e $p ]] || continue
  if kill -0 "$(cat "$p")" 2>/dev/null; then
    echo "start-cluster: already running ($p); run tests/e2e/stop-cluster.sh $D first" >&2
    exit 2
  fi
done
rm -rf "$D/etcd" "$D/certs" "$D"/*.pid "$D/kubeconfig" "$D/env" "$D/audit.log"
mkdir -p "$D/certs"
t_start=$SECONDS

# free loopback ports: random candidates nobody answers on
used_ports=" "
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 40000))
    [[ $used_ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      echo "$p"
      return 0
    fi
  done
  echo "start-cluster: no free port found" >&2
  return 1
}
ETCD_PORT=$(free_port); used_ports+="$ETCD_PORT "
PEER_PORT=$(free_port); used_ports+="$PEER_PORT "
API_PORT=$(free_port); used_ports+="$API_PORT "

TOKEN=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
echo "$TOKEN,e2e-admin,e2e-admin-uid,system:masters" >"$D/tokens.csv"
chmod 600 "$D/tokens.csv"
openssl genrsa -out "$D/sa.key" 2048 2>/dev/null

cleanup_on_error() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "start-cluster: failed (exit $rc); stopping what was started" >&2
    for f in etcd kube-apiserver; do
      [[ -f $D/$f.log ]] && { echo "--- last lines of $D/$f.log" >&2; tail -n 15 "$D/$f.log" >&2; }
    done
    "$E2E_DIR/stop-cluster.sh" "$D" >&2 || true
  fi
}
trap cleanup_on_error EXIT

wait_for() { # wait_for <what> <command...>
  local what=$1 deadline=$((SECONDS + TIMEOUT)); shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then echo "start-cluster: timeout waiting for $what" >&2; return 1; fi
    sleep 0.5
  done
}

# --- etcd (flags as controller-runtime envtest uses them)
setsid "$BIN/etcd" \
  --name e2e --data-dir "$D/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$PEER_PORT" \
  --unsafe-no-fsync --log-level warn \
  </dev/null >"$D/etcd.log" 2>&1 &
echo $! >"$D/etcd.pid"
wait_for etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
t_etcd=$SECONDS

# --- kube-apiserver
# Audit (opt-in): what the named users asked for and what they got, to check a component's RBAC
# against what it really does: a line when a response starts (a watch) and when it completes.
AUDIT=()
if [[ -n ${E2E_AUDIT_USERS:-} ]]; then
  {
    echo "apiVersion: audit.k8s.io/v1"
    echo "kind: Policy"
    echo "omitStages: [RequestReceived]"
    echo "rules:"
    echo "  - level: Metadata"
    echo "    users: [$(sed 's/[^,][^,]*/"&"/g' <<<"$E2E_AUDIT_USERS")]"
    echo "  - level: None"
  } >"$D/audit-policy.yaml"
  AUDIT=(--audit-policy-file="$D/audit-policy.yaml" --audit-log-path="$D/audit.log"
         --audit-log-format=json --audit-log-mode=blocking)
fi
read -ra EXTRA_ARGS <<<"${E2E_APISERVER_ARGS:-}"
# Off by default: without kube-controller-manager no `default` ServiceAccount exists, and the
# plugin would refuse every Pod.
SA_ADMISSION=(--disable-admission-plugins=ServiceAccount)
[[ ${E2E_SERVICE_ACCOUNT_ADMISSION:-} == 1 ]] && SA_ADMISSION=()
setsid "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --secure-port="$API_PORT" \
  --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
  --cert-dir="$D/certs" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --service-account-issuer="https://127.0.0.1:$API_PORT" \
  --service-account-key-file="$D/sa.key" --service-account-signing-key-file="$D/sa.key" \
  --token-auth-file="$D/tokens.csv" \
  --authorization-mode=RBAC \
  --allow-privileged=true \
  --v=1 "${SA_ADMISSION[@]}" "${AUDIT[@]}" "${EXTRA_ARGS[@]}" \
  </dev/null >"$D/kube-apiserver.log" 2>&1 &
echo $! >"$D/kube-apiserver.pid"
API_URL="https://127.0.0.1:$API_PORT"
wait_for "kube-apiserver /readyz" curl -fsS --cacert "$D/certs/apiserver.crt" \
  -H "Authorization: Bearer $TOKEN" "$API_URL/readyz"
t_api=$SECONDS

# --- kubeconfig
KC="$D/kubeconfig"
K() { "$BIN/kubectl" --kubeconfig "$KC" "$@"; }
K config set-cluster e2e --server="$API_URL" --certificate-authority="$D/certs/apiserver.crt" --embed-certs=true >/dev/null
K config set-credentials e2e-admin --token="$TOKEN" >/dev/null
K config set-context e2e --cluster=e2e --user=e2e-admin --namespace=default >/dev/null
K config use-context e2e >/dev/null
chmod 600 "$KC"
wait_for "namespace default" K get namespace default
if [[ ${E2E_SERVICE_ACCOUNT_ADMISSION:-} == 1 ]]; then
  K create serviceaccount default --namespace default >/dev/null
fi

# --- Tekton CRDs (too large for client-side apply: create)
K create -f "$BIN/crds/300-taskrun.yaml" -f "$BIN/crds/300-task.yaml" -f "$BIN/crds/300-stepaction.yaml" >/dev/null
# `kubectl wait` errors out (instead of waiting) while a new CRD has no conditions yet, so
# poll it like everything else.
wait_for "Tekton CRDs Established" K wait --for=condition=Established --timeout=2s \
  crd/taskruns.tekton.dev crd/tasks.tekton.dev crd/stepactions.tekton.dev
# discovery lags a little behind Established
wait_for "taskruns in discovery" K get taskruns.v1.tekton.dev -A
t_crds=$SECONDS

cat >"$D/env" <<EOF
KUBECONFIG=$KC
E2E_API_URL=$API_URL
E2E_API_CA=$D/certs/apiserver.crt
E2E_TOKEN=$TOKEN
ETCD_PID=$(cat "$D/etcd.pid")
APISERVER_PID=$(cat "$D/kube-apiserver.pid")
E2E_WORKDIR=$D
EOF
chmod 600 "$D/env"
trap - EXIT
echo "start-cluster: up in $((t_crds - t_start)) s (etcd $((t_etcd - t_start)) s, apiserver ready +$((t_api - t_etcd)) s, CRDs +$((t_crds - t_api)) s)" >&2
cat "$D/env"
