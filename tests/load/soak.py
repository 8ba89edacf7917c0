#!/usr/bin/env python3
# The soak test (issue 17): mixed endpoints and image sizes at about 80% of measured capacity,
# against the real binary on loopback. Python 3 standard library only.
#  1. Starts blurd with its default flags on port 0 (BLURD_SOAK_ARGS adds flags).
#  2. Capacity: 15 s closed loop, 2 x cores connections back to back, over the same mix and with
#     the same client, so that the Python client's own CPU is part of what is measured.
#  3. Soak: open loop for SECONDS, requests started at a fixed rate of SOAK_LOAD (default 0.8) x
#     capacity whether or not earlier ones have answered, on 32 keep-alive connections. The mix:
#     /blur (sigma 3 and 12 with method=auto, sigma 5 with deriche), /convert, /contrast,
#     /variance, /convolve, on 1080p and small photographs from tests/data, half as multipart
#     uploads (field `image`) and half as raw bodies. Latency runs from a request's scheduled
#     start, so a client that falls behind cannot hide the server's slowness.
# Checks (exit 1 when one fails):
#  - errors = 0: any status but 200, a connection error, or no answer within 10 s of the
#    scheduled start;
#  - blurd's VmRSS is flat after the first minute: at 60 s, in the middle and at the end, the
#    arrivals pause until every request has been answered, and VmRSS is read 1 s later (blurd
#    returns freed memory within 0.1 s of going idle); the middle and end readings are at most
#    10% or 4 MB above the one at 60 s, whichever is more (an 8 MB process swings by 2 MB of
#    allocator pages that come back). Under load, VmRSS is whatever the open-loop bursts hold in the
#    queue (its median is reported, not checked);
#  - the client kept up: requests started at >= 95% of the target rate;
#  - blurd exits with status 0 on SIGTERM at the end.
# Prints RESULT lines: capacity, the soak totals, p50/p99 per endpoint, RSS at start/60 s/middle/end.
#   tests/load/soak.py [SECONDS (default 180)] [BLURD_BIN (default build/blurd)]
# CI form (about 3.5 minutes in all): make soak SOAK_SECONDS=180
# Long form: make soak SOAK_SECONDS=3600, or python3 tests/load/soak.py 3600 build/blurd
# SOAK_LOAD=3 python3 tests/load/soak.py 60 paces at 3x capacity: the error check must fail.
# Run it on an otherwise idle machine: CPU taken by anything else is capacity blurd loses mid-run.
import http.client
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
IMAGES = [("photo_1080p.jpg", "image/jpeg"), ("gray_1080p.jpg", "image/jpeg"),
          ("rocket.jpg", "image/jpeg"), ("astronaut.png", "image/png"), ("camera.png", "image/png")]
PATHS = ["/blur?sigma=3", "/blur?sigma=12", "/blur?sigma=5&method=deriche",
         "/convert?format=jpeg&quality=85", "/contrast", "/variance?radius=7",
         "/convolve?kernel=sharpen"]
BOUNDARY = "blurd-soak-boundary"
TIMEOUT = 10.0      # seconds from the scheduled start to the whole answer
CONNECTIONS = 32    # open-loop connections
RSS_SLACK_KB = 4096  # idle VmRSS may grow this much, or 10%, whichever is more
CAPACITY_SECONDS = 15


def load_mix():
    """A fixed, seeded sequence of (endpoint, path, body, content type)."""
    bodies = []
    for name, ctype in IMAGES:
        with open(os.path.join(ROOT, "tests", "data", name), "rb") as f:
            data = f.read()
        form = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="{name}"'
                f'\r\nContent-Type: {ctype}\r\n\r\n').encode() + data + f'\r\n--{BOUNDARY}--\r\n'.encode()
        bodies.append((form, f"multipart/form-data; boundary={BOUNDARY}"))
        bodies.append((data, ctype))
    rng = random.Random(17)
    mix = []
    for _ in range(997):
        path = rng.choice(PATHS)
        body, ctype = rng.choice(bodies)
        mix.append((path.split("?")[0], path, body, ctype))
    return mix


