#!/usr/bin/env python3
"""Start-up and stop times of blurd (issue 34): how long until the port answers (/healthz) and
until /readyz says ready; how long a SIGTERM sent during the warm-up takes to end the process, and
with which status; and how much slower each worker's first requests are than the ones after.

  tests/stress/startup.py --bin build/blurd --runs 3 --sigterm 0.3,1,2 --first 4 -- --backend gpu

--rounds-for 2 goes on with rounds for 2 s after ready and reports their spread: each later
worker's start shows as a slow round (docs/performance.md).

Prints one line per measurement and a last summary line ("startup: port ... ready ... sigterm ...
first/rest ..."); exits 1 when a limit given (--max-port, --max-ready, --max-sigterm, --max-first)
is passed. Python 3 standard library only.
"""
import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stress import free_port  # noqa: E402 (the stress test's, beside this file)


def get(port, path, timeout=2.0):
    """The status of GET path, or None when no answer came."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return None
    try:
        s.settimeout(timeout)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = s.recv(64)
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
    except (OSError, ValueError, IndexError):
        return None
    finally:
        s.close()


def start(args, log):
    port = free_port()
    cmd = [args.bin, "--bind", "127.0.0.1", "--port", str(port), "--access-log", "off"]
    return subprocess.Popen(cmd + args.server_args, stdout=log, stderr=subprocess.STDOUT), port


def wait_for(proc, port, path, t0, limit):
    """Seconds from t0 until GET path answers 200 (any answer when path is /healthz), or None."""
    while time.monotonic() - t0 < limit and proc.poll() is None:
        st = get(port, path, 1.0)
        if st is not None and (st == 200 or path == "/healthz"):
            return time.monotonic() - t0
        time.sleep(0.005)
    return None


def stop(proc, limit=60):
    """Sends SIGTERM; returns (exit status, seconds it took)."""
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    return rc, time.monotonic() - t


def post(port, path, body, ctype, timeout=60):
    """Seconds one POST took to its full answer, and the status."""
    t = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        return time.monotonic() - t, int(data.split(b" ", 2)[1])
    finally:
        s.close()


def first_requests(args, port, workers):
    """Rounds of `workers` concurrent requests right after ready, back to back: args.first of them,
    and more until args.rounds_for seconds have passed. Round 1 meets each worker's first job (as
    far as the queue spreads them). Returns each round's median, in ms."""
    with open(os.path.join(args.data, "photo_1080p.jpg"), "rb") as f:
        body = f.read()
    medians = []
    t_ready = time.monotonic()
    while len(medians) < args.first or time.monotonic() - t_ready < args.rounds_for:
        times, lock = [], threading.Lock()

        def one():
            dt, st = post(port, args.path, body, "image/jpeg")
            with lock:
                times.append(dt if st == 200 else float("nan"))

        ts = [threading.Thread(target=one) for _ in range(workers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        medians.append(statistics.median(times) * 1e3)
    return medians


def workers_of(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        import json
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        return body.get("workers_ready", body["workers"])  # those taking jobs at ready
    except (OSError, ValueError, KeyError, IndexError):
        return 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/blurd")
    ap.add_argument("--data", default="tests/data")
    ap.add_argument("--runs", type=int, default=3, help="starts timed to ready")
    ap.add_argument("--sigterm", default="0.3,1,2",
                    help="seconds after the port answers at which a SIGTERM is sent, comma-separated")
    ap.add_argument("--first", type=int, default=4, help="rounds of first requests (0: none)")
    ap.add_argument("--rounds-for", type=float, default=0,
                    help="go on with rounds until this many seconds after ready (the later "
                    "workers' starts), and report their spread")
    ap.add_argument("--path", default="/blur?sigma=12")
    ap.add_argument("--limit", type=float, default=120, help="seconds to wait for ready")
    ap.add_argument("--log", default="/tmp/startup-blurd.log")
    ap.add_argument("--max-port", type=float, default=0)
    ap.add_argument("--max-ready", type=float, default=0)
    ap.add_argument("--max-sigterm", type=float, default=0)
    ap.add_argument("--max-first", type=float, default=0, help="largest first/rest ratio")
    ap.add_argument("server_args", nargs="*")
    args = ap.parse_args()
    log = open(args.log, "ab")
    ports, readies, stops, fails = [], [], [], []
    ratio = None
    for run in range(args.runs):
        t0 = time.monotonic()
        proc, port = start(args, log)
        p = wait_for(proc, port, "/healthz", t0, args.limit)
        r = wait_for(proc, port, "/readyz", t0, args.limit)
        if p is None or r is None:
            fails.append("run %d: no answer (port %s, ready %s, exit %s)" % (run, p, r, proc.poll()))
            proc.kill()
            proc.wait()
            continue
        ports.append(p)
        readies.append(r)
        line = "startup: run %d: port answers after %.2f s, ready after %.2f s" % (run, p, r)
        if run == 0 and args.first > 0:
            meds = first_requests(args, port, workers_of(port))
            rest = statistics.median(meds[1:]) if len(meds) > 1 else meds[0]
            ratio = meds[0] / rest
            line += "; %s rounds: medians %s ms, first/rest %.2f" % (
                args.path, " ".join("%.1f" % m for m in meds[:args.first]), ratio)
            if args.rounds_for > 0:
                srt, med = sorted(meds), statistics.median(meds)
                line += ("; %d rounds in %.1f s: median %.1f ms, 95th percentile %.1f, largest "
                         "%.1f, %d over twice the median" % (
                             len(meds), args.rounds_for, med, srt[int(0.95 * (len(srt) - 1))],
                             srt[-1], sum(m > 2 * med for m in meds)))
        rc, dt = stop(proc)
        line += "; SIGTERM when ready: exit %d after %.2f s" % (rc, dt)
        print(line, flush=True)
    for at in [float(x) for x in args.sigterm.split(",") if x]:
        t0 = time.monotonic()
        proc, port = start(args, log)
        p = wait_for(proc, port, "/healthz", t0, args.limit)
        time.sleep(max(0.0, at - (time.monotonic() - t0 - (p or 0))))
        warming = get(port, "/readyz") == 503
        rc, dt = stop(proc)
        stops.append((at, rc, dt, warming))
        print("startup: SIGTERM %.2f s after the port answered (%s): exit %d after %.2f s" %
              (at, "warming" if warming else "ready", rc, dt), flush=True)
    bad = list(fails)
    if args.max_port and (not ports or max(ports) > args.max_port):
        bad.append("port answers after %s s > %s" % (max(ports) if ports else None, args.max_port))
    if args.max_ready and (not readies or max(readies) > args.max_ready):
        bad.append("ready after %s s > %s" % (max(readies) if readies else None, args.max_ready))
    for at, rc, dt, _ in stops:
        if args.max_sigterm and (rc != 0 or dt > args.max_sigterm):
            bad.append("SIGTERM at %.2f s: exit %d after %.2f s" % (at, rc, dt))
    if args.max_first and (ratio is None or ratio > args.max_first):
        bad.append("first/rest %s > %s" % (ratio, args.max_first))
    print("startup: port %s s; ready %s s; SIGTERM during warm-up %s; first/rest %s; %s" % (
        "/".join("%.2f" % x for x in ports), "/".join("%.2f" % x for x in readies),
        " ".join("exit %d in %.2f s" % (rc, dt) for _, rc, dt, _ in stops),
        "%.2f" % ratio if ratio is not None else "-", "FAIL: " + "; ".join(bad) if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
