#!/usr/bin/env python3
"""Mixed-load stress test for blurd (issue 34): the server must never die, and every request whose
client waited for it must get a 200, a 4xx, or a 503 with Retry-After, never a reset or an empty
reply.

It starts the binary (optionally under a wrapper such as compute-sanitizer), waits for /readyz, then
for --seconds runs --conns client threads over raw sockets (HTTP/1.1 keep-alive, as wrk does) that
mix every image endpoint (/blur with and without PSNR and with regions, /convert, /sharpen,
/variance, /contrast, /convolve, /pixelate) over JPEG, PNG, WebP, HEIC and AVIF uploads (HEIC and
AVIF whole, cut short and damaged), and clients that misbehave: they disconnect mid-upload (with
a FIN or a reset), right after sending the request (a close, a reset, or a half-close, which the
server takes as the client leaving), or mid-response, and time out. A burst thread repeats issue
34's crash scenario on purpose: --burst connections each send a slow request (/sharpen or
/variance), and all of them close at once while the requests are in flight (wrk's end
of a run). At the end the server is stopped with SIGTERM and must exit 0 within --stop-within
seconds (1 s; not checked under --wrap); its stderr is scanned for
sanitizer reports (AddressSanitizer, UBSan's "runtime error", compute-sanitizer's error summary).

Python 3 standard library only (the GPU machine has no wrk). Exit status 0 on a pass, 1 on a
failure, with one summary line per check. Usage:
  tests/stress/stress.py --bin build/blurd --seconds 120 -- --backend gpu
  tests/stress/stress.py --wrap "compute-sanitizer --tool memcheck" --bin ... -- --backend gpu
"""
import argparse
import collections
import os
import random
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

# (path and query, weight): every image endpoint, PSNR on and off, regions, slow and fast ones.
REQUESTS = [
    ("/blur?sigma=12", 8),
    ("/blur?sigma=12&psnr=false", 8),
    ("/blur?sigma=3&method=yvv_blocked", 3),
    ("/blur?sigma=30&regions=10,10,256,256;400,300,256,256;1000,500,256,256;0,0,64,64&feather=8", 4),
    ("/blur?sigma=30&regions=100,100,300,200&psnr=false", 3),
    ("/blur?sigma=5&format=png&compression=1", 1),
    ("/convert", 8),
    ("/convert?format=webp&quality=80", 1),
    ("/blur?sigma=8&format=webp", 2),  # smooth: blurd's VP8 encoder (its first pass on the GPU)
    ("/sharpen?sigma=2&amount=1", 6),
    ("/sharpen?sigma=2&amount=1&psnr=false&luma=true", 2),
    ("/variance?radius=7", 2),
    ("/variance?radius=3&method=welford&compression=1", 1),
    ("/contrast", 4),
    ("/convolve?kernel=edge", 3),
    ("/convolve?kernel=gauss3&format=jpeg", 2),
    ("/pixelate?block=16", 3),
    ("/pixelate?block=24&regions=10,10,256,256;400,300,256,256&feather=8&format=webp", 1),
    ("/variance?radius=5&format=raw", 1),
    ("/blur?sigma=4&colorspace=srgb", 1),
]

# (file, weight): JPEG (baseline, progressive, gray, EXIF-rotated, damaged), PNG and WebP.
IMAGES = [
    ("photo_1080p.jpg", 12),
    ("gray_1080p.jpg", 3),
    ("rocket.jpg", 3),
    ("progressive.jpg", 2),
    ("orient6.jpg", 1),
    ("truncated.jpg", 1),
    ("cmyk.jpg", 1),
    ("camera.png", 2),
    ("coffee.png", 2),
    ("rgba16.png", 1),
    ("gray16.png", 1),
    ("lossy.webp", 2),
    ("alpha_lossless.webp", 1),
    # HEIC (the GPU's video decoders take the first four) and AVIF, whole and damaged: cut short
    # ("cut:") or with bytes of the coded pictures overwritten ("bad:"; damage())
    ("heic_grid_rot.heic", 2),
    ("heic10.heic", 1),
    ("heic444.heic", 1),
    ("heic10_444.heic", 1),
    ("heic_alpha.heic", 1),
    ("heic_shared.heic", 1),
    ("cut:heic_grid_rot.heic", 1),
    ("bad:heic_grid_rot.heic", 1),
    ("bad:heic444.heic", 1),
    ("avif10_alpha.avif", 1),
    ("bad:avif10_alpha.avif", 1),
]

