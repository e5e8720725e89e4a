#!/usr/bin/env python3
"""A steady-rate HTTPS load generator for bookend (stdlib only): scripts/soak.sh and
scripts/faults.sh drive it.

Each worker thread keeps an HTTP/1.1 keep-alive connection and sends, at its share of the rate,
a mix of valid and invalid AdmissionReviews, checking each answer against the documented one.
A share of the requests go on fresh connections (a new TLS handshake each), so certificate
rotation is exercised. Prints a JSON summary on the last line of stdout.

Counts:
  ok        answered as documented
  failed    the request was sent and the answer was wrong, cut off or timed out
  refused   the TCP connect was refused (the listener is closed: expected after SIGTERM)
"""

import argparse
import base64
import http.client
import json
import os
import socket
import ssl
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SAMPLE = json.load(open(os.path.join(ROOT, "tests/fixtures/admission-review-taskrun-pipeline.json")))


def review(edit):
    r = json.loads(json.dumps(SAMPLE))
    edit(r)
    return json.dumps(r).encode()


def _dry(r):
    r["request"]["dryRun"] = True


def _no_uid(r):
    r["request"]["uid"] = ""


def _update(r):
    r["request"]["operation"] = "UPDATE"


def _reserved(r):
    r["request"]["object"]["spec"]["taskSpec"]["steps"][0]["name"] = "bookend-sneaky"


def _secret(r):
    r["request"]["object"]["spec"]["params"][0]["value"] = "SOAK-SECRET-TOKEN-0123456789"


def _injected(answer):
    resp = answer.get("response", {})
    if not resp.get("allowed") or resp.get("patchType") != "JSONPatch":
        return False
    patch = json.loads(base64.b64decode(resp["patch"]))
    return any(op.get("path", "").startswith("/spec/taskSpec/steps/") for op in patch)


