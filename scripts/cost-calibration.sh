#!/bin/sh
# Measures what each request costs the server in CPU time (user + system, all its threads) over
# the parameter space, fits the cost model's constants to the measurements, and writes them as
# the two tables the cost functions read (--max-cost's estimates): the codecs' terms (decoders
# and encoders, by format) as formats/cost_table.h, which the format files' decode_ns and
# encode_ns read, the rest (the request, the filters) as api/ops/cost_table.h.
#
#   sh scripts/cost-calibration.sh [BLURD [TABLE [FORMATS_TABLE]]]
#       (default build/blurd, api/ops/cost_table.h, formats/cost_table.h)
#
# It starts BLURD --backend cpu on 127.0.0.1 and sends it requests one at a time, every image a
# file in a temporary folder: noise (the slowest content for the codecs) and, for the codecs,
# smooth noise (blurred at sigma 3; for 16-bit PNG, widened from 8 bits), from 128x128 to
# 16000x1000 and 5000x5000, 8 and 16 bits, gray to RGBA, stored PNGs and their JPEG and WebP; for
# the HEIC, AVIF, JPEG XL, TIFF and GIF decoders, tests/data/photo_1080p.jpg and a 12 MP mosaic
# of it (bench/heic_load.sh's), RGB and with an alpha ramp, made into those formats by Debian's
# encoders as tests/data/make-formats.sh does (heif-enc through tests/data/heif-grid.py, avifenc,
# cjxl; Pillow under PYTHON, default /usr/bin/python3, for TIFF and GIF). A request's cost is the
# growth of the server's utime + stime, its waited-for children's included (/proc/PID/stat),
# across it: the mean over as many requests as MIN_CPU seconds (0.3) take, the first left out
# unless it takes a second or more. Every point is measured in each of ROUNDS passes (2) and
# their mean taken, so that what else the machine runs weighs less. Each term is a least-squares
# fit, in relative error and with no negative constant, of the model's formula (mirrored below
# from api/ops/ and formats/) to its points, what is known of them already (the request, or the
# same image's /convert?format=png&compression=0) counted as known; each fit prints its constants
# and the range of model / measured over its points. The terms and the points: docs/operations.md
# ("Limits and costs") and docs/engineering-notes.md ("Cost model, measured over the parameter
# space"). About 23 minutes a pass on two cores. COST_CACHE=FILE keeps the measurements in FILE
# and reuses them on the next run (to refit, or to add a pass); ONLY=NAME runs the request's step
# (the others count its terms as known) and the one whose name ends in NAME (io, decode, encode,
# formats: the HEIC, AVIF, JPEG XL, TIFF and GIF terms, blur, sharpen, variance, others), prints
# each term it measured beside the tables' current value, and writes no table unless WRITE=1 (then
# both, the terms not measured as the tables hold them). The formats' table
# is put through clang-format (the repository's style, as make fmt does) when it is installed.
set -eu
BIN=${1:-build/blurd}
TABLE=${2:-api/ops/cost_table.h}
FORMATS_TABLE=${3:-formats/cost_table.h}
[ -x "$BIN" ] || { echo "cost-calibration: $BIN not found (make first)" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$BIN" "$TABLE" "$FORMATS_TABLE" "$ROOT" <<'PY'
import ast, http.client, json, math, os, re, shutil, struct, subprocess, sys, tempfile, time, zlib

BIN, TABLE, FORMATS_TABLE, ROOT = sys.argv[1:5]
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")  # with Pillow and numpy
MIN_CPU = float(os.environ.get("MIN_CPU", "0.3"))
CACHE = os.environ.get("COST_CACHE")
TCK = os.sysconf("SC_CLK_TCK")

def cache_bytes(level, default):
    """The size of the CPU's data or unified cache of this level, from sysfs."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            lv = open(f"{base}/{d}/level").read().strip()
            kind = open(f"{base}/{d}/type").read().strip()
            size = open(f"{base}/{d}/size").read().strip()
        except OSError:
            continue
        if lv == str(level) and kind != "Instruction" and size.endswith("K"):
            return int(size[:-1]) * 1024
    return default

L3 = cache_bytes(3, 1 << 25)
TMP = tempfile.mkdtemp(prefix="blurd-cost-")
ROUNDS = int(os.environ.get("ROUNDS", "2"))
cache = json.load(open(CACHE)) if CACHE and os.path.exists(CACHE) else {}
cache = {k: v if isinstance(v, list) else [v] for k, v in cache.items()}

def log(*a):
    print(*a, file=sys.stderr, flush=True)

# ---- images: stored PNGs of noise, or of noise blurred at sigma 3 ("smooth") ----

def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

def noise_png(path, w, h, c, depth):
    row = w * c * depth // 8
    blob = os.urandom(row * h)
    raw = b"".join(b"\0" + blob[y * row:(y + 1) * row] for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 0)
    z = zlib.compressobj(0)
    data = z.compress(raw) + z.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b""))

def widen(src, dst):
    """The stored 8-bit PNG src (blurd's, or noise_png's) as 16 bits, each sample times 257."""
    b = open(src, "rb").read()
    at, idat = 8, b""
    while at < len(b):
        n, t = struct.unpack(">I4s", b[at:at + 8])
        if t == b"IHDR":
            w, h, ct = struct.unpack(">II", b[at + 8:at + 16]) + (b[at + 17],)
        if t == b"IDAT":
            idat += b[at + 8:at + 8 + n]
        at += 12 + n
    c = {0: 1, 4: 2, 2: 3, 6: 4}[ct]
    raw, row, out, prev = zlib.decompress(idat), w * c, bytearray(), bytearray(w * c)
    for y in range(h):
        f, line = raw[y * (row + 1)], bytearray(raw[y * (row + 1) + 1:(y + 1) * (row + 1)])
        for i in range(row):
            a, up = line[i - c] if i >= c else 0, prev[i]
            ul = prev[i - c] if i >= c else 0
            p = a + up - ul
            paeth = a if abs(p - a) <= abs(p - up) and abs(p - a) <= abs(p - ul) else \
                up if abs(p - up) <= abs(p - ul) else ul
            line[i] = (line[i] + [0, a, up, (a + up) // 2, paeth][f]) & 255
        out += b"\0" + bytes(v for x in line for v in (x, x))
        prev = line
    ihdr = struct.pack(">IIBBBBB", w, h, 16, ct, 0, 0, 0)
    z = zlib.compressobj(0)
    with open(dst, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", z.compress(bytes(out)) + z.flush()) + chunk(b"IEND", b""))

def cli(verb, args, src, dst):
    subprocess.run([BIN, verb, "--backend", "cpu"] + args + [src, dst], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def tool(cmd):
    """Runs one of the encoders that make the new formats' files."""
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except FileNotFoundError:
        sys.exit(f"cost-calibration: {cmd[0]} not found (apt-get install libheif-examples "
                 "libavif-bin libjxl-tools python3-pil python3-numpy: tests/data/make-formats.sh)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"cost-calibration: {' '.join(a for a in cmd if chr(10) not in a)}: "
                 f"{e.stderr.decode(errors='replace')[-300:]}")

# tests/data/photo_1080p.jpg as a stored PNG of w x h (its middle; larger, mirrored into a mosaic as
# bench/heic_load.sh makes its 12 MP picture), with c == 4 an alpha ramp along the diagonal
PHOTO = """
import sys
import numpy as np
from PIL import Image
src, out, w, h, c = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
a = np.asarray(Image.open(src).convert("RGB"))
if w <= a.shape[1] and h <= a.shape[0]:
    y, x = (a.shape[0] - h) // 2, (a.shape[1] - w) // 2
    a = a[y:y + h, x:x + w]
else:
    row = np.concatenate([a if i % 2 == 0 else a[:, ::-1] for i in range(-(-w // a.shape[1]))], axis=1)[:, :w]
    a = np.concatenate([row if i % 2 == 0 else row[::-1] for i in range(-(-h // a.shape[0]))], axis=0)[:h]
if c == 4:
    ramp = (np.add.outer(np.arange(h), np.arange(w)) * 255) // (h + w - 2)
    a = np.dstack([a, ramp.astype(np.uint8)])
Image.fromarray(np.ascontiguousarray(a)).save(out, compress_level=0)
"""

# TIFF (Pillow: none, Deflate, LZW) and GIF (Pillow: 256 colours, or 255 and the pixels of alpha
# under 128 transparent)
PILLOW = """
import sys
import numpy as np
from PIL import Image
src, out, fmt = sys.argv[1:]
im = Image.open(src)
if fmt.startswith("tiff"):
    im.save(out, "TIFF", compression={"tiff": None, "tiffzip": "tiff_deflate", "tifflzw": "tiff_lzw"}[fmt])
elif im.mode == "RGBA":
    p = im.convert("RGB").quantize(255)
    px = np.asarray(p).copy()
    px[np.asarray(im)[..., 3] < 128] = 255
    q = Image.fromarray(px, "P")
    pal = p.getpalette()[:765]
    q.putpalette(pal + [0] * (768 - len(pal)))
    q.save(out, "GIF", transparency=255)
else:
    im.quantize(256).save(out, "GIF")
"""

# The new formats' encoders: (the PNG, the file, the name) -> the command.
ENCODERS = {
    "heicgrid": lambda i, o, f: [PYTHON, f"{ROOT}/tests/data/heif-grid.py", "--tile", "512",
                                 "--quality", "50", i, o],
    "heic90": lambda i, o, f: ["heif-enc", "-q", "90", "-o", o, i],
    "avif24": lambda i, o, f: ["avifenc", "-j", str(os.cpu_count()), "-y", "420", "--min", "24",
                               "--max", "24", i, o],
    "avif10": lambda i, o, f: ["avifenc", "-j", str(os.cpu_count()), "-y", "444", "--min", "10",
                               "--max", "10", i, o],
    "jxl75": lambda i, o, f: ["cjxl", i, o, "-q", "75"],
    "jxlll": lambda i, o, f: ["cjxl", i, o, "-d", "0"],
    **{k: lambda i, o, f: [PYTHON, "-c", PILLOW, i, o, f] for k in ["tiff", "tiffzip", "tifflzw", "gif"]},
}

def image(w, h, c=3, depth=8, kind="noise", fmt="png"):
    """The path of a w x h image of c channels: kind noise, smooth or photo; fmt png (stored), png6
    (blurd's level 6), jpeg50, jpeg100, webp50, webp100, webpll (lossless); for the new formats,
    Debian's encoders: heicgrid (heif-enc's 512x512 tiles at quality 50 in a grid, as phones write
    them: tests/data/heif-grid.py), heic90 (heif-enc's one picture at 90), avif24 and avif10
    (avifenc, 4:2:0 at quantizer 24 and 4:4:4 at 10), jxl75 and jxlll (cjxl -q 75, lossless),
    tiff, tiffzip, tifflzw, gif (Pillow)."""
    name = f"{TMP}/{kind}-{w}x{h}x{c}-{depth}"
    if not os.path.exists(name + ".png"):
        if kind == "noise":
            noise_png(name + ".png", w, h, c, depth)
        elif kind == "photo":
            tool([PYTHON, "-c", PHOTO, f"{ROOT}/tests/data/photo_1080p.jpg", name + ".png",
                  str(w), str(h), str(c)])
        elif depth == 16:  # smooth noise of 8 bits widened: each sample's byte twice
            widen(image(w, h, c, 8, kind), name + ".png")
        else:
            cli("blur", ["--method", "yvv", "--sigma", "3", "--psnr", "false", "--compression", "0"],
                image(w, h, c, depth), name + ".png")
    if fmt == "png":
        return name + ".png"
    src, out = name + ".png", f"{name}.{fmt}"
    if not os.path.exists(out):
        if fmt in ENCODERS:
            tool(ENCODERS[fmt](src, out, fmt))
        else:
            cli("convert", {"png6": ["--format", "png", "--compression", "6"],
                            "jpeg50": ["--format", "jpeg", "--quality", "50"],
                            "jpeg100": ["--format", "jpeg", "--quality", "100"],
                            "webp50": ["--format", "webp", "--quality", "50"],
                            "webp90": ["--format", "webp", "--quality", "90"],
                            "webp100": ["--format", "webp", "--quality", "100"],
                            "webpll": ["--format", "webp", "--lossless", "true"]}[fmt], src, out)
    return out

def shape(path):
    """width, height, channels, depth, bytes of the file, bytes decoded."""
    m = re.search(r"-(\d+)x(\d+)x(\d+)-(\d+)\.", path)
    w, h, c, d = map(int, m.groups())
    return w, h, c, d, os.path.getsize(path), w * h * c * d // 8

# ---- the server and its CPU time ----

class Server:
    def __init__(self):
        self.log = open(f"{TMP}/server.log", "w")
        self.p = subprocess.Popen([BIN, "--backend", "cpu", "--bind", "127.0.0.1", "--port", "0",
                                   "--access-log", "off", "--max-cost", "0", "--max-body", "1G",
                                   "--max-buffered", "4G", "--request-timeout", "3600",
                                   "--timeout", "3600"],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            time.sleep(0.05)
            m = re.search(r"listening on http://[^:]*:(\d+)", open(f"{TMP}/server.log").read())
            if m:
                self.port = int(m.group(1))
                break
        else:
            sys.exit("cost-calibration: the server did not start")
        # glibc's malloc keeps a freed buffer's size as its threshold for mmap (up to 32 MB):
        # after a request with 27 MB buffers, those up to that size come from its heap without
        # page faults, as in a server that has served such an image
        warm = open(image(3000, 3000, 3), "rb").read()
        for _ in range(2):
            self.post(BASE, warm)

    def cpu(self):
        """utime + stime of all its threads and of the children it waited for (a codec may run
        in one)."""
        f = open(f"/proc/{self.p.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TCK

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        c.request("POST", path, body=body, headers={"Content-Type": "application/octet-stream"})
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status != 200:
            sys.exit(f"cost-calibration: {path}: {r.status} {data[:300]!r}")

    def stop(self):
        self.p.terminate()
        self.p.wait()

srv = None
BASE = "/convert?format=png&compression=0"  # a stored PNG: the cheapest answer

PASS = 0  # the pass over every point (ROUNDS of them)

def measure(path, img):
    """Seconds of CPU of one request path with the image at img: in each pass, the mean over as
    many requests as MIN_CPU seconds take (the first left out unless it takes a second or more:
    it grows the allocator's heap); over the passes so far, their mean."""
    key = f"{path} {os.path.basename(img)}"
    runs = cache.setdefault(key, [])
    if len(runs) <= PASS:
        body = open(img, "rb").read()
        t0 = srv.cpu()
        srv.post(path, body)
        first = srv.cpu() - t0
        n, t0 = 0, srv.cpu()
        while first < 1 and srv.cpu() - t0 < MIN_CPU and n < 400:
            srv.post(path, body)
            n += 1
        runs.append(first if n == 0 else (srv.cpu() - t0) / n)
        log(f"  {runs[-1] * 1e3:10.3f} ms  {key}")
        if CACHE:
            json.dump(cache, open(CACHE, "w"), indent=0)
    return sum(runs[:PASS + 1]) / len(runs[:PASS + 1])

def base(img):
    """ns of CPU of BASE with the image at img: its request, upload, decode and answer."""
    return measure(BASE, img) * 1e9

# ---- least squares, in relative error ----

def fit(rows):
    """rows: (features, y, known): a request measured at y ns, of which known ns are the terms
    fitted already. The c >= 0 minimising sum ((known + f . c - y) / y)^2; a term that comes
    out negative is dropped and the rest fitted again."""
    k = len(rows[0][0])
    keep = list(range(k))
    while keep:
        n = len(keep)
        a = [[0.0] * n for _ in keep]
        b = [0.0] * n
        for f, y, known in rows:
            w = 1 / y ** 2
            for i, p in enumerate(keep):
                b[i] += w * f[p] * (y - known)
                for j, q in enumerate(keep):
                    a[i][j] += w * f[p] * f[q]
        for i in range(n):  # Gauss-Jordan with partial pivoting
            piv = max(range(i, n), key=lambda r: abs(a[r][i]))
            a[i], a[piv], b[i], b[piv] = a[piv], a[i], b[piv], b[i]
            for r in range(n):
                if r != i and a[i][i]:
                    m = a[r][i] / a[i][i]
                    a[r] = [x - m * z for x, z in zip(a[r], a[i])]
                    b[r] -= m * b[i]
        c = [b[i] / a[i][i] if a[i][i] else 0 for i in range(n)]
        if all(x >= 0 for x in c):
            break
        keep.pop(min(range(n), key=lambda i: c[i]))
    out = [0.0] * k
    for i, p in enumerate(keep):
        out[p] = c[i]
    return out

def fitted(name, rows, names):
    """Fits rows, logs the constants and the worst point, returns the constants."""
    c = fit(rows)
    ratios = [(known + sum(a * b for a, b in zip(f, c))) / y for f, y, known in rows]
    log(f"{name}: " + ", ".join(f"{n} {x:.4g}" for n, x in zip(names, c)) +
        f"; model / measured {min(ratios):.2f} to {max(ratios):.2f} over {len(rows)} points")
    return c

# ---- the model's features, as api/ops/ computes them ----

def radius(sigma, truncate):
    return max(1, math.ceil(truncate * sigma - 1e-9))

def clipped_taps(r, n):
    """Taps a line of n samples takes on average from a kernel of radius r, those past the
    ends folded onto the edge samples (fir.c's loops)."""
    s = n * (n - 1) / 2 if r >= n - 1 else r * (r + 1) / 2 + (n - 1 - r) * r
    return 1 + 2 * s / n

def strip_taps(r, n):
    """image.c's strips of doubles: the same, but one multiply per symmetric pair of taps away
    from the edges."""
    return clipped_taps(r, n) - max(0, n - 2 * r) * r / n

def ramp(x, lo, hi):
    """0 up to lo, 1 from hi, linear in log x between."""
    return 0.0 if x <= lo else 1.0 if x >= hi else math.log(x / lo) / math.log(hi / lo)

def io_features(b):
    return [1, b, b * ramp(b, L3 / 8, L3)]

def fir_features(rx, ry, w, h):
    m = ramp(min(2 * ry + 1, h) * w * 8, L3 / 2, L3)  # the column pass's rows of 64-bit sums
    ty = clipped_taps(ry, h)
    return [1, clipped_taps(rx, w), ty * (1 - m), ty * m]

def sep_features(rx, ry):
    band = max(8 * ry, 64)  # sep.c's tiles: a band of rows filters 2 ry more along x
    return [1, (2 * rx + 2 * ry + 2) * (1 + 2 * ry / band)]

def strips_features(rx, ry, w, h):
    return [1, strip_taps(rx, w) + strip_taps(ry, h)]

def pyramid_taps(sigma, truncate=4):
    """Taps of the reduced Gaussian per sample along one axis: (2 r + 1) / k."""
    k = 1
    while 2 * k <= sigma / 3 and 2 * k <= 16:
        k *= 2
    sv = 0
    for a in range(-(k // 2), 2 * k - k // 2):
        d = abs(a - (k - 1) / 2)
        sv += (k - d if d < k else 0) * (a - (k - 1) / 2) ** 2
    low = math.sqrt((sigma * sigma - sv / (k * k)) / (k * k) - 0.25)
    return (2 * radius(low, truncate) + 1) / k

def samples(img):
    w, h, c, d, _, _ = shape(img)
    return w * h * c

def params(q):
    return dict(x.split("=", 1) for x in q.split("&"))

# ---- the measurements and the fits ----

T = {}  # the table: name -> value or list

def calibrate_io():
    log("the request: upload, decode of a stored PNG, a stored PNG written and sent")
    rows = []
    for w, h, c, d in [(8, 8, 3, 8), (64, 64, 3, 8), (256, 256, 3, 8), (512, 512, 3, 8),
                       (1000, 1000, 3, 8), (2000, 2000, 3, 8), (4000, 4000, 3, 8),
                       (2000, 2000, 1, 8), (2000, 2000, 4, 8), (1000, 1000, 3, 16),
                       (3000, 3000, 4, 8), (5000, 5000, 3, 8)]:
        img = image(w, h, c, d)
        rows.append((io_features(shape(img)[5]), base(img), 0))
    c = fitted("request", rows, ["ns", "ns/byte", "ns/byte out of cache"])
    T["REQUEST_NS"], T["IO_NS_BYTE"], T["IO_MEM_NS_BYTE"] = c

def io_ns(img):
    return sum(a * b for a, b in zip([T["REQUEST_NS"], T["IO_NS_BYTE"], T["IO_MEM_NS_BYTE"]],
                                     io_features(shape(img)[5])))

def calibrate_decode():
    log("decoders beyond a stored PNG's: per sample, per byte of the file, per pixel of alpha "
        "(WEBP lossy, WEBPLL lossless)")
    for fmt, variants in [("PNG", ["png6"]), ("JPEG", ["jpeg50", "jpeg100"]),
                          ("WEBP", ["webp50", "webp90", "webp100"]), ("WEBPLL", ["webpll"])]:
        rows = []
        for v in variants:
            for kind in ["noise", "smooth"]:
                for w, h, c in [(500, 500, 3), (1000, 1000, 3), (1000, 1000, 4), (1000, 1000, 1)]:
                    if fmt == "JPEG" and c == 4 or fmt.startswith("WEBP") and c == 1:
                        continue
                    img = image(w, h, c, 8, kind, v)
                    px = w * h
                    rows.append(([samples(img), shape(img)[4], px if c in (2, 4) else 0],
                                 base(img), io_ns(img)))
        c = fitted(f"decode {fmt}", rows, ["ns/sample", "ns/byte", "ns/alpha pixel"])
        for k, x in zip(["SAMPLE", "BYTE", "ALPHA"], c):
            T[f"DECODE_{fmt}_NS_{k}"] = x

def slowest(path, imgs, unit):
    """The largest ns per unit(img) over imgs that path costs beyond a stored PNG's answer."""
    return max(0.0, max((measure(path, i) * 1e9 - base(i)) / unit(i) for i in imgs))

def calibrate_encode():
    log("encoders beyond a stored PNG's, the slower of noise and smooth noise")
    imgs = [image(1000, 1000, 3, 8, k) for k in ["noise", "smooth"]]
    T["PNG_NS_BYTE"] = [slowest(f"/convert?format=png&compression={lv}", imgs, lambda i: shape(i)[5])
                        for lv in range(10)]
    log("png ns/byte by level: " + ", ".join(f"{x:.3g}" for x in T["PNG_NS_BYTE"]))
    wide = [image(1000, 1000, 3, 16, k) for k in ["noise", "smooth"]]
    T["PNG16_NS_BYTE"] = [slowest(f"/convert?format=png&compression={lv}", wide, lambda i: shape(i)[5])
                          for lv in range(10)]
    log("16-bit png ns/byte by level: " + ", ".join(f"{x:.3g}" for x in T["PNG16_NS_BYTE"]))
    T["JPEG_QUALITY"] = [1, 25, 50, 75, 89, 90, 95, 100]
    T["JPEG_NS_SAMPLE"] = [slowest(f"/convert?format=jpeg&quality={q}", imgs, samples)
                           for q in T["JPEG_QUALITY"]]
    log("jpeg ns/sample by quality: " + ", ".join(f"{x:.3g}" for x in T["JPEG_NS_SAMPLE"]))
    # lossy WebP's colour by effort and quality; its alpha plane (lossless, filtered at the
    # higher efforts) and lossless WebP by the image's size, as their cost a pixel falls with it
    T["WEBP_QUALITY"] = [1, 50, 90, 100]
    px = lambda i: shape(i)[0] * shape(i)[1]
    rgb = [image(w, w, 3, 8, k) for k in ["noise", "smooth"] for w in [512, 1024]]
    T["WEBP_NS_PIXEL"] = [[slowest(f"/convert?format=webp&effort={e}&quality={q}", rgb, px)
                           for q in T["WEBP_QUALITY"]] for e in range(7)]
    for e in range(7):
        log(f"webp effort {e} ns/pixel by quality: " + ", ".join(f"{x:.3g}" for x in T["WEBP_NS_PIXEL"][e]))
    T["WEBP_SIZES"] = [w * w for w in [256, 512, 1024, 2048]]
    T["WEBP_ALPHA_NS_PIXEL"] = []
    for e in range(7):
        line = []
        for w in [256, 512, 1024, 2048]:
            a = []
            for q in [1, 100]:
                path = f"/convert?format=webp&effort={e}&quality={q}"
                rgba, c3 = image(w, w, 4), image(w, w, 3)
                a.append((measure(path, rgba) * 1e9 - base(rgba) - measure(path, c3) * 1e9 + base(c3)) / (w * w))
            line.append(max(0.0, max(a)))
        T["WEBP_ALPHA_NS_PIXEL"].append(line)
        log(f"webp effort {e} alpha ns/pixel by size: " + ", ".join(f"{x:.3g}" for x in line))
    T["WEBP_LOSSLESS_NS_PIXEL"] = [
        slowest("/convert?format=webp&lossless=true", [image(w, w, c, 8, k) for k in ["noise", "smooth"]
                                                        for c in [3, 4]], px) for w in [256, 512, 1024, 2048]]
    log("webp lossless ns/pixel by size: " + ", ".join(f"{x:.4g}" for x in T["WEBP_LOSSLESS_NS_PIXEL"]))

def calibrate_formats():
    log("HEIC, AVIF, JPEG XL, TIFF and GIF decoders beyond a stored PNG's (the 1080p photograph, a "
        "12 MP mosaic of it, 1080p noise and smooth noise): per sample, per byte of the file, per "
        "pixel of alpha")
    hd, mp = (1920, 1080), (4032, 3024)
    for fmt, points in [("HEIC", [(hd, 3, "heicgrid"), (mp, 3, "heicgrid"), (hd, 3, "heic90")]),
                        ("AVIF", [(hd, 3, "avif24"), (mp, 3, "avif24"), (hd, 3, "avif10"), (hd, 4, "avif24")]),
                        ("JXL", [(hd, 3, "jxl75"), (mp, 3, "jxl75"), (hd, 4, "jxl75")]),
                        ("JXLLL", [(hd, 3, "jxlll"), (mp, 3, "jxlll"), (hd, 4, "jxlll")]),
                        ("TIFF", [(hd, 3, "tiff"), (mp, 3, "tiff"), (hd, 4, "tiff")]),
                        ("TIFFZ", [(hd, 3, "tiffzip"), (hd, 3, "tifflzw"), (mp, 3, "tifflzw"),
                                   (hd, 4, "tiffzip")]),
                        ("GIF", [(hd, 3, "gif"), (mp, 3, "gif"), (hd, 4, "gif")])]:
        rows = []
        # the photograph's; noise and smooth noise in the first variant (what separates the
        # samples' term from the bytes')
        for kind, (w, h), c, v in ([("photo",) + p for p in points] +
                                   [(k, hd, 3, points[0][2]) for k in ["noise", "smooth"]]):
            img = image(w, h, c, 8, kind, v)
            rows.append(([samples(img), shape(img)[4], w * h if c in (2, 4) else 0], base(img), io_ns(img)))
        terms = fitted(f"decode {fmt}", rows, ["ns/sample", "ns/byte", "ns/alpha pixel"])
        for k, x in zip(["SAMPLE", "BYTE", "ALPHA"], terms):
            T[f"DECODE_{fmt}_NS_{k}"] = x
    # 1024x1024: aom's cost a pixel grows from 512x512 to it (on noise 1.5 times at effort 4, twice at
    # 6), then holds (12 us a pixel at effort 6 on noise of 2000x2000)
    log("AVIF and JPEG XL encoders beyond a stored PNG's at the default quality, the slowest of noise, "
        "smooth noise and the photograph's middle")
    imgs = [image(1024, 1024, 3, 8, k) for k in ["noise", "smooth", "photo"]]
    px = lambda i: shape(i)[0] * shape(i)[1]
    for name, q in [("AVIF_NS_PIXEL", "format=avif"), ("JXL_NS_PIXEL", "format=jxl"),
                    ("JXL_LOSSLESS_NS_PIXEL", "format=jxl&lossless=true")]:
        T[name] = [slowest(f"/convert?{q}&effort={e}", imgs, px) for e in range(7)]
        log(f"{q} ns/pixel by effort: " + ", ".join(f"{x:.4g}" for x in T[name]))

def filter_rows(path, points, feat, per=samples):
    """Rows for fit() of path.format(q) on each point (q, w, h, c): the features per unit (a
    sample, or what per counts) times the units, over the stored PNG's request as known."""
    rows = []
    for q, w, h, c in points:
        img = image(w, h, c)
        n = per(img)
        rows.append(([x * n for x in feat(q, w, h)], measure(path.format(q), img) * 1e9, base(img)))
    return rows

def blur_rows(points, feat, path="/blur?{}&psnr=false&format=png&compression=0"):
    """Rows for fit() of /blur on each point (q, w, h, c): feat(q, w, h, c) gives the features
    of the whole request (per sample ones times the samples, per line ones times the lines)."""
    return [(feat(q, w, h, c), measure(path.format(q), image(w, h, c)) * 1e9, base(image(w, h, c)))
            for q, w, h, c in points]

BLUR = "/blur?{}&psnr=false&format=png&compression=0"

def sigmas(q):
    d = params(q)
    s = float(d.get("sigma", 0))
    return float(d.get("sigma_x", s)), float(d.get("sigma_y", s)), float(d.get("truncate", 4))

def pyramid_ops(sigma, n, truncate=4):
    """cpu_pyramid_line's multiply-adds along a line of n samples: the reduction by k over the
    line and the kernel's margin, the reduced Gaussian (symmetric pairs), the expansion."""
    k = 1
    while 2 * k <= sigma / 3 and 2 * k <= 16:
        k *= 2
    sv = 0
    for a in range(-(k // 2), 2 * k - k // 2):
        d = abs(a - (k - 1) / 2)
        sv += (k - d if d < k else 0) * (a - (k - 1) / 2) ** 2
    r = radius(math.sqrt((sigma * sigma - sv / (k * k)) / (k * k) - 0.25), truncate)
    m = -(-n // k)
    return (m + 2 * (r + 1)) * 2 * k + (m + 2) * (r + 1) + 3 * n

def calibrate_blur():
    log("blur: per sample, per tap, per line (a row or a column of a channel)")
    def fir(q, w, h, c):
        sx, sy, t = sigmas(q)
        return [x * w * h * c for x in fir_features(radius(sx, t), radius(sy, t), w, h)]
    pts = [(f"method=fir&sigma_x={s}&sigma_y=0.5", 1000, 1000, 3) for s in [2, 16, 64]]
    pts += [("method=fir&sigma_x=300&sigma_y=0.5&truncate=8", 1000, 500, 3)]
    pts += [(f"method=fir&sigma_x=0.5&sigma_y={s}", 1000, 1000, 3) for s in [4, 16, 64]]
    pts += [("method=fir&sigma_x=0.5&sigma_y=150&truncate=8", 1000, 1000, 1),
            ("method=fir&sigma_x=0.5&sigma_y=150&truncate=8", 2000, 1000, 1),
            ("method=fir&sigma=8", 256, 256, 3), ("method=fir&sigma=8", 1000, 1000, 4)]
    rows = blur_rows(pts, fir)
    c = fitted("fir", [(f[:3], y, k) for f, y, k in rows], ["ns/sample", "ns/row tap", "ns/column tap"])
    mem = [("method=fir&sigma_x=0.5&sigma_y=150&truncate=8", w, 1000, 1) for w in [8000, 16000]]
    mem += [("method=fir&sigma_x=0.5&sigma_y=100&truncate=8", 4000, 2000, 1)]
    rows = blur_rows(mem, fir)
    cm = fitted("fir, the column pass out of the cache",
                [(f[3:], y, k + sum(a * b for a, b in zip(f, c))) for f, y, k in rows], ["ns/column tap"])
    T["FIR_NS_SAMPLE"], T["FIR_ROW_NS_TAP"], T["FIR_COL_NS_TAP"] = c
    T["FIR_COL_MEM_NS_TAP"] = cm[0]

    def per(feat):  # per-sample features feat(q, w, h), a line term and an alpha term
        return lambda q, w, h, c: ([x * w * h * c for x in feat(q, w, h)] +
                                   [(w + h) * c, w * h if c in (2, 4) else 0])
    def sep(q, w, h):
        sx, sy, t = sigmas(q)
        return sep_features(radius(sx, t), radius(sy, t))
    pts = [(f"method=separable&sigma={s}", w, w, 3) for s in [1, 4, 8, 16] for w in [1000, 2000]]
    pts += [("method=separable&sigma=4", 256, 256, 3), ("method=separable&sigma=8", 1000, 1000, 4),
            ("method=separable&sigma=1", 256, 256, 4)]
    T["SEP_NS_SAMPLE"], T["SEP_NS_TAP"], T["SEP_NS_LINE"], T["SEP_NS_ALPHA"] = fitted(
        "separable, single precision tiles", blur_rows(pts, per(sep)),
        ["ns/sample", "ns/tap", "ns/line", "ns/pixel with alpha"])

    def strips(q, w, h):
        sx, sy, t = sigmas(q)
        return strips_features(radius(sx, t), radius(sy, t), w, h)
    pts = [(f"method=separable&sigma={s}", w, w, 3) for s in [20, 50] for w in [1000, 2000]]
    pts += [(f"method=separable&sigma={s}&truncate=8", 1000, 1000, 3) for s in [100, 300]]
    pts += [("method=separable&sigma_x=0.5&sigma_y=50&truncate=8", 250, 8000, 3),
            ("method=separable&sigma=30", 1000, 1000, 4), ("method=separable&sigma=20", 256, 256, 3),
            ("method=separable&sigma=20", 2000, 2000, 4)]
    T["STRIPS_NS_SAMPLE"], T["STRIPS_NS_TAP"], T["STRIPS_NS_LINE"], T["STRIPS_NS_ALPHA"] = fitted(
        "separable, strips of doubles", blur_rows(pts, per(strips)),
        ["ns/sample", "ns/tap", "ns/line", "ns/pixel with alpha"])

    # the exact reference (image.c's measure()): the strips' taps at truncate 4, and its own
    # base per sample (the error sums, the rounding into the image) and per line
    pts = [(f"method=separable&sigma={s}", w, w, c) for s, w, c in
           [(1, 1000, 3), (4, 1000, 3), (12, 1000, 3), (40, 1000, 3), (100, 1000, 3),
            (12, 2000, 3), (12, 1000, 4), (4, 256, 3), (1, 256, 4), (8, 2000, 4), (2, 3000, 4),
            (12, 4000, 3)]]
    rows = blur_rows(pts, lambda q, w, h, c: [w * h * c, (w + h) * c, w * h if c in (2, 4) else 0,
                                              w * h * c * ramp(w * h * c, L3 / 8, L3),
                                              w * h * c * strips_features(radius(sigmas(q)[0], 4),
                                                                          radius(sigmas(q)[1], 4), w, h)[1]],
                     "/blur?{}&psnr=true&format=png&compression=0")
    (T["REFERENCE_NS_SAMPLE"], T["REFERENCE_NS_LINE"], T["REFERENCE_NS_ALPHA"],
     T["REFERENCE_MEM_NS_SAMPLE"]) = fitted(
        "the exact reference", [(f[:4], y, k + T["STRIPS_NS_TAP"] * f[4]) for f, y, k in rows],
        ["ns/sample", "ns/line", "ns/pixel with alpha", "ns/sample out of cache"])

    for m in ["yvv", "deriche", "yvv2way"]:
        pts = [(f"method={m}&sigma={s}", w, w, 3) for s in [2, 20, 100] for w in [256, 1000, 2000]]
        pts += [(f"method={m}&sigma=8", 4000, 4000, 3), (f"method={m}&sigma=8", 1000, 1000, 4),
                (f"method={m}&sigma=8", 2000, 2000, 4), (f"method={m}&sigma=8", 256, 256, 4)]
        T[f"{m.upper()}_NS_SAMPLE"], T[f"{m.upper()}_NS_LINE"], T[f"{m.upper()}_NS_ALPHA"] = fitted(
            m, blur_rows(pts, per(lambda q, w, h: [1])), ["ns/sample", "ns/line", "ns/pixel with alpha"])

    pts = [(f"method=pyramid&sigma={s}", w, w, 3) for s in [8, 24, 64, 150, 300] for w in [1000, 2000]]
    pts += [("method=pyramid&sigma=64", 256, 256, 3), ("method=pyramid&sigma=64", 1000, 1000, 4),
            ("method=pyramid&sigma=300", 256, 256, 3), ("method=pyramid&sigma=24", 2000, 2000, 4)]
    feat = lambda q, w, h, c: [w * h * c, c * (h * pyramid_ops(sigmas(q)[0], w) + w * pyramid_ops(sigmas(q)[1], h)),
                               (w + h) * c, w * h if c in (2, 4) else 0]
    T["PYRAMID_NS_SAMPLE"], T["PYRAMID_NS_OP"], T["PYRAMID_NS_LINE"], T["PYRAMID_NS_ALPHA"] = fitted(
        "pyramid", blur_rows(pts, feat), ["ns/sample", "ns/multiply-add", "ns/line", "ns/pixel with alpha"])

def blur_model_ns(method, s, w, h, c):
    """ns of /blur?method&sigma=s, psnr=false, on a w x h x c image by the table so far."""
    r = radius(s, 4)
    n, lines, alpha = w * h * c, (w + h) * c, w * h if c in (2, 4) else 0
    m = "SEP" if method == "separable" else method.upper()
    per = T["SEP_NS_TAP"] * sep_features(r, r)[1] if method == "separable" else 0
    return n * (T[f"{m}_NS_SAMPLE"] + per) + lines * T[f"{m}_NS_LINE"] + alpha * T[f"{m}_NS_ALPHA"]

def region_boxes(regions, w, h, reach, feather=0):
    """The regions' boxes (blur.c's cut: width, height) and whether a box reads pixels that an
    earlier region's blend changes (then the input is copied first)."""
    boxes = []
    for x, y, rw, rh in regions:
        r = [max(0, x), max(0, y), min(w, x + rw), min(h, y + rh)]
        b = [max(0, r[0] - reach) // 16 * 16, max(0, r[1] - reach) // 16 * 16]
        b += [min(w, r[2] + reach) - b[0], min(h, r[3] + reach) - b[1]]
        boxes.append((b, r))
    overlap = False
    for i, (b, r) in enumerate(boxes):
        x0, y0 = max(r[0] - feather, b[0]), max(r[1] - feather, b[1])
        x1, y1 = min(r[2] + feather, b[0] + b[2]), min(r[3] + feather, b[1] + b[3])
        for q, _ in boxes[i + 1:]:
            overlap |= q[0] < x1 and x0 < q[0] + q[2] and q[1] < y1 and y0 < q[1] + q[3]
    return [(b[2], b[3]) for b, _ in boxes], overlap

def calibrate_regions_sharpen():
    log("regions: per sample of the boxes beyond their blur, per region, per sample copied")
    rows = []
    for n, s, w, c, side, f in [(64, 2, 1000, 4, 1000, 0), (64, 8, 2000, 3, 250, 0), (16, 20, 2000, 3, 500, 0),
                                (8, 4, 2000, 3, 100, 0), (1, 2, 1000, 3, 1000, 0), (32, 8, 3000, 3, 300, 0),
                                (16, 20, 2000, 3, 200, 16), (8, 8, 3000, 4, 300, 32),
                                (8, 2, 3000, 4, 3000, 0)]:
        img = image(w, w, c)
        regions = [((i * 397) % (w - side + 1), (i * 211) % (w - side + 1), side, side) for i in range(n)]
        q = ";".join(",".join(map(str, r)) for r in regions)
        boxes, overlap = region_boxes(regions, w, w, radius(s, 4) + 16 + f, f)
        y = measure(BLUR.format(f"method=yvv&sigma={s}&feather={f}&regions={q}"), img) * 1e9
        blur = sum(blur_model_ns("yvv", s, bw, bh, c) for bw, bh in boxes)
        rows.append(([sum(bw * bh * c for bw, bh in boxes), n, samples(img) if overlap else 0,
                      sum(bw * bh * c * ramp(bw * bh * c, L3 / 8, L3) for bw, bh in boxes)], y,
                     base(img) + blur))
    T["REGION_NS_SAMPLE"], T["REGION_NS"], T["REGION_COPY_NS_SAMPLE"], T["REGION_MEM_NS_SAMPLE"] = fitted(
        "regions", rows, ["ns/box sample", "ns/region", "ns/sample copied", "ns/box sample out of cache"])
    rows = []
    for q, w, c in [("sigma=1&method=yvv", 1000, 3), ("sigma=2&method=yvv&luma=true", 1000, 3),
                    ("sigma=2&method=yvv", 2000, 4), ("sigma=5&method=yvv", 256, 3)]:
        img = image(w, w, c)
        y = measure(f"/sharpen?{q}&psnr=false&format=png&compression=0", img) * 1e9
        rows.append(([samples(img)], y, base(img) + blur_model_ns("yvv", float(params(q)["sigma"]), w, w, c)))
    T["UNSHARP_NS_SAMPLE"] = fitted("unsharp mask", rows, ["ns/sample"])[0]

VAR = "/variance?{}&psnr=false&format=raw"

def calibrate_variance():
    log("variance, ns per pixel (the map answered raw)")
    pixels = lambda i: shape(i)[0] * shape(i)[1]
    pts = [("method=exact&radius=7", w, w, 1) for w in [256, 1000, 2000]]
    pts += [("method=exact&radius=127", 1000, 1000, 1)]
    T["VAR_EXACT_NS_PIXEL"] = fitted("exact", filter_rows(VAR, pts, lambda q, w, h: [1], pixels),
                                     ["ns/pixel"])[0]
    pts = [("method=exact&radius=7", w, w, c) for w, c in [(1000, 3), (1000, 4), (2000, 3), (256, 3)]]
    rows = filter_rows(VAR, pts, lambda q, w, h: [1], pixels)
    T["VAR_LUMA_NS_PIXEL"] = fitted("luma of a colour image", [
        (f, y, k + T["VAR_EXACT_NS_PIXEL"] * f[0]) for f, y, k in rows], ["ns/pixel"])[0]
    win = lambda q: (2 * int(params(q)["radius"]) + 1) ** 2
    for m, radii in [("naive", [1, 7, 31, 80]), ("koenig", [1, 7, 31, 80]), ("welford", [1, 7, 31])]:
        pts = [(f"method={m}&radius={r}", w, w, 1) for r in radii for w in ([256, 500] if r > 31 else [500, 1000])]
        rows = filter_rows(VAR, pts, lambda q, w, h: [1, win(q)], pixels)
        T[f"VAR_{m.upper()}_NS_PIXEL"], T[f"VAR_{m.upper()}_NS_TAP"] = fitted(
            m, rows, ["ns/pixel", "ns/window pixel"])
    for m, radii in [("pairwise", [1, 15, 127]), ("threewise", [1, 15, 127])]:
        pts = [(f"method={m}&radius={r}", w, w, 1) for r in radii for w in [1000, 2000]]
        rows = filter_rows(VAR, pts, lambda q, w, h: [1, math.log2(int(params(q)["radius"]) + 1)], pixels)
        T[f"VAR_{m.upper()}_NS_PIXEL"], T[f"VAR_{m.upper()}_NS_LOG"] = fitted(
            m, rows, ["ns/pixel", "ns/doubling of the radius"])
    rows = []
    for w in [1000, 2000]:
        img = image(w, w, 1)
        y = measure("/variance?method=pairwise&radius=7&psnr=true&format=raw", img) * 1e9
        known = measure(VAR.format("method=pairwise&radius=7"), img) * 1e9
        rows.append(([w * w], y, known))
    T["VAR_PSNR_NS_PIXEL"] = fitted("variance's PSNR", rows, ["ns/pixel"])[0]

def calibrate_others():
    log("contrast, convolve, pixelate")
    pts = [(f"radius={r}", w, w, c) for r, w, c in [(1, 1000, 3), (50, 1000, 3), (127, 1000, 3),
                                                     (5, 1000, 1), (5, 1000, 4), (5, 2000, 3), (5, 256, 3)]]
    rows = filter_rows("/contrast?{}&format=png&compression=0", pts, lambda q, w, h: [1], lambda i: shape(i)[0] * shape(i)[1])
    chans = [shape(image(w, w, c))[2] for _, w, _, c in pts]
    rows = [([f[0], f[0] * ch], y, k) for (f, y, k), ch in zip(rows, chans)]
    T["CONTRAST_NS_PIXEL"], T["CONTRAST_NS_SAMPLE"] = fitted("contrast", rows, ["ns/pixel", "ns/sample"])
    # a Laplacian: -1 but the centre, which sums to 0; on noise its sums change sign at random,
    # the slowest case of the store's clamping (an all-ones kernel of the same size takes 0.6
    # of its time)
    kern = lambda k: "[" + ",".join(str(k * k - 1) if i == k * k // 2 else "-1" for i in range(k * k)) + "]"
    pts = [(f"kernel={kern(k)}", w, w, c) for k, w, c in [(3, 1000, 3), (9, 1000, 3), (15, 1000, 3),
                                                           (31, 500, 3), (31, 1000, 3), (15, 2000, 3),
                                                           (9, 1000, 4), (5, 256, 3), (9, 1000, 1)]]
    colour = lambda i: shape(i)[0] * shape(i)[1] * (shape(i)[2] - (shape(i)[2] in (2, 4)))
    ksq = lambda q: params(q)["kernel"].count(",") + 1
    T["CONV_NS_SAMPLE"], T["CONV_NS_TAP"] = fitted(
        "convolve, per colour sample", filter_rows("/convolve?{}&format=png&compression=0", pts,
                                                   lambda q, w, h: [1, ksq(q)], colour), ["ns/sample", "ns/tap"])
    pts = [(f"block={b}", w, w, c) for b, w, c in [(16, 1000, 3), (2, 1000, 3), (256, 2000, 3), (16, 1000, 4), (16, 256, 1)]]
    T["PIXELATE_NS_SAMPLE"] = fitted("pixelate", filter_rows("/pixelate?{}&format=png&compression=0", pts,
                                                             lambda q, w, h: [1]), ["ns/sample"])[0]
    # with regions: the mosaic of the regions grown by the feather, the input copied, every
    # block tested against every region
    rows = []
    for n, b, w, c, side, f in [(8, 2, 3000, 4, 300, 8), (64, 16, 2000, 3, 100, 0), (4, 8, 2000, 3, 800, 32),
                                (16, 2, 1000, 3, 50, 0)]:
        img = image(w, w, c)
        regions = [((i * 331) % (w - side + 1), (i * 173) % (w - side + 1), side, side) for i in range(n)]
        q = ";".join(",".join(map(str, r)) for r in regions)
        area = sum((side + 2 * f) ** 2 * c for _ in regions)
        blocks = (-(-w // b)) ** 2
        y = measure(f"/pixelate?block={b}&feather={f}&regions={q}&format=png&compression=0", img) * 1e9
        rows.append(([area, samples(img), blocks * n], y, base(img)))
    T["PIXELATE_REGION_NS_SAMPLE"], T["PIXELATE_COPY_NS_SAMPLE"], T["PIXELATE_NS_TEST"] = fitted(
        "pixelate's regions", rows, ["ns/region sample", "ns/sample copied", "ns/block and region"])

# ---- the table ----

# What each of the table's names means (the comment written above it).
DOC = [
    ("REQUEST_NS", "A request, whatever its image."),
    ("IO_NS_BYTE", "Per byte of the decoded image: the upload, the decode of a stored PNG, the "
                   "answer's buffers and a stored PNG of it written and sent; IO_MEM_NS_BYTE more "
                   "as the image grows from COST_L3_BYTES / 8 to COST_L3_BYTES (log-linear): its "
                   "buffers leave the cache and the allocator's heap (page faults)."),
    ("DECODE_PNG_NS_SAMPLE", "A decode beyond a stored PNG's, by format (WEBPLL: lossless WebP): per "
                             "sample, per byte of the file, per pixel with alpha."),
    ("PNG_NS_BYTE", "PNG's encode beyond a stored PNG's, per byte of samples, by compression level 0 "
                    "to 9, of 8-bit and of 16-bit images."),
    ("JPEG_QUALITY", "JPEG's encode per colour sample (three a pixel, one for gray) at these "
                     "qualities, linear between."),
    ("WEBP_QUALITY", "Lossy WebP's colour per pixel by effort 0 to 6 at these qualities, linear "
                     "between."),
    ("WEBP_SIZES", "Lossy WebP's alpha plane per pixel by effort, and lossless WebP per pixel, at "
                   "these image sizes in pixels, linear in their logarithm between."),
    ("DECODE_HEIC_NS_SAMPLE", "HEIC, AVIF, JPEG XL, TIFF and GIF decodes beyond a stored PNG's (JXLLL: "
                              "JPEG XL in its original colour space, as lossless files are; TIFFZ: "
                              "compressed TIFF): per sample, per byte of the file, per pixel with "
                              "alpha."),
    ("AVIF_NS_PIXEL", "AVIF's encode per pixel by effort 0 to 6; JPEG XL's, lossy and lossless."),
    ("FIR_NS_SAMPLE", "The fir family (fir.c): per sample, per tap of the row pass, per tap of the "
                      "column pass while its rows fit in COST_L3_BYTES / 2, and once they pass "
                      "COST_L3_BYTES (log-linear between)."),
    ("SEP_NS_SAMPLE", "separable in single-precision tiles (sep.c, radii up to 64), then in strips "
                      "of doubles (image.c), the PSNR's exact reference (those strips at truncate 4, "
                      "per tap STRIPS_NS_TAP; REFERENCE_MEM_NS_SAMPLE more per sample as the image "
                      "grows from COST_L3_BYTES / 8 to COST_L3_BYTES samples, its planes of doubles "
                      "fresh pages), yvv, deriche, yvv2way and pyramid: per sample, per tap or "
                      "multiply-add, per line (a row or a column of a channel), per pixel with "
                      "alpha."),
    ("REGION_NS_SAMPLE", "Regions: per sample of the boxes beyond their blur (cut out, blended "
                         "back), per region, per sample of the input copied when boxes overlap; "
                         "REGION_MEM_NS_SAMPLE more per sample of a box as it grows from "
                         "COST_L3_BYTES / 8 to COST_L3_BYTES samples."),
    ("UNSHARP_NS_SAMPLE", "/sharpen's mask, per sample."),
    ("VAR_EXACT_NS_PIXEL", "/variance per pixel: exact; a colour image's luma; naive, koenig and "
                           "welford per pixel and per pixel of the window; pairwise and threewise "
                           "per pixel and per doubling of the radius; the PSNR's exact map."),
    ("CONTRAST_NS_PIXEL", "/contrast per pixel and per sample; /convolve per colour sample and per "
                          "weight of the kernel; /pixelate per sample, and with regions per sample "
                          "of the regions grown by the feather, per sample copied, per block and "
                          "region."),
]

def c_value(x):
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.4g}" if abs(x) >= 1e-3 else f"{x:.3e}"

def c_define(name, v):
    """#define COST_name v, wrapped at 100 columns: an array one row a line."""
    head = f"#define COST_{name} "
    if not isinstance(v, list):
        return [head + c_value(v)]
    if not isinstance(v[0], list):
        one = head + "{" + ", ".join(c_value(x) for x in v) + "}"
        if len(one) <= 100:
            return [one]
    rows = [", ".join(c_value(x) for x in r) if isinstance(r, list) else c_value(r) for r in v]
    rows = ["{" + r + "}" if isinstance(v[0], list) else r for r in rows]
    lines = [head + "\\"] + ["  " + ("{" if i == 0 else " ") + r + ("}" if i == len(rows) - 1 else ",")
                            for i, r in enumerate(rows)]
    return [l if i == len(lines) - 1 or l.endswith("\\") else l + " \\" for i, l in enumerate(lines)]

def comment(text):
    words, lines, line = text.split(), [], "/*"
    for w in words:
        if len(line) + 1 + len(w) > 96:
            lines.append(line)
            line = " *"
        line += " " + w
    lines.append(line + " */")
    return lines

# Where each term lives: the codecs' (decoders and encoders, by format) in FORMATS_TABLE, the rest
# in TABLE.
def codec_term(name):
    return re.match(r"(DECODE|PNG|PNG16|JPEG|WEBP|AVIF|JXL)_", name) is not None

HEADS = {
    TABLE: ["/* Generated by scripts/cost-calibration.sh, do not edit: the cost model's constants,",
            " * measured as the server's CPU time (user + system, all its threads) per request and",
            " * fitted to the formulas of api/ops/common.c and the descriptors beside it (the codecs'",
            " * terms: formats/cost_table.h). In ns of one core; a sample is one channel of a pixel.",
            " * The terms and their measurements: docs/operations.md, \"Limits and costs\". The arrays",
            " * are initialisers. */",
            "#ifndef BLURD_COST_TABLE_H", "#define BLURD_COST_TABLE_H", "",
            "/* The last-level cache of the machine measured, in bytes: the fir family's column",
            " * pass and the request's buffers cost more past it. */",
            f"#define COST_L3_BYTES {L3}"],
    FORMATS_TABLE: ["/* Generated by scripts/cost-calibration.sh, do not edit: the codecs' terms of the cost",
                    " * model, measured as the server's CPU time (user + system, all its threads) per request",
                    " * and fitted to the formulas of the format files' decode_ns and encode_ns. In ns of one",
                    " * core; a sample is one channel of a pixel. The terms and their measurements:",
                    " * docs/operations.md, \"Limits and costs\". The arrays are initialisers. */",
                    "#ifndef BLURD_CODECS_COST_TABLE_H", "#define BLURD_CODECS_COST_TABLE_H"],
}

def write_tables():
    """TABLE and FORMATS_TABLE, each with its terms in the order measured; FORMATS_TABLE, which make
    fmt formats, put through clang-format as if it were formats/cost_table.h."""
    docs = dict(DOC)
    for path, lines in HEADS.items():
        lines = list(lines)
        for k, v in T.items():
            if codec_term(k) != (path == FORMATS_TABLE):
                continue
            if k in docs:
                lines += [""] + comment(docs[k])
            lines += c_define(k, v)
        text = "\n".join(lines + ["", "#endif", ""])
        if path == FORMATS_TABLE and shutil.which("clang-format"):
            text = subprocess.run(["clang-format", f"--assume-filename={ROOT}/formats/cost_table.h"],
                                  input=text, capture_output=True, text=True, check=True).stdout
        elif path == FORMATS_TABLE:
            log(f"clang-format not found: {path} as written is not make fmt's layout")
        open(path, "w").write(text)
        log(f"wrote {path}")

def table_values():
    """The tables' current values, name (no COST_) -> number or list."""
    out = {}
    for path in [TABLE, FORMATS_TABLE]:
        text = open(path).read().replace("\\\n", " ") if os.path.exists(path) else ""
        for name, v in re.findall(r"#define COST_(\w+)\s+(.+)", text):
            try:
                out[name] = ast.literal_eval(v.replace("{", "[").replace("}", "]"))
            except (SyntaxError, ValueError):
                pass
    return out

def compare():
    """Logs each term measured beside the tables' current value, and their ratio (** past 2x)."""
    now = table_values()
    flat = lambda v: [x for r in v for x in flat(r)] if isinstance(v, list) else [v]
    log("measured beside the tables' current values (measured / current; ** past 2x either way)")
    for k, v in T.items():
        m, c = flat(v), flat(now.get(k, []))
        r = [a / b if b else (1.0 if a == b else math.inf) for a, b in zip(m, c)]
        odd = any(x > 2 or x < 0.5 for x in r)
        log(f"  {'**' if odd else '  '} COST_{k}: " + ", ".join(c_value(x) for x in m) + " | now " +
            (", ".join(c_value(x) for x in c) if c else "absent") +
            (" | ratio " + ", ".join(f"{x:.2f}" for x in r) if c else ""))

try:
    srv = Server()
    steps = [calibrate_io, calibrate_decode, calibrate_encode, calibrate_formats, calibrate_blur,
             calibrate_regions_sharpen, calibrate_variance, calibrate_others]
    only = os.environ.get("ONLY")
    for PASS in range(ROUNDS):
        log(f"---- pass {PASS + 1} of {ROUNDS}")
        for step in steps:
            if not only or step.__name__.endswith(only) or step is calibrate_io:
                step()
    if only:
        compare()
    if only and os.environ.get("WRITE"):  # the terms measured now, the others as the tables hold them
        measured = dict(T)
        T.clear()
        T.update(table_values())
        T.update(measured)
        T.pop("L3_BYTES", None)  # written by the tables' heads
    if not only or os.environ.get("WRITE"):
        write_tables()
finally:
    if srv:
        srv.stop()
    shutil.rmtree(TMP, ignore_errors=True)
PY