# (behaviour, weight): how a client treats one request.
BEHAVIOURS = [
    ("normal", 60),
    ("close_after_request", 10),  # sends the whole request, closes without reading
    ("close_mid_upload", 7),      # sends part of the body, closes
    ("close_mid_response", 7),    # reads a few bytes of the answer, closes
    ("client_timeout", 6),        # gives up after 20 to 400 ms, closes
    ("reset_after_request", 5),   # sends the whole request, closes with RST (SO_LINGER 0)
    ("half_close_after_request", 4),  # sends the whole request, shuts its sending side
    ("slow_upload", 2),           # trickles the body in pieces, then waits for the answer
    ("multipart", 3),             # a multipart/form-data upload, answer read
]

# Small files only (--small), for a server under valgrind.
SMALL = [("orient6.jpg", 3), ("gray.jpg", 2), ("truncated.jpg", 1), ("red_square.png", 2),
         ("palette.png", 1), ("alpha_lossy.webp", 1)]

SLOW = ["/sharpen?sigma=2&amount=1", "/variance?radius=7", "/sharpen?sigma=3&amount=2&luma=true"]


def pick(items, rng):
    total = sum(w for _, w in items)
    x = rng.uniform(0, total)
    for item, w in items:
        x -= w
        if x <= 0:
            return item
    return items[-1][0]


def mime(name):
    return {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp", "heic": "image/heic",
            "avif": "image/avif"}[name.rsplit(".", 1)[1]]


