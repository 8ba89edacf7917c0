#!/usr/bin/env python3
"""End-to-end timing of one request on the GPU machine: starts blurd (BIN/blurd) on a free port,
posts tests/data/photo_1080p.jpg (1920x1080 JPEG) 7 times per case (/blur per method at sigma 12,
then /variance, /contrast and /convolve), and prints the Server-Timing breakdown, PSNR and
backend of the median request.
Usage: e2e.py [BIN]"""
import re
import subprocess
import sys
import time
import urllib.request

bin_dir = sys.argv[1] if len(sys.argv) > 1 else "build"
proc = subprocess.Popen([f"{bin_dir}/blurd", "--bind", "127.0.0.1", "--port", "0"],
                        stdout=subprocess.PIPE, text=True)
port = int(re.search(r"127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
body = open("tests/data/photo_1080p.jpg", "rb").read()
cases = [f"/blur?sigma=12&method={m}" for m in ("auto", "pyramid", "yvv_blocked", "separable", "yvv")]
cases += ["/variance?radius=63", "/variance?radius=63&method=threewise", "/contrast",
          "/convolve?kernel=sharpen"]
for case in cases:
    runs = []
    for _ in range(7):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{case}",
                                     data=body, headers={"Content-Type": "image/jpeg"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            r.read()
            h = r.headers
        runs.append(((time.perf_counter() - t0) * 1e3, h))
    runs.sort(key=lambda x: x[0])
    ms, h = runs[len(runs) // 2]
    print(f"{case} -> {h['X-Method']} on {h['X-Backend']}: client {ms:.1f} ms, "
          f"X-PSNR {h['X-PSNR']}\n  Server-Timing: {h['Server-Timing']}")
proc.terminate()
print("blurd exit", proc.wait())