# name, method, path, body, expected status, check of the JSON answer
KINDS = [
    ("mutate", "POST", "/mutate?timeout=10s", review(lambda r: None), 200, _injected),
    ("mutate-secret", "POST", "/mutate", review(_secret), 200, _injected),
    ("dry-run", "POST", "/mutate", review(_dry), 200, lambda a: bool(a["response"].get("warnings"))),
    ("validate", "POST", "/validate", review(lambda r: None), 200, lambda a: a["response"]["allowed"] is False),
    ("update", "POST", "/mutate", review(_update), 200, lambda a: a["response"]["allowed"] and "patch" not in a["response"]),
    ("denied", "POST", "/mutate", review(_reserved), 200, lambda a: a["response"]["allowed"] is False),
    ("not-json", "POST", "/mutate", b"{not json", 400, lambda a: "error" in a),
    ("no-uid", "POST", "/mutate", review(_no_uid), 400, lambda a: "uid" in a["error"]),
    ("deep", "POST", "/mutate", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"d","object":' + b"[" * 5000 + b"]" * 5000 + b"}}", 400, lambda a: "recursion" in a["error"]),
    ("not-found", "POST", "/nope", b"{}", 404, lambda a: "error" in a),
    ("method", "GET", "/mutate", None, 405, lambda a: "error" in a),
]
# Weights: mostly valid traffic, every invalid kind present.
WEIGHTS = {"mutate": 10, "mutate-secret": 2, "dry-run": 2, "validate": 3, "update": 2, "denied": 1,
           "not-json": 1, "no-uid": 1, "deep": 1, "not-found": 1, "method": 1}
SCHEDULE = [k for k in KINDS for _ in range(WEIGHTS[k[0]])]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.refused = 0
        self.by_kind = {}
        self.errors = []
        self.latencies = []

    def add(self, kind, outcome, latency=None, error=None):
        with self.lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            k = self.by_kind.setdefault(kind, {"ok": 0, "failed": 0, "refused": 0})
            k[outcome] += 1
            if latency is not None:
                self.latencies.append(latency)
            if error and len(self.errors) < 20:
                self.errors.append(f"{kind}: {error}")


def worker(i, args, ctx, stats, stop, deadline):
    host, port = args.host, args.port
    conn = None
    prev = None  # (kind, requests on this connection) for error messages
    on_conn = 0
    interval = args.concurrency / args.rate
    next_at = time.monotonic() + interval * i / args.concurrency
    n = i
    while not stop.is_set() and time.monotonic() < deadline:
        now = time.monotonic()
        if next_at > now:
            time.sleep(min(next_at - now, 0.2))
            continue
        next_at += interval
        kind, method, path, body, want, check = SCHEDULE[n % len(SCHEDULE)]
        n += args.concurrency
        fresh = args.fresh_every and n % args.fresh_every == 0
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=args.timeout)
            on_conn = 0
            try:
                conn.connect()
            except (ConnectionRefusedError, ConnectionResetError) as e:
                stats.add(kind, "refused", error=None)
                conn = None
                continue
            except Exception as e:  # handshake failure: the request was never sent
                stats.add(kind, "failed", error=f"connect: {e!r}")
                conn = None
                continue
        started = time.monotonic()
        on_conn += 1
        where = f"request {on_conn} on its connection, after {prev}"
        prev = kind
        try:
            headers = {"content-type": "application/json"}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            latency = time.monotonic() - started
            if resp.status != want:
                stats.add(kind, "failed", latency, f"status {resp.status}, want {want}: {data[:200]!r}")
            else:
                answer = json.loads(data)
                if check(answer):
                    stats.add(kind, "ok", latency)
                else:
                    stats.add(kind, "failed", latency, f"unexpected answer {data[:200]!r}")
            if resp.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
            # The server closed an idle keep-alive connection just as we reused it (graceful
            # shutdown closes idle connections). The request was not processed: retry once on
            # a new connection, as the API server's client does.
            conn.close()
            conn = None
            stats.add(kind, "refused" if args.retry_closed else "failed", error=f"closed: {e!r} ({where})")
        except Exception as e:
            conn.close()
            conn = None
            stats.add(kind, "failed", time.monotonic() - started, f"{e!r} ({where})")
    if conn is not None:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cacert", required=True)
    p.add_argument("--rate", type=float, default=100.0, help="requests per second in all")
    p.add_argument("--duration", type=float, default=60.0, help="seconds")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--fresh-every", type=int, default=20, help="every Nth request on a new connection (0: never)")
    p.add_argument("--retry-closed", action="store_true", help="count a keep-alive connection the server closed with no answer as refused, not failed (graceful shutdown closes idle HTTP/1.1 connections; a request written at that moment was never read: faults.sh checks that against the server's log)")
    p.add_argument("--stop-file", help="stop early when this file exists")
    p.add_argument("--progress", type=float, default=0, help="print counts every N seconds")
    args = p.parse_args()

    ctx = ssl.create_default_context(cafile=args.cacert)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    stats = Stats()
    stop = threading.Event()
    started = time.monotonic()
    deadline = started + args.duration
    threads = [threading.Thread(target=worker, args=(i, args, ctx, stats, stop, deadline), daemon=True)
               for i in range(args.concurrency)]
    for t in threads:
        t.start()
    last = started
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if args.stop_file and os.path.exists(args.stop_file):
            stop.set()
        if args.progress and time.monotonic() - last >= args.progress:
            last = time.monotonic()
            print(f"  t={last - started:.0f}s ok={stats.ok} failed={stats.failed} refused={stats.refused}", flush=True)
    for t in threads:
        t.join()
    took = time.monotonic() - started
    lat = sorted(stats.latencies)
    pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else None
    summary = {
        "seconds": round(took, 1),
        "sent": stats.ok + stats.failed,
        "ok": stats.ok,
        "failed": stats.failed,
        "refused": stats.refused,
        "rate": round((stats.ok + stats.failed) / took, 1) if took else 0,
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
        "by_kind": stats.by_kind,
        "errors": stats.errors,
    }
    print(json.dumps(summary), flush=True)
    sys.exit(1 if stats.failed else 0)


if __name__ == "__main__":
    main()