def damage(name, data):
    """The file IMAGES names: "cut:F" is F's first 60%, "bad:F" has 64 bytes of every 4 KiB of its
    second half (the coded pictures, after the boxes) overwritten, the same bytes each run."""
    kind, _, _ = name.rpartition(":")
    if kind == "cut":
        return data[:len(data) * 6 // 10]
    if kind == "bad":
        b, rng = bytearray(data), random.Random(len(data))
        for at in range(len(b) // 2, len(b) - 64, 4096):
            b[at:at + 64] = bytes(rng.randrange(256) for _ in range(64))
        return bytes(b)
    return data


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.count = collections.Counter()
        self.failures = []

    def add(self, key, n=1):
        with self.mu:
            self.count[key] += n

    def fail(self, what):
        with self.mu:
            self.count["failures"] += 1
            if len(self.failures) < 50:
                self.failures.append(what)


def request_bytes(path, body, ctype, port, close=False):
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
    return head.encode(), body


def multipart(body, name):
    b = "----stress%08x" % random.getrandbits(32)
    pre = (f"--{b}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{name}\"\r\n"
           f"Content-Type: {mime(name)}\r\n\r\n").encode()
    return pre + body + f"\r\n--{b}--\r\n".encode(), f"multipart/form-data; boundary={b}"


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body


def read_response(sock, deadline):
    """Reads one HTTP/1.1 response with a Content-Length. Raises on reset, EOF or timeout."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("empty reply" if not buf else "connection closed in the headers")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if not m:
        raise ValueError("bad status line %r" % lines[0][:80])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(min(1 << 20, n - len(rest)))
        if not chunk:
            raise EOFError("connection closed in the body (%d of %d bytes)" % (len(rest), n))
        rest += chunk
    return Response(int(m.group(1)), headers, rest[:n])


def check(stats, path, name, r):
    """A waited-for answer: 200 with a body, a 4xx, or a 503 with Retry-After."""
    stats.add("status_%d" % r.status)
    if r.status == 200 and r.body:
        stats.add("ok")
    elif 400 <= r.status < 500:
        stats.add("4xx")
    elif r.status == 503 and "retry-after" in r.headers:
        stats.add("503")
    else:
        stats.fail("%s %s: status %d, %d bytes, headers %s" %
                   (path, name, r.status, len(r.body), sorted(r.headers)))


class Client:
    def __init__(self, args, images, stats, stop_at, seed):
        self.args, self.images, self.stats, self.stop_at = args, images, stats, stop_at
        self.rng = random.Random(seed)
        self.sock = None

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.args.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def drop(self, rst=False):
        if self.sock:
            if rst:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def one(self):
        rng, st = self.rng, self.stats
        path, name = pick(REQUESTS, rng), pick(IMAGES, rng)
        how = pick(BEHAVIOURS, rng)
        body, ctype = self.images[name], mime(name)
        if how == "multipart":
            body, ctype = multipart(body, name)
        head, body = request_bytes(path, body, ctype, self.args.port)
        st.add("sent")
        st.add("how_" + how)
        if not self.sock:
            self.sock = self.connect()
        s = self.sock
        s.settimeout(10)
        if how == "close_mid_upload":
            s.sendall(head + body[: rng.randint(0, max(0, len(body) - 1))])
            return self.drop(rst=rng.random() < 0.5)
        if how == "slow_upload":
            s.sendall(head)
            for i in range(0, len(body), max(1, len(body) // 5)):
                s.sendall(body[i: i + max(1, len(body) // 5)])
                time.sleep(rng.uniform(0.01, 0.1))
        else:
            s.sendall(head + body)
        if how in ("close_after_request", "reset_after_request"):
            time.sleep(rng.choice([0, 0, rng.uniform(0, 0.3)]))
            return self.drop(rst=how == "reset_after_request")
        if how == "half_close_after_request":
            time.sleep(rng.choice([0, rng.uniform(0, 0.3)]))
            s.shutdown(socket.SHUT_WR)
            try:  # the server closes it, with the answer when it was already on its way
                read_response(s, time.monotonic() + self.args.request_timeout)
                st.add("half_close_answered")
            except EOFError:
                st.add("half_close_cancelled")
            except OSError:
                pass
            return self.drop()
        if how == "client_timeout":
            try:
                read_response(s, time.monotonic() + rng.uniform(0.02, 0.4))
                st.add("timeout_answered")
            except (OSError, EOFError, ValueError):
                pass
            return self.drop(rst=rng.random() < 0.3)
        if how == "close_mid_response":
            s.settimeout(self.args.request_timeout)
            try:
                s.recv(rng.randint(1, 200))
            except OSError:
                pass
            return self.drop()
        r = read_response(s, time.monotonic() + self.args.request_timeout)
        check(st, path, name, r)
        if r.headers.get("connection", "").lower() == "close" or rng.random() < 0.05:
            self.drop()

    def run(self):
        while time.monotonic() < self.stop_at:
            try:
                self.one()
            except (OSError, EOFError, ValueError) as e:
                self.stats.fail("client: %s: %s" % (type(e).__name__, e))
                self.drop()
        self.drop()


def burst(args, images, stats, stop_at, seed):
    """Issue 34's end of a wrk run: many slow requests in flight, every connection closed at once."""
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        socks = []
        for _ in range(args.burst):
            try:
                s = socket.create_connection(("127.0.0.1", args.port), timeout=10)
                name = rng.choice(args.burst_images)
                head, body = request_bytes(rng.choice(SLOW), images[name], mime(name), args.port)
                s.sendall(head + body)
                socks.append(s)
            except OSError as e:
                stats.fail("burst: %s" % e)
        time.sleep(rng.uniform(0.02, 0.5))
        rst = rng.random() < 0.5
        for s in socks:
            if rst:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        stats.add("bursts")
        stats.add("burst_closed", len(socks))
        time.sleep(rng.uniform(0.1, 1.0))


def http_get(port, path, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return read_response(s, time.monotonic() + timeout)
    finally:
        s.close()


def server_pid(proc, binary):
    """The pid of the server itself: proc's, or under a wrapper (compute-sanitizer, valgrind, env)
    the descendant that runs binary, so that SIGTERM reaches the server and not the wrapper."""
    todo, name = [proc.pid], os.path.basename(binary)
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode("utf-8", "replace")
            if os.path.basename(argv0) == name:
                return pid
            for task in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return proc.pid


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# AddressSanitizer, UBSan, ThreadSanitizer, compute-sanitizer, valgrind.
SANITIZER = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                       r"WARNING: ThreadSanitizer|ERROR SUMMARY: [1-9]|========= (Invalid|Program hit)|"
                       r"==\d+== (Invalid (read|write|free)|Process terminating)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/blurd")
    ap.add_argument("--wrap", default="", help="a command line the server runs under")
    ap.add_argument("--data", default="tests/data")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("STRESS_SECONDS", 120)))
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--burst", type=int, default=64, help="connections per burst close (0: none)")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--request-timeout", type=float, default=60,
                    help="seconds a waiting client allows for an answer")
    ap.add_argument("--log", default="", help="the server's stderr (default: a temporary file)")
    ap.add_argument("--stop-within", type=float, default=1.0,
                    help="seconds SIGTERM may take to end the server (not checked under --wrap)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--small", action="store_true", help="small images only (for valgrind)")
    ap.add_argument("--only", default="",
                    help="only the images whose names contain this (\"heic\": HEIC whole and damaged)")
    ap.add_argument("server_args", nargs="*", help="after --: blurd's own arguments")
    args = ap.parse_args()
    global IMAGES
    if args.small:
        IMAGES = SMALL
    if args.only:
        IMAGES = [(n, w) for n, w in IMAGES if args.only in n]
    args.burst_images = [n for n, _ in IMAGES if n != "truncated.jpg" and ":" not in n] \
        if args.small or args.only else \
        ["photo_1080p.jpg", "photo_1080p.jpg", "coffee.png", "lossy.webp"]
    images = {}
    for name, _ in IMAGES:
        with open(os.path.join(args.data, name.rpartition(":")[2]), "rb") as f:
            images[name] = damage(name, f.read())
    args.port = free_port()
    log_path = args.log or "/tmp/stress-blurd-%d.log" % os.getpid()
    cmd = shlex.split(args.wrap) + [args.bin, "--bind", "127.0.0.1", "--port", str(args.port),
                                   "--access-log", "off"] + args.server_args
    print("stress: seed %d, %s" % (args.seed, " ".join(cmd)), flush=True)
    log = open(log_path, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    ready = None
    while time.monotonic() - t0 < args.ready_timeout and proc.poll() is None:
        try:
            if http_get(args.port, "/readyz", 2).status == 200:
                ready = time.monotonic() - t0
                break
        except (OSError, EOFError, ValueError):
            pass
        time.sleep(0.1)
    if ready is None:
        print("stress: FAIL: not ready after %.0f s (exit %s); log %s" %
              (time.monotonic() - t0, proc.poll(), log_path))
        proc.kill()
        return 1
    print("stress: ready after %.1f s; %d clients and a burst of %d for %.0f s" %
          (ready, args.conns, args.burst, args.seconds), flush=True)
    stats = Stats()
    stop_at = time.monotonic() + args.seconds
    threads = [threading.Thread(target=Client(args, images, stats, stop_at, args.seed + i).run)
               for i in range(args.conns)]
    if args.burst > 0:
        threads.append(threading.Thread(target=burst, args=(args, images, stats, stop_at, args.seed)))
    for t in threads:
        t.daemon = True
        t.start()
    died = None
    while any(t.is_alive() for t in threads):
        if proc.poll() is not None and died is None:
            died = proc.returncode
            stats.fail("the server exited with %d during the load" % died)
        time.sleep(0.2)
    # After the load: the server still answers, then stops cleanly on SIGTERM.
    alive = proc.poll() is None
    after = None
    if alive:
        try:
            after = http_get(args.port, "/readyz", 30).status
        except (OSError, EOFError, ValueError) as e:
            stats.fail("/readyz after the load: %s" % e)
        os.kill(server_pid(proc, args.bin), signal.SIGTERM)
    t_term = time.monotonic()
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "killed after 120 s"
    stop_s = time.monotonic() - t_term
    log.close()
    with open(log_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    reports = [line for line in text.splitlines() if SANITIZER.search(line)]
    c = stats.count
    print("stress: %d sent; answered: %d ok, %d 4xx, %d 503 with Retry-After; %d bursts closed %d "
          "connections in flight" % (c["sent"], c["ok"], c["4xx"], c["503"], c["bursts"],
                                     c["burst_closed"]))
    print("stress: behaviours %s" % ", ".join("%s %d" % (k[4:], v) for k, v in sorted(c.items())
                                             if k.startswith("how_")))
    print("stress: statuses %s" % ", ".join("%s %d" % (k[7:], v) for k, v in sorted(c.items())
                                           if k.startswith("status_")))
    for f in stats.failures[:20]:
        print("stress: failure: %s" % f)
    for line in reports[:20]:
        print("stress: sanitizer: %s" % line)
    quick = bool(args.wrap) or stop_s <= args.stop_within
    ok = alive and died is None and after == 200 and rc == 0 and quick and not reports and \
        c["failures"] == 0 and c["ok"] > 0
    print("stress: %s: server %s, /readyz after load %s, exit %s after %.2f s, %d failures, %d "
          "sanitizer lines; log %s" % ("PASS" if ok else "FAIL", "alive" if alive else
                                       "died (%s)" % died, after, rc, stop_s, c["failures"],
                                       len(reports), log_path), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
