#!/usr/bin/env bash
# Soak: `bookend serve` (release build) under a steady mixed load of valid and invalid reviews.
#
#   scripts/soak.sh [minutes] [rate]        default: 10 minutes at 150 requests/s
#
# Reports zero failed requests (the exit status), and the server's RSS and open file
# descriptors at the start (after a warm-up) and the end, from /proc/<pid>/status and
# /proc/<pid>/fd, with a sample every minute. Fails when a request failed, a review panicked,
# the fd count grew by more than 16, or RSS grew by more than 50%.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:-10}
rate=${2:-150}
bin=target/release/bookend
[ -x "$bin" ] && [ -z "$(find src Cargo.toml -newer "$bin" -print -quit)" ] || cargo build --release --quiet

work=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
webhook=$(port)
admin=$(port)
"$bin" certs --out-dir "$work/certs" --host 127.0.0.1 >/dev/null
"$bin" serve --listen "127.0.0.1:$webhook" --admin-listen "127.0.0.1:$admin" \
    --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
    --policies examples/policies --log-format json >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null

rss() { awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status"; }
fds() { ls "/proc/$server_pid/fd" | wc -l; }
metric() { curl -fsS "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

echo "soak: bookend pid $server_pid, https://127.0.0.1:$webhook, ${minutes} min at ${rate}/s"
# Warm up for 15 s so allocator arenas and connection pools reach their working size.
python3 scripts/loadgen.py --port "$webhook" --cacert "$work/certs/ca.crt" --rate "$rate" --duration 15 >"$work/warmup.json" || { echo "FAIL: warm-up: $(tail -1 "$work/warmup.json")"; exit 1; }
rss_start=$(rss)
fd_start=$(fds)
echo "start: RSS ${rss_start} kB, ${fd_start} fds"

python3 scripts/loadgen.py --port "$webhook" --cacert "$work/certs/ca.crt" --rate "$rate" \
    --duration $((minutes * 60)) >"$work/load.json" &
load_pid=$!
minute=0
while kill -0 $load_pid 2>/dev/null; do
    sleep 5
    elapsed=$((++minute * 5))
    if [ $((elapsed % 60)) -eq 0 ]; then
        echo "  ${elapsed}s: RSS $(rss) kB, $(fds) fds, in flight $(metric bookend_admission_in_flight)"
    fi
done
load_status=0
wait $load_pid || load_status=$?
# Let idle keep-alive connections the load generator closed be reaped.
sleep 2
rss_end=$(rss)
fd_end=$(fds)
summary=$(tail -1 "$work/load.json")
panics=$(metric bookend_handler_panics_total)
echo "end:   RSS ${rss_end} kB, ${fd_end} fds"
echo "load:  $summary"
echo "panics: ${panics:-0}; server log lines at error level: $(grep -c '"level":"ERROR"' "$work/server.log" || true)"

status=0
failed=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["failed"])' "$summary")
[ "$failed" -eq 0 ] || { echo "FAIL: $failed failed requests"; status=1; }
[ "$load_status" -eq 0 ] || status=1
[ "${panics:-0}" = 0 ] || { echo "FAIL: panics"; status=1; }
[ $((fd_end - fd_start)) -le 16 ] || { echo "FAIL: fd count grew from $fd_start to $fd_end"; status=1; }
[ $((rss_end * 2)) -le $((rss_start * 3)) ] || { echo "FAIL: RSS grew from $rss_start kB to $rss_end kB"; status=1; }
# No TaskRun param value reaches the log (the load sends one that looks like a token).
if grep -q "SOAK-SECRET-TOKEN" "$work/server.log"; then echo "FAIL: a param value was logged"; status=1; fi
[ $status -eq 0 ] && echo "soak: PASS (0 failed requests)"
exit $status
