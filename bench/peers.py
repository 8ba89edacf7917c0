#!/usr/bin/env python3
"""CuPy and OpenCV peers for the benchmark, run by bench/run.sh on the GPU machine.

CuPy: cupyx.scipy.ndimage.gaussian_filter on the GPU (replicated border: mode='nearest',
truncate=4 as blurd's reference), timed with CUDA events. OpenCV: cv2.GaussianBlur on the CPU
with every core (BORDER_REPLICATE, kernel size 2*ceil(4 sigma)+1), wall clock. Both on RGBA8
images, median of the repetitions after a warm-up. CSV on stdout: size,method,sigma,ms,gpix_s.
Usage: peers.py [sizes] [sigmas]
"""
import math
import os
import sys
import time

import cupy as cp
import cupyx.scipy.ndimage as ndi
import cv2
import numpy as np

sizes = (sys.argv[1] if len(sys.argv) > 1 else "1920x1080,3840x2160,8192x8192").split(",")
sigmas = [float(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3,12,40,100").split(",")]
cv2.setNumThreads(os.cpu_count())
print("size,method,sigma,ms,gpix_s")


def emit(w, h, name, sigma, ms):
    print(f"{w}x{h},{name},{sigma:g},{ms:.4f},{w * h / (ms * 1e6):.2f}", flush=True)


def median(xs):
    return sorted(xs)[len(xs) // 2]


for size in sizes:
    w, h = (int(v) for v in size.split("x"))
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    d_img = cp.asarray(img)
    for sigma in sigmas:
        out = cp.empty_like(d_img)
        a, b = cp.cuda.Event(), cp.cuda.Event()
        ndi.gaussian_filter(d_img, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0, output=out)
        cp.cuda.Device().synchronize()
        reps, times = (3 if sigma >= 40 and w * h > 4e6 else 10), []
        for _ in range(reps):
            a.record()
            ndi.gaussian_filter(d_img, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0,
                                output=out)
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        emit(w, h, "cupy_gaussian_filter", sigma, median(times))
    for sigma in sigmas:
        k = 2 * math.ceil(4 * sigma) + 1
        cv2.GaussianBlur(img, (k, k), sigma, borderType=cv2.BORDER_REPLICATE)
        reps = 1 if k * w * h > 2e10 else 5
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            cv2.GaussianBlur(img, (k, k), sigma, borderType=cv2.BORDER_REPLICATE)
            times.append((time.perf_counter() - t0) * 1e3)
        emit(w, h, f"opencv_cpu_{os.cpu_count()}threads", sigma, median(times))
