#!/usr/bin/env bash
# Faults under load: `bookend serve` (release build) with scripts/loadgen.py sending a steady
# mixed load while something goes wrong. Each scenario prints its failed-request count.
#
#   scripts/faults.sh [rotation|reload|sigterm|slow|watch]...    default: the first four
#
#   rotation  the serving pair is replaced twice the way the kubelet updates a Secret volume
#             (`..data` symlink swap), new handshakes every 5th request: 0 failed requests.
#   reload    a broken policy file appears: the reload is refused, injection continues with the
#             last good set (the load checks every patch injects): 0 failed requests.
#   sigterm   SIGTERM mid-load: every request the server accepted is answered, exit code 0.
#             Connections closed by the server while idle (before a request was written on
#             them) and connects refused after the listener closed are counted apart: the API
#             server retries the first and applies failurePolicy to the second.
#   slow      300 silent TCP connections and 100 TLS clients that never finish their headers,
#             while the load runs: 0 failed requests, and the slow ones are cut off after
#             --header-read-timeout.
#   watch     --source kubernetes against a real kube-apiserver (tests/e2e/start-cluster.sh):
#             the apiserver is stopped for 15 s and restarted while reviews keep coming:
#             0 failed requests, answered from the last state; the caches recover.
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(rotation reload sigterm slow)

bin=target/release/bookend
[ -x "$bin" ] && [ -z "$(find src Cargo.toml -newer "$bin" -print -quit)" ] || cargo build --release --quiet

work=$(mktemp -d)
server_pid=
cluster_dir=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$cluster_dir" ] && tests/e2e/stop-cluster.sh "$cluster_dir" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -fsS "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# A Secret-volume layout: tls/..data -> ..gen_N, tls/tls.crt -> ..data/tls.crt.
"$bin" certs --out-dir "$work/ca" --host 127.0.0.1 >/dev/null
generation=0
new_leaf() {
    local gen="$work/tls/..gen_$generation"
    mkdir -p "$gen"
    openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$gen/tls.key"
    openssl req -new -key "$gen/tls.key" -subj "/CN=127.0.0.1" -out "$gen/tls.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$gen/ext"
    openssl x509 -req -in "$gen/tls.csr" -CA "$work/ca/ca.crt" -CAkey "$work/ca/ca.key" \
        -CAcreateserial -days 2 -extfile "$gen/ext" -out "$gen/tls.crt" 2>/dev/null
    ln -sfn "..gen_$generation" "$work/tls/..data_tmp"
    mv -T "$work/tls/..data_tmp" "$work/tls/..data"
    generation=$((generation + 1))
}
mkdir -p "$work/tls"
new_leaf
ln -s ..data/tls.crt "$work/tls/tls.crt"
ln -s ..data/tls.key "$work/tls/tls.key"

start_server() { # extra serve flags...
    webhook=$(port)
    admin=$(port)
    "$bin" serve --listen "127.0.0.1:$webhook" --admin-listen "127.0.0.1:$admin" \
        --tls-cert "$work/tls/tls.crt" --tls-key "$work/tls/tls.key" --reload-interval 200ms "$@" \
        >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
        curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && return 0
        kill -0 $server_pid 2>/dev/null || break
        sleep 0.1
    done
    echo "server did not become ready:"; tail -20 "$work/server.log"; exit 1
}
stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}
load() { # seconds [loadgen flags...]; runs in the background, summary in $work/load.json
    local seconds=$1
    shift
    python3 scripts/loadgen.py --port "$webhook" --cacert "$work/ca/ca.crt" --rate 100 \
        --duration "$seconds" "$@" >"$work/load.json" &
    load_pid=$!
}
finish_load() {
    wait $load_pid || true
    summary=$(tail -1 "$work/load.json")
}
serial() {
    openssl s_client -connect "127.0.0.1:$webhook" -CAfile "$work/ca/ca.crt" </dev/null 2>/dev/null |
        openssl x509 -noout -serial 2>/dev/null | cut -d= -f2
}
overall=0
report() { # name failed extra...
    local name=$1 failed=$2
    shift 2
    echo "fault $name: $failed failed requests; $*"
    [ "$failed" = 0 ] || { overall=1; echo "  errors: $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["errors"][:5])' "$summary")"; }
}

rotation() {
    start_server --policies examples/policies
    local before
    before=$(serial)
    load 20 --fresh-every 5
    sleep 6
    new_leaf
    sleep 6
    new_leaf
    sleep 2
    local after
    after=$(serial)
    finish_load
    local ok
    ok=$(metric 'bookend_certificate_reloads_total{result="success"}')
    [ "$before" != "$after" ] && [ "${ok%.*}" -ge 2 ] || { echo "  the new certificate was not picked up ($before → $after, reloads $ok)"; overall=1; }
    report rotation "$(field "$summary" failed)" "$(field "$summary" ok) answered; serial $before → $after; reloads ok=$ok"
    stop_server
}

