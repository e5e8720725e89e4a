#!/usr/bin/env bash
# Load benchmark over real TLS (docs/load-benchmark.md): `bookend serve` (files mode,
# examples/policies) and the baseline `examples/null_webhook.rs` (same TLS and HTTP stack, no
# policy work) side by side, driven by h2load (Debian's nghttp2-client) with HTTP/1.1
# keep-alive and HTTP/2, at 1..256 concurrent connections, one request in flight per
# connection.
#
#   scripts/bench-load.sh                       # the full matrix, 10 s per cell
#   DURATION=3 CONNS="1 64" BODIES=example scripts/bench-load.sh
#
# Environment (defaults in brackets):
#   DURATION   measured seconds per cell [10]      WARMUP  seconds before measuring [1]
#   CONNS      concurrent connections, closed loop (each connection sends its next request
#              as soon as the answer arrives: the server's maximum) [1 4 16 64 256]
#   PACED      paced cells, CONNS@TOTAL_REQ_PER_S: the connections share a fixed request rate
#              (h2load --rps), as an API server would send reviews [64@500]
#   PROTOCOLS  h1 and/or h2 [h1 h2]
#   BODIES     pipeline (tests/fixtures/admission-review-taskrun-pipeline.json, or SAMPLE=) and/or example
#              (examples/admission-review.json) [pipeline example]
#   SERVERS    bookend, null and/or nullpatch: the baseline answering with a fixed patch as
#              large as bookend's answer to the pipeline body, to price the bigger answer
#              alone [bookend null nullpatch]
#   BEFORE_BIN another bookend binary (e.g. a build of an earlier commit), measured as server
#              `before` in every cell beside `bookend` (added to SERVERS): a regression check
#   NULL_PATCH_BYTES  nullpatch's patch size before base64 [4270: a 5.9 KB answer, as bookend's]
#   LOADGEN_THREADS  h2load threads [1]
#   STARTUP_RUNS     startup-to-ready runs per server [20]
#   BOOKEND_ARGS     extra `bookend serve` flags (e.g. "--log-level warn") []
#   BOOKEND_PRELOAD  LD_PRELOAD for bookend only (e.g. /usr/lib/x86_64-linux-gnu/libjemalloc.so.2) []
#   OUT        output directory [target/bench-load]
#
# Writes $OUT/results.csv, $OUT/results.md (tables), $OUT/summary.md (idle RSS, startup),
# $OUT/env.txt (machine, load averages) and the raw h2load outputs under $OUT/raw/.
# Needs: h2load (apt-get install -y nghttp2-client), curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
CONNS=${CONNS-"1 4 16 64 256"}
PACED=${PACED-"64@500"}
PROTOCOLS=${PROTOCOLS:-"h1 h2"}
BODIES=${BODIES:-"pipeline example"}
SERVERS=${SERVERS:-"bookend null nullpatch"}
NULL_PATCH_BYTES=${NULL_PATCH_BYTES:-4270}
LOADGEN_THREADS=${LOADGEN_THREADS:-1}
STARTUP_RUNS=${STARTUP_RUNS:-20}
BOOKEND_ARGS=${BOOKEND_ARGS:-}
BOOKEND_PRELOAD=${BOOKEND_PRELOAD:-}
SAMPLE=${SAMPLE:-tests/fixtures/admission-review-taskrun-pipeline.json}
OUT=${OUT:-target/bench-load}
[[ -n ${BEFORE_BIN:-} ]] && SERVERS="$SERVERS before"
target=${CARGO_TARGET_DIR:-target}
BOOKEND=$target/release/bookend
NULL=$target/release/examples/null_webhook

command -v h2load >/dev/null || {
    echo "h2load not found: apt-get update && apt-get install -y nghttp2-client" >&2
    exit 2
}
if [[ ! -x $BOOKEND || ! -x $NULL || ${BUILD:-0} == 1 ]]; then
    cargo build --release --bin bookend --example null_webhook
fi

