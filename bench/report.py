#!/usr/bin/env python3
"""Merges the benchmark CSVs of bench/run.sh into gpu_bench.csv, a markdown table with the
targets and the seed claims as ratios (gpu_bench.md), and a plot (gpu_bench.png).
Usage: report.py DIR   (DIR holds blurd.csv, precision.csv, npp.csv, peers.csv, device.txt)"""
import csv
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

d = sys.argv[1]
rows = []
for name in ("blurd.csv", "precision.csv", "npp.csv", "peers.csv"):
    path = os.path.join(d, name)
    if os.path.exists(path):
        rows += [r for r in csv.DictReader(open(path)) if r["ms"] not in ("skipped", "")]
for r in rows:
    r["ms"], r["gpix_s"] = float(r["ms"]), float(r["gpix_s"])
with open(os.path.join(d, "gpu_bench.csv"), "w") as f:
    w = csv.DictWriter(f, fieldnames=["size", "method", "sigma", "ms", "gpix_s"])
    w.writeheader()
    w.writerows(rows)

device = open(os.path.join(d, "device.txt")).read().strip()
get = {(r["size"], r["method"], r["sigma"]): r for r in rows}
sizes = sorted({r["size"] for r in rows}, key=lambda s: eval(s.replace("x", "*")))
blurd = ["fir", "fir_shared", "fir_mwpt", "separable", "yvv", "yvv_blocked", "yvv2way", "deriche", "pyramid"]
sig = ["0.5", "1", "2", "3", "12", "40", "100"]
out = [f"# GPU benchmark\n\n{device}. Kernel time (CUDA events, median), RGBA8, data on the "
       "device, Gpix/s = megapixels / ms / 1000. Made by bench/run.sh.\n"]
for size in sizes:
    methods = blurd + sorted({r["method"] for r in rows
                              if r["size"] == size and r["method"] not in blurd and "@" not in r["method"]})
    out.append(f"\n## {size}\n\n| method | " + " | ".join("sigma " + s for s in sig) + " |")
    out.append("|---|" + "---|" * len(sig))
    for m in methods:
        cells = [f"{get[(size, m, s)]['gpix_s']:.2f}" if (size, m, s) in get else "" for s in sig]
        if m.startswith("npp_gauss_border") and (size, m, "mask") in get:
            cells = [f"{get[(size, m, 'mask')]['gpix_s']:.2f} (fixed mask)"] + [""] * (len(sig) - 1)
        if any(cells):
            out.append(f"| {m} | " + " | ".join(cells) + " |")


def gp(size, m, s):
    r = get.get((size, m, s))
    return r["gpix_s"] if r else float("nan")


def ms(size, m, s):
    r = get.get((size, m, s))
    return r["ms"] if r else float("nan")


big = "8192x8192"
out.append("\n## Targets and seed claims (8192x8192 unless said)\n")
acc48 = ["fir", "fir_shared", "fir_mwpt", "separable", "yvv", "yvv_blocked", "deriche", "pyramid"]
best = max(acc48, key=lambda m: gp(big, m, "12") if gp(big, m, "12") == gp(big, m, "12") else 0)
out.append(f"- fastest method at >= 48 dB, sigma 12: {best}, {gp(big, best, '12'):.1f} Gpix/s "
           f"(target 100)")
for m in ("yvv", "yvv_blocked", "yvv2way", "deriche"):
    line = f"- {m}: time at sigma 100 / time at sigma 2 = {ms(big, m, '100') / ms(big, m, '2'):.2f} (target <= 1.2)"
    if (big, m + "@float", "2") in get:
        line += (f"; in one precision: float {ms(big, m + '@float', '100') / ms(big, m + '@float', '2'):.2f}, "
                 f"double {ms(big, m + '@double', '100') / ms(big, m + '@double', '2'):.2f}")
    out.append(line)
for s in ("2", "12", "100"):
    out.append(f"- yvv_blocked / yvv speed, sigma {s}: {ms(big, 'yvv', s) / ms(big, 'yvv_blocked', s):.1f}x "
               f"(target >= 10x)")
out.append(f"- yvv2way / yvv speed (seed 000 claims 2x), sigma 12: "
           f"{ms(big, 'yvv', '12') / ms(big, 'yvv2way', '12'):.2f}x; on 1920x1080: "
           f"{ms('1920x1080', 'yvv', '12') / ms('1920x1080', 'yvv2way', '12'):.2f}x")
out.append(f"- fir_mwpt / fir speed at 5x5 (sigma 0.5; seed 001 claims up to 2.5x): "
           f"{ms(big, 'fir', '0.5') / ms(big, 'fir_mwpt', '0.5'):.2f}x; fir_shared / fir: "
           f"{ms(big, 'fir', '0.5') / ms(big, 'fir_shared', '0.5'):.2f}x")
cpu = [r for r in rows if r["method"].startswith("cpu_yvv")]
if cpu:
    out.append(f"- GPU / CPU yvv without transfers (seed 002 claims 24x), 1920x1080 sigma 12: "
               f"{cpu[0]['ms'] / ms('1920x1080', 'yvv', '12'):.1f}x for the seed's one-line-per-thread "
               f"kernel, {cpu[0]['ms'] / ms('1920x1080', 'yvv_blocked', '12'):.1f}x for yvv_blocked "
               f"(CPU: {cpu[0]['method']}, {cpu[0]['ms']:.1f} ms)")
for peer in sorted({r["method"] for r in rows if r["method"].startswith(("cupy", "opencv", "npp_gauss_adv"))}):
    for s in ("12", "40", "100"):
        p = [r for r in rows if r["size"] == big and r["method"] == peer and r["sigma"] == s]
        if p:
            out.append(f"- {best} vs {peer}, sigma {s}: {p[0]['ms'] / ms(big, best, s):.0f}x faster")
prec = sorted({r["method"] for r in rows if "@" in r["method"]})
if prec:
    out.append("\n## Single against double precision (8192x8192, Gpix/s)\n")
    out.append("| method | " + " | ".join("sigma " + s for s in ("2", "12", "100")) + " |\n|---|---|---|---|")
    for m in prec:
        out.append(f"| {m} | " + " | ".join(f"{gp(big, m, s):.1f}" for s in ("2", "12", "100")) + " |")
open(os.path.join(d, "gpu_bench.md"), "w").write("\n".join(out) + "\n")

plt.figure(figsize=(9, 5.6))
for m in blurd + sorted({r["method"] for r in rows if r["method"].startswith(("cupy", "opencv", "npp_gauss_adv"))}):
    pts = sorted((float(r["sigma"]), r["gpix_s"]) for r in rows if r["size"] == big and r["method"] == m)
    if pts:
        plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m,
                 linestyle="-" if m in blurd else "--")
plt.xscale("log")
plt.yscale("log")
plt.xlabel("sigma (pixels)")
plt.ylabel("Gpix/s (kernel time)")
plt.title(f"8192x8192 RGBA8 Gaussian blur, {device}")
plt.grid(True, which="both", alpha=0.3)
plt.legend(fontsize=8, ncol=2)
plt.tight_layout()
plt.savefig(os.path.join(d, "gpu_bench.png"), dpi=110)
print("\n".join(out))