class Client:
    def __init__(self, port, mix):
        self.port, self.mix = port, mix
        self.lock = threading.Lock()
        self.latency = {}   # endpoint -> [ms] of the 200s
        self.errors = {}    # endpoint -> count
        self.kinds = {}     # "status 503", "timeout", "ConnectionResetError", ... -> count
        self.started = 0    # requests sent before the end of the run
        self.lags = []      # ms from the scheduled start to the send
        self.end = float("inf")

    def error(self, endpoint, kind):
        with self.lock:
            self.errors[endpoint] = self.errors.get(endpoint, 0) + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def one(self, conn, i, sched):
        """Sends request i, scheduled at sched (monotonic); returns the connection to reuse."""
        endpoint, path, body, ctype = self.mix[i % len(self.mix)]
        start = time.monotonic()
        if start - sched > TIMEOUT:  # queued here past its deadline: never sent
            self.error(endpoint, "timeout")
            return conn
        with self.lock:
            self.started += start < self.end
            self.lags.append((start - sched) * 1e3)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("POST", path, body, {"Content-Type": ctype})
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            self.error(endpoint, "timeout" if isinstance(e, TimeoutError) else type(e).__name__)
            return None
        ms = (time.monotonic() - sched) * 1e3
        if resp.status != 200:
            self.error(endpoint, f"status {resp.status}")
        elif ms > TIMEOUT * 1e3:
            self.error(endpoint, "timeout")
        else:
            with self.lock:
                self.latency.setdefault(endpoint, []).append(ms)
        return conn

    def closed_loop(self, n, seconds):
        """n connections back to back for seconds; returns the 200s per second."""
        end = time.monotonic() + seconds
        counter = iter(range(10**9))

        def loop():
            conn = None
            while time.monotonic() < end:
                conn = self.one(conn, next(counter), time.monotonic())
            if conn:
                conn.close()
        threads = [threading.Thread(target=loop) for _ in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(map(len, self.latency.values())) / (time.monotonic() - t0)

    def open_loop(self, rate, seconds, t0, first=0):
        """Starts requests first, first + 1, ... of the mix at rate per second for seconds from
        t0, on CONNECTIONS threads; returns when all have been answered, with the count."""
        jobs = queue.Queue()
        self.end = t0 + seconds

        def worker():
            conn, last = None, 0.0
            while (job := jobs.get()) is not None:
                if conn and time.monotonic() - last > 10:  # stay clear of blurd's idle --timeout
                    conn.close()
                    conn = None
                conn = self.one(conn, *job)
                last = time.monotonic()
            if conn:
                conn.close()
        threads = [threading.Thread(target=worker) for _ in range(CONNECTIONS)]
        for t in threads:
            t.start()
        i = 0
        while (sched := t0 + i / rate) < self.end:
            time.sleep(max(0.0, sched - time.monotonic()))
            jobs.put((first + i, sched))
            i += 1
        for _ in threads:
            jobs.put(None)
        for t in threads:
            t.join()
        return i


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))] if values else 0.0


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def start(binary, args, out, err):
    """Starts blurd on a free port of 127.0.0.1, its output to the temporary files out and err;
    returns the process and the port, or exits when it does not start."""
    blurd = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", "0"] + args, stdout=out,
                             stderr=err)
    for _ in range(100):
        text = open(out.name).read()
        if "http://127.0.0.1:" in text:
            return blurd, int(text.split("http://127.0.0.1:")[1].split()[0].rstrip("/"))
        time.sleep(0.1)
    blurd.kill()
    sys.exit(f"FAIL: blurd did not start: {open(err.name).read()[-2000:]}")


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 180
    binary = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build", "blurd")
    load = float(os.environ.get("SOAK_LOAD", "0.8"))
    wall0 = time.monotonic()
    out = tempfile.NamedTemporaryFile(prefix="blurd-soak-out.")
    err = tempfile.NamedTemporaryFile(prefix="blurd-soak-err.")
    blurd, port = start(binary, os.environ.get("BLURD_SOAK_ARGS", "").split(), out, err)
    fails = []

    # 1. capacity, closed loop over the same mix with the same client
    mix = load_mix()
    conc = 2 * len(os.sched_getaffinity(0))
    cap = Client(port, mix)
    capacity = cap.closed_loop(conc, CAPACITY_SECONDS)
    print(f"RESULT capacity rps={capacity:.1f} connections={conc} seconds={CAPACITY_SECONDS} "
          f"errors={sum(cap.errors.values())}", flush=True)
    if cap.errors:
        fails.append(f"errors while measuring capacity: {cap.kinds}")
    if capacity <= 0:
        blurd.kill()
        sys.exit("FAIL: no request succeeded while measuring capacity")

    # 2. the soak, open loop at load x capacity in three stretches (to 60 s, to the middle, to
    # the end), each followed by a pause for the idle VmRSS reading
    rate = load * capacity
    client = Client(port, mix)
    first = min(60.0, seconds / 3)
    marks = [first, seconds / 2, seconds]
    idle = [rss_kb(blurd.pid)]  # kB: at the start, then after each stretch
    busy = []                   # kB, every 0.5 s under load
    under_load, finished = threading.Event(), threading.Event()

    def sampler():
        while not finished.wait(0.5):
            if under_load.is_set():
                busy.append(rss_kb(blurd.pid))
    threading.Thread(target=sampler, daemon=True).start()
    cpu0, loaded, scheduled, done = sum(os.times()[:2]), 0.0, 0, 0.0
    for mark in marks:
        under_load.set()
        t0 = time.monotonic()
        scheduled += client.open_loop(rate, mark - done, t0, scheduled)
        loaded += time.monotonic() - t0
        under_load.clear()
        done = mark
        time.sleep(1.0)
        idle.append(rss_kb(blurd.pid))
        print(f"  t={mark:.0f}s idle rss_kb={idle[-1]} ok={sum(map(len, client.latency.values()))} "
              f"errors={sum(client.errors.values())}", flush=True)
    finished.set()
    cpu = (sum(os.times()[:2]) - cpu0) / loaded * 100
    achieved = client.started / seconds
    ok = sum(map(len, client.latency.values()))
    errors = sum(client.errors.values())
    kinds = "".join(f" {k.replace(' ', '_')}={v}" for k, v in sorted(client.kinds.items()))
    print(f"RESULT soak seconds={seconds:.0f} load={load} target_rps={rate:.1f} "
          f"achieved_rps={achieved:.1f} requests={scheduled} ok={ok} errors={errors}{kinds} "
          f"lag_p99_ms={pct(client.lags, 99):.1f} client_cpu_pct={cpu:.0f}")
    for endpoint in sorted({p.split("?")[0] for p in PATHS}):
        lat = client.latency.get(endpoint, [])
        print(f"RESULT endpoint={endpoint} ok={len(lat)} errors={client.errors.get(endpoint, 0)} "
              f"p50_ms={pct(lat, 50):.1f} p99_ms={pct(lat, 99):.1f} max_ms={max(lat, default=0):.1f}")
    if errors:
        fails.append(f"{errors} errors at {load} x capacity")
    if achieved < 0.95 * rate:
        fails.append(f"the client started {achieved:.1f} requests/s, below 95% of {rate:.1f}")

    # A leak raises every idle reading; what the queue holds under load does not reach them.
    r_start, r_first, r_mid, r_end = idle
    growth = (max(r_mid, r_end) / r_first - 1) * 100 if r_first else float("inf")
    print(f"RESULT rss_kb start={r_start} at_{first:.0f}s={r_first} middle={r_mid} end={r_end} "
          f"growth_after_{first:.0f}s_pct={growth:.1f} under_load_p50={pct(busy, 50)} "
          f"under_load_max={max(busy, default=0)}")
    if growth > 10 and max(r_mid, r_end) - r_first > RSS_SLACK_KB:
        fails.append(f"VmRSS grew {growth:.1f}% after {first:.0f} s (limit 10% or "
                     f"{RSS_SLACK_KB} kB)")

    if blurd.poll() is not None:
        fails.append(f"blurd exited during the run with {blurd.returncode}")
    else:
        blurd.send_signal(signal.SIGTERM)
        try:
            if blurd.wait(60) != 0:
                fails.append(f"blurd exited with {blurd.returncode} on SIGTERM")
        except subprocess.TimeoutExpired:
            blurd.kill()
            fails.append("blurd did not exit within 60 s of SIGTERM")
    if fails:  # blurd's own lines, without the access log's JSON lines
        with open(err.name, errors="replace") as f:
            print("".join([l for l in f if not l.startswith("{")][-10:]), end="")
    for f in fails:
        print(f"FAIL: {f}")
    print(f"soak: {'FAIL' if fails else 'PASS'} in {time.monotonic() - wall0:.0f} s wall")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