reload() {
    mkdir -p "$work/policies"
    cp examples/policies/*.yaml "$work/policies/"
    start_server --policies "$work/policies"
    local loaded
    loaded=$(metric bookend_policies_loaded)
    load 15
    sleep 4
    sed 's/image:/imagee:/' examples/policies/20-sbom.yaml >"$work/broken.tmp"
    mv "$work/broken.tmp" "$work/policies/20-sbom.yaml"
    sleep 4
    printf 'apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: x\n' >"$work/policies/50-garbage.yaml"
    finish_load
    local errors now
    errors=$(metric 'bookend_policy_reloads_total{result="error"}')
    now=$(metric bookend_policies_loaded)
    [ "${errors%.*}" -ge 1 ] && [ "$now" = "$loaded" ] || { echo "  reload not refused (errors $errors, policies $loaded → $now)"; overall=1; }
    report reload "$(field "$summary" failed)" "$(field "$summary" ok) answered, every mutate injected; refused reloads $errors; policies loaded $loaded → $now; readyz $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/readyz")"
    stop_server
}

sigterm() {
    start_server --policies examples/policies --drain-timeout 10s --log-format json
    load 12 --retry-closed --concurrency 16 --rate 200
    sleep 5
    local pid=$server_pid
    kill -TERM "$pid"
    local code=0
    wait "$pid" || code=$?
    server_pid=
    finish_load
    [ "$code" = 0 ] || { echo "  exit code $code"; overall=1; }
    # Every review the server read was answered: its log has one line per answered review
    # (404/405 are not reviews), and the client received exactly that many.
    local logged received
    logged=$(grep -c -E '"message":"(mutated|allowed|denied|malformed request)"' "$work/server.log" || true)
    received=$(python3 -c 'import json,sys; k=json.loads(sys.argv[1])["by_kind"]; print(sum(v["ok"] + v["failed"] for n, v in k.items() if n not in ("not-found", "method")))' "$summary")
    [ "$logged" = "$received" ] || { echo "  the server answered $logged reviews, the client received $received"; overall=1; }
    report sigterm "$(field "$summary" failed)" "$(field "$summary" ok) answered before and during the drain ($logged reviews logged by the server, $received received); exit code $code; $(field "$summary" refused) not accepted (closed idle or connect refused after the listener closed)"
}

slow() {
    start_server --policies examples/policies --header-read-timeout 2s
    load 15
    python3 - "$webhook" "$work/ca/ca.crt" <<'PY' >"$work/slow.txt"
import socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
ctx = ssl.create_default_context(cafile=ca)
partial = []
for _ in range(100):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
    s.sendall(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
    partial.append(s)
started = time.monotonic()
time.sleep(4)
closed = 0
for s in silent + partial:
    s.settimeout(0.5)
    try:
        data = s.recv(1024)
        closed += (data == b"" or data.startswith(b"HTTP/1.1 408"))
    except (ConnectionResetError, ssl.SSLError, OSError):
        closed += 1
    except socket.timeout:
        pass
print(f"{closed} of {len(silent) + len(partial)} slow connections closed within 4 s")
PY
    finish_load
    report slow "$(field "$summary" failed)" "$(field "$summary" ok) answered, latency $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["latency_ms"])' "$summary") ms; $(cat "$work/slow.txt")"
    stop_server
}

watch() {
    [ -x tests/e2e/bin/current/kube-apiserver ] || { echo "fault watch: SKIP (tests/e2e/build-tools.sh has not built the binaries)"; return; }
    cluster_dir="$work/cluster"
    eval "$(tests/e2e/start-cluster.sh "$cluster_dir")"
    export KUBECONFIG
    local kubectl=tests/e2e/bin/current/kubectl
    "$bin" crds | $kubectl create -f - >/dev/null
    $kubectl wait --for condition=Established crd --all --timeout 60s >/dev/null
    $kubectl create namespace team-a >/dev/null
    $kubectl apply -f examples/policies >/dev/null
    start_server --source kubernetes
    load 40 --fresh-every 0
    sleep 8
    local cmdline
    cmdline=$(tr '\0' '\n' <"/proc/$APISERVER_PID/cmdline")
    kill -TERM "$APISERVER_PID"
    while kill -0 "$APISERVER_PID" 2>/dev/null; do sleep 0.2; done
    echo "  kube-apiserver stopped at $(date -u +%T)"
    sleep 15
    mapfile -t args <<<"$cmdline"
    setsid "${args[@]}" >>"$cluster_dir/kube-apiserver.log" 2>&1 </dev/null &
    APISERVER_PID=$!
    echo "$APISERVER_PID" >"$cluster_dir/kube-apiserver.pid"  # for stop-cluster.sh
    echo "  kube-apiserver restarted at $(date -u +%T)"
    finish_load
    # The caches recover: a policy created after the restart is served.
    for _ in $(seq 60); do $kubectl get --raw /readyz >/dev/null 2>&1 && break; sleep 1; done
    sed 's/name: org-sbom/name: after-restart/; s/bookend-sbom/bookend-late/g' examples/policies/20-sbom.yaml | $kubectl apply -f - >/dev/null
    local recovered=no
    for _ in $(seq 60); do
        [ "$(metric bookend_policies_loaded)" = 5 ] && { recovered=yes; break; }
        sleep 1
    done
    [ $recovered = yes ] || overall=1
    report watch "$(field "$summary" failed)" "$(field "$summary" ok) answered across a 15 s apiserver outage; policy created after the restart loaded: $recovered; watch errors $(metric bookend_watch_errors_total 2>/dev/null || true)"
    stop_server
}

for s in "${scenarios[@]}"; do
    "$s"
done
exit $overall