mkdir -p "$OUT/raw" "$OUT/certs" "$OUT/bin"
# Private copies: a concurrent build relinking target/release mid-run cannot mix versions.
cp -p "$BOOKEND" "$OUT/bin/bookend"
cp -p "$NULL" "$OUT/bin/null_webhook"
[[ -n ${BEFORE_BIN:-} ]] && cp -p "$BEFORE_BIN" "$OUT/bin/bookend-before"
BOOKEND=$OUT/bin/bookend
NULL=$OUT/bin/null_webhook
rm -f "$OUT"/raw/*
"$BOOKEND" certs --force --out-dir "$OUT/certs" --host 127.0.0.1 --host localhost >/dev/null

# --- bodies ---
declare -A body_file
for b in $BODIES; do
    case $b in
    pipeline) body_file[$b]=$SAMPLE ;;
    example) body_file[$b]=$root/examples/admission-review.json ;;
    *) echo "unknown body $b" >&2; exit 2 ;;
    esac
done

# --- servers ---
declare -A pid port admin
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

port[bookend]=18443 admin[bookend]=18080
port[null]=19443 admin[null]=19080
port[nullpatch]=20443 admin[nullpatch]=20080
port[before]=21443 admin[before]=21080
tls=(--tls-cert "$OUT/certs/tls.crt" --tls-key "$OUT/certs/tls.key")
# Request logs at bookend's default level (info) go to /dev/null: formatted and written,
# but not kept (a 10 s cell at 10k req/s would be 30 MB of log).
start_bookend() { # start_bookend <server name> <binary>
    # shellcheck disable=SC2086
    LD_PRELOAD=$BOOKEND_PRELOAD "$2" serve --policies examples/policies "${tls[@]}" \
        --listen 127.0.0.1:${port[$1]} --admin-listen 127.0.0.1:${admin[$1]} \
        $BOOKEND_ARGS 2>/dev/null &
    pid[$1]=$!
    pids+=($!)
}
start_bookend bookend "$BOOKEND"
[[ -n ${BEFORE_BIN:-} ]] && start_bookend before "$OUT/bin/bookend-before"
"$NULL" "${tls[@]}" --listen 127.0.0.1:${port[null]} --admin-listen 127.0.0.1:${admin[null]} \
    2>/dev/null &
pid[null]=$!
pids+=($!)
if [[ " $SERVERS " == *" nullpatch "* ]]; then
    "$NULL" "${tls[@]}" --listen 127.0.0.1:${port[nullpatch]} \
        --admin-listen 127.0.0.1:${admin[nullpatch]} --patch-bytes "$NULL_PATCH_BYTES" 2>/dev/null &
    pid[nullpatch]=$!
    pids+=($!)
fi

wait_ready() {
    for _ in $(seq 1 500); do
        curl -fsS -o /dev/null "http://127.0.0.1:$1/readyz" 2>/dev/null && return 0
        sleep 0.02
    done
    echo "server on admin port $1 did not become ready" >&2
    exit 1
}
for s in bookend null ${pid[nullpatch]:+nullpatch} ${pid[before]:+before}; do wait_ready "${admin[$s]}"; done
sleep 1

status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Whole machine: busy and total ticks (all CPUs), to show how much else was running.
machine_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
hz=$(getconf CLK_TCK)

{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "rustc: $(rustc --version)"
    echo "h2load: $(h2load --version | head -1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "uncommitted src/ changes when this ran: $(git status --short -- src Cargo.toml 2>/dev/null | tr '\n' ' ')"
    echo "binaries built: $(date -u -r "$BOOKEND" +%FT%TZ) (bookend), $(date -u -r "$NULL" +%FT%TZ) (null_webhook)"
    [[ -n ${BEFORE_BIN:-} ]] && echo "before: $BEFORE_BIN ($("$OUT/bin/bookend-before" --version 2>/dev/null || echo '?'))"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "duration: ${DURATION}s (+${WARMUP}s warm-up) per cell; h2load threads: $LOADGEN_THREADS"
    echo "bookend args: ${BOOKEND_ARGS:-(none)}; LD_PRELOAD: ${BOOKEND_PRELOAD:-(none)}"
} >"$OUT/env.txt"

# Sanity: both answer 200 with the right uid; bookend mutates the example body.
for b in $BODIES; do
    for s in $SERVERS; do
        curl -fsS --cacert "$OUT/certs/ca.crt" -H 'Content-Type: application/json' \
            --data-binary @"${body_file[$b]}" "https://127.0.0.1:${port[$s]}/mutate" \
            >"$OUT/raw/answer-$s-$b.json"
    done
done

{
    echo "idle_rss_kib_bookend=$(status_kb "${pid[bookend]}" VmRSS)"
    echo "idle_rss_kib_null=$(status_kb "${pid[null]}" VmRSS)"
} >"$OUT/idle.txt"

# --- the matrix ---
echo "body,protocol,conns,rate,server,duration_s,requests,rps,p50_us,p99_us,p999_us,max_us,non2xx,transport_errors,cpu_s,cpu_pct,cpu_us_per_req,peak_rss_kib,loadgen_cpu_pct,machine_busy_pct,others_cpu_pct" \
    >"$OUT/raw/cells.csv"
for b in $BODIES; do
    for proto in $PROTOCOLS; do
        for spec in $CONNS $PACED; do
            c=${spec%@*}
            rate=0
            pace=()
            if [[ $spec == *@* ]]; then
                rate=${spec#*@}
                pace=(--rps "$(python3 -c "print($rate / $c)")")
            fi
            for s in $SERVERS; do
                cell="$b-$proto-c$c-r$rate-$s"
                p=${pid[$s]}
                echo 5 >"/proc/$p/clear_refs" # resets VmHWM to the current RSS
                t=$((LOADGEN_THREADS < c ? LOADGEN_THREADS : c))
                h1=()
                [[ $proto == h1 ]] && h1=(--h1)
                before=$(cpu_ticks "$p")
                m_before=$(machine_ticks)
                start=$(date +%s.%N)
                TIMEFORMAT="%U %S"
                { time h2load "${h1[@]}" "${pace[@]}" -c "$c" -m 1 -t "$t" -D "$DURATION" --warm-up-time "$WARMUP" \
                    -d "${body_file[$b]}" -H 'Content-Type: application/json' \
                    --log-file "$OUT/raw/$cell.log" \
                    "https://127.0.0.1:${port[$s]}/mutate" >"$OUT/raw/$cell.txt" 2>&1 || true; } 2>"$OUT/raw/$cell.time"
                end=$(date +%s.%N)
                after=$(cpu_ticks "$p")
                m_after=$(machine_ticks)
                hwm=$(status_kb "$p" VmHWM)
                python3 - "$OUT/raw/$cell.txt" "$OUT/raw/$cell.log" "$b" "$proto" "$c" "$rate" "$s" \
                    "$DURATION" "$((after - before))" "$hz" "$start" "$end" "$hwm" "$(cat "$OUT/raw/$cell.time")" "$m_before" "$m_after" "$(nproc)" \
                    >>"$OUT/raw/cells.csv" <<'EOF'
import re, sys
txt, log, body, proto, conns, rate, server, dur, ticks, hz, start, end, hwm, lg, m0, m1, ncpu = sys.argv[1:]
out = open(txt).read()
def num(pattern, default=0):
    m = re.search(pattern, out)
    return int(m.group(1)) if m else default
done = num(r"requests: \d+ total, \d+ started, (\d+) done")
errored = num(r"(\d+) errored")
timeout = num(r"(\d+) timeout")
s2xx = num(r"status codes: (\d+) 2xx")
# Per-request log: start (µs since epoch), status, µs to the end of the response.
# h2load logs only measured requests (after the warm-up).
lat, non2xx = [], 0
for line in open(log):
    parts = line.split()
    if len(parts) < 3:
        continue
    status, us = int(parts[1]), int(parts[2])
    if status < 0:
        continue
    lat.append(us)
    if not 200 <= status < 300:
        non2xx += 1
lat.sort()
def pct(q):
    if not lat:
        return 0
    return lat[min(len(lat) - 1, int(q * len(lat)))]
n = len(lat)
rps = n / float(dur)
# Transport errors: h2load's "errored" (connection or stream errors) and "timeout".
transport = errored + timeout
wall = float(end) - float(start)
cpu = int(ticks) / float(hz)
# CPU covers warm-up and measurement; requests of the warm-up are estimated at the same rate.
per_req = cpu / (rps * wall) * 1e6 if rps else 0
# The load generator's CPU, and the whole machine's (in % of one CPU, like the server's).
lg_pct = 100 * sum(float(x) for x in lg.split()) / wall
(b0, t0), (b1, t1) = (map(int, m0.split()), map(int, m1.split()))
busy = 100 * int(ncpu) * (b1 - b0) / (t1 - t0) if t1 > t0 else 0
server_pct = 100 * cpu / wall
print(f"{body},{proto},{conns},{rate},{server},{dur},{n},{rps:.0f},{pct(.5)},{pct(.99)},{pct(.999)},"
      f"{lat[-1] if lat else 0},{non2xx},{transport},{cpu:.2f},{100 * cpu / wall:.0f},"
      f"{per_req:.0f},{hwm},{lg_pct:.0f},{busy:.0f},{max(0, busy - server_pct - lg_pct):.0f}")
EOF
                tail -1 "$OUT/raw/cells.csv"
            done
        done
    done
done

# Bookend's own view: outcomes counted during the run (mutated vs allowed).
curl -fsS "http://127.0.0.1:${admin[bookend]}/metrics" | grep '^bookend_admission_requests_total' \
    >"$OUT/raw/bookend-outcomes.txt" || true
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"
cleanup
pids=()

# --- startup to ready (files mode), and idle RSS of a fresh process ---
python3 - "$BOOKEND" "$NULL" "$OUT" "$STARTUP_RUNS" "$BOOKEND_ARGS" <<'EOF' >"$OUT/startup.txt"
import http.client, statistics, subprocess, sys, time
bookend, null, out, runs, extra = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
tls = ["--tls-cert", f"{out}/certs/tls.crt", "--tls-key", f"{out}/certs/tls.key"]
cmds = {
    "bookend": [bookend, "serve", "--policies", "examples/policies", *tls,
                "--listen", "127.0.0.1:28443", "--admin-listen", "127.0.0.1:28080", *extra.split()],
    "null": [null, *tls, "--listen", "127.0.0.1:28443", "--admin-listen", "127.0.0.1:28080"],
}
def ready():
    try:
        c = http.client.HTTPConnection("127.0.0.1", 28080, timeout=0.5)
        c.request("GET", "/readyz")
        return c.getresponse().status == 200
    except OSError:
        return False
for name, cmd in cmds.items():
    times, rss = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        while not ready():
            if p.poll() is not None:
                sys.exit(f"{name} exited with {p.returncode}")
            time.sleep(0.0005)
        times.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.5)
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmRSS:"):
                rss.append(int(line.split()[1]))
        p.terminate()
        p.wait()
    times.sort()
    print(f"startup_ms_median_{name}={statistics.median(times):.1f}")
    print(f"startup_ms_min_{name}={times[0]:.1f}")
    print(f"startup_ms_max_{name}={times[-1]:.1f}")
    print(f"idle_rss_kib_median_{name}={statistics.median(rss):.0f}")
EOF

# --- tables ---
cp "$OUT/raw/cells.csv" "$OUT/results.csv"
python3 - "$OUT" <<'EOF'
import csv, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
cells = {}
for r in rows:
    cells.setdefault((r["body"], r["protocol"], int(r["conns"]), int(r["rate"])), {})[r["server"]] = r
def ms(us):
    return f"{int(us) / 1000:.2f}"
lines = []
for body in dict.fromkeys(r["body"] for r in rows):
    lines.append(f"\n### Body: {body}\n")
    lines.append("| proto | conns | offered req/s | server | req/s | p50 ms | p99 ms | p99.9 ms | errors (non-2xx / transport) | CPU % | h2load CPU % | others CPU % | CPU µs/req | peak RSS MiB | req/s ratio | p99 ratio | req/s ÷ nullpatch |")
    lines.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (b, proto, c, rate), servers in cells.items():
        if b != body:
            continue
        for name, r in servers.items():
            ratio_rps = ratio_p99 = ratio_patch = ""
            if name in ("bookend", "before") and "nullpatch" in servers and float(servers["nullpatch"]["rps"]):
                ratio_patch = f"{float(r['rps']) / float(servers['nullpatch']['rps']):.2f}"
            if name in ("bookend", "before") and "null" in servers:
                n = servers["null"]
                if float(n["rps"]):
                    ratio_rps = f"{float(r['rps']) / float(n['rps']):.2f}"
                if float(n["p99_us"]):
                    ratio_p99 = f"{float(r['p99_us']) / float(n['p99_us']):.2f}"
            lines.append(
                f"| {proto} | {c} | {rate or 'max'} | {name} | {r['rps']} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | "
                f"{ms(r['p999_us'])} | {r['non2xx']} / {r['transport_errors']} | {r['cpu_pct']} | {r['loadgen_cpu_pct']} | {r['others_cpu_pct']} | "
                f"{r['cpu_us_per_req']} | {int(r['peak_rss_kib']) / 1024:.1f} | {ratio_rps} | {ratio_p99} | {ratio_patch} |")
if any("before" in servers for servers in cells.values()):
    lines.append("\n### bookend ÷ before (the same cell, side by side)\n")
    lines.append("| body | proto | conns | offered req/s | req/s ratio | p50 ratio | p99 ratio | CPU µs/req ratio |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    def q(a, b):
        return f"{float(a) / float(b):.2f}" if float(b) else ""
    for (b, proto, c, rate), servers in cells.items():
        if "before" in servers and "bookend" in servers:
            n, o = servers["bookend"], servers["before"]
            lines.append(f"| {b} | {proto} | {c} | {rate or 'max'} | {q(n['rps'], o['rps'])} | "
                         f"{q(n['p50_us'], o['p50_us'])} | {q(n['p99_us'], o['p99_us'])} | "
                         f"{q(n['cpu_us_per_req'], o['cpu_us_per_req'])} |")
open(f"{out}/results.md", "w").write("\n".join(lines).lstrip() + "\n")
EOF
cat "$OUT/env.txt" "$OUT/idle.txt" "$OUT/startup.txt" "$OUT/results.md"
