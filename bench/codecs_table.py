#!/usr/bin/env python3
"""The Python half of bench/gpu_codecs.sh (GPU codecs, nvJPEG, against the CPU codecs):
  codecs_table.py images DIR              writes the test images into DIR (Pillow): photo_4k.jpg
                                          (3840x2160) and photo_8k.jpg (8192x8192), LANCZOS from
                                          tests/data/photo_1080p.jpg, quality 90, 4:2:0; and
                                          photo_1080p.png (RGB)
  codecs_table.py single PORT FILE PATH   3 warm-ups then 20 sequential POSTs of FILE (raw body,
                                          image/jpeg) to PATH; prints the median Server-Timing
                                          total and client time, the stage medians and the codecs
  codecs_table.py idle PORT MAX_SECONDS   waits until blurd has no job queued or running and no
                                          request but this one in flight (/metrics); prints the wait
  codecs_table.py batch PORT              the mean JPEG decode batch size from /metrics
  codecs_table.py report RAW PEER OUTDIR DATE MACHINE COMMAND SECONDS
                                          writes OUTDIR/gpu_codecs.md and OUTDIR/gpu_codecs.csv
                                          from the raw results gpu_codecs.sh collected (RAW) and
                                          the output of bench/nvjpeg_peer.py (PEER)
HTTP with urllib only. The one-line outputs are space-separated key=value pairs."""
import csv
import re
import statistics
import sys
import time
import urllib.request

CASES = ["1080p JPEG /blur?sigma=12", "1080p JPEG /blur?sigma=12&psnr=false", "1080p JPEG /convert",
         "4K JPEG /blur?sigma=12", "8K JPEG /blur?sigma=12", "1080p PNG /blur?sigma=12"]
TARGET_CASE = CASES[0]
MODES = ["on", "off"]


def images(out_dir):
    from PIL import Image
    src = Image.open("tests/data/photo_1080p.jpg").convert("RGB")
    for name, size in (("photo_4k.jpg", (3840, 2160)), ("photo_8k.jpg", (8192, 8192))):
        src.resize(size, Image.LANCZOS).save(f"{out_dir}/{name}", quality=90, subsampling=2)
    src.save(f"{out_dir}/photo_1080p.png")


def server_timing(header):
    """{stage: (desc, ms)} from a Server-Timing header."""
    return {m[1]: (m[2], float(m[3]))
            for m in re.finditer(r'(\w+)(?:;desc="([^"]*)")?;dur=([0-9.]+)', header or "")}


def single(port, path_file, path, warm=3, runs=20):
    body = open(path_file, "rb").read()
    timings, client = [], []
    for i in range(warm + runs):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "image/jpeg"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            header = r.headers.get("Server-Timing")
        if i >= warm:
            client.append((time.perf_counter() - t0) * 1e3)
            timings.append(server_timing(header))
    stages = [s for s in timings[-1] if s != "total"]
    med = {s: statistics.median(t[s][1] for t in timings if s in t) for s in stages}
    print(f"total_ms={statistics.median(t['total'][1] for t in timings):.3f} "
          f"client_ms={statistics.median(client):.3f} "
          f"decode={timings[-1].get('decode', ('?', 0))[0] or '?'} "
          f"encode={timings[-1].get('encode', ('?', 0))[0] or '?'} "
          f"stages={','.join(f'{s}:{v:.3f}' for s, v in med.items())} runs={runs}")


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_sum(text, name):
    """The sum of a metric over its label sets (0 when absent), and whether it was there."""
    vals = [float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(vals), bool(vals)


def idle(port, max_s):
    t0 = time.monotonic()
    while True:
        try:
            text = metrics(port)
            busy = (metric_sum(text, "blurd_queue_depth")[0]
                    + metric_sum(text, "blurd_jobs_running")[0]
                    + max(0, metric_sum(text, "blurd_in_flight")[0] - 1))
        except OSError:  # refused or reset while the last run's connections are still open
            busy = 1
        waited = time.monotonic() - t0
        if busy == 0 or waited >= max_s:
            print(f"waited_s={waited:.1f} idle={int(busy == 0)}")
            return
        time.sleep(0.1)


def batch(port):
    text = metrics(port)
    images_n, found = metric_sum(text, "blurd_jpeg_decode_batch_size_sum")
    batches, _ = metric_sum(text, "blurd_jpeg_decode_batch_size_count")
    mean = f"{images_n / batches:.2f}" if batches else "nan"
    print(f"images={int(images_n)} batches={int(batches)} mean={mean} present={int(found)}")


def kv(text):
    return dict(t.split("=", 1) for t in text.split() if "=" in t)


def num(d, k):
    try:
        return float(d[k])
    except (KeyError, ValueError):
        return float("nan")


def fmt(x, digits=1):
    return "n/a" if x != x else f"{x:,.{digits}f}"


def report(raw_path, peer_path, out_dir, date, machine, command, secs):
    load, single_runs, unavailable, notes, batch_line, startup = {}, {}, {}, [], None, []
    for line in open(raw_path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "load":
            load[(f[2], f[1])] = kv(f[3])
        elif f[0] == "single":
            single_runs[f[1]] = kv(f[2])
        elif f[0] == "unavailable":
            unavailable[f[1]] = f[2].strip()
        elif f[0] == "batch":
            batch_line = kv(f[2])
        elif f[0] == "idle" and kv(f[3]).get("idle") != "1":
            notes.append(f"mode {f[1]}, after {f[2]}: blurd still busy after "
                         f"{kv(f[3]).get('waited_s')} s; the next case ran anyway.")
        elif f[0] == "note":
            notes.append(f"mode {f[1]}: {f[2]}")
        elif f[0] == "startup":
            startup.append(f[1])
    peer = open(peer_path).read().strip() if peer_path else ""

    rows = []  # (case, mode, figures) for the table and the CSV
    for case in CASES:
        for mode in MODES:
            d = load.get((case, mode))
            if d is None:
                rows.append((case, mode, None))
                continue
            non200 = int(num(d, "busy503") + num(d, "other")) if "other" in d else float("nan")
            sock = sum(int(num(d, k)) for k in ("timeouts", "connect", "read", "write") if k in d)
            answered = num(d, "requests") > 0  # wrk reports latencies of 0 for none
            rows.append((case, mode, {"rps": num(d, "rps"),
                                      "p50": num(d, "p50_ms") if answered else float("nan"),
                                      "p99": num(d, "p99_ms") if answered else float("nan"),
                                      "cpu": num(d, "cpu_ms_per_request"),
                                      "non200": non200, "sock": sock,
                                      "requests": num(d, "requests")}))

    with open(f"{out_dir}/gpu_codecs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["case", "mode", "rps", "p50_ms", "p99_ms", "cpu_ms_per_request", "non200",
                    "socket_errors", "requests", "status"])
        for case, mode, r in rows:
            if r is None:
                w.writerow([case, mode, "", "", "", "", "", "", "",
                            "unavailable" if mode in unavailable else "missing"])
            else:
                w.writerow([case, mode] + [("" if r[k] != r[k] else r[k]) for k in
                                           ("rps", "p50", "p99", "cpu", "non200", "sock")]
                           + [int(r["requests"]) if r["requests"] == r["requests"] else "", "ok"])

    md = ["# blurd's GPU codecs (nvJPEG) against the CPU codecs, under load", "",
          f"- date: {date}", f"- machine: {machine}", f"- command: `{command}`",
          "- blurd: `BIN/blurd --bind 127.0.0.1 --port 0 --queue 1024 --max-pixels 70M "
          "--max-conns-per-ip 1024 --gpu-codecs MODE --access-log off` (on: nvJPEG; off: "
          "libjpeg-turbo and libpng), one "
          "server per mode, ready (`/readyz`) and warmed by 5 s of the first case's load (not "
          "counted: the first seconds after a start ran at half speed in both modes), the cases "
          "one after another, each once blurd is idle",
          f"- load: `wrk -t4 -c64 -d{secs}s --timeout 30s -s tests/load/upload.lua URL -- PATH` "
          f"with BLURD_LOAD_FILE the case's file: multipart uploads, 64 connections, {secs} s per "
          f"case; the 4K and 8K files are tests/data/photo_1080p.jpg resized (LANCZOS, quality "
          f"90, 4:2:0), the PNG its RGB PNG",
          "- blurd CPU ms/req: blurd's user + system time (/proc/PID/stat) over the run, divided "
          "by the requests answered", ""]
    for mode, why in unavailable.items():
        md.append(f"**Mode {mode} unavailable:** {why}")
        md.append("")
    md += ["## Under load", "",
           "| case | mode | req/s | p50 ms | p99 ms | blurd CPU ms/req | non-200 |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for case, mode, r in rows:
        if r is None:
            md.append(f"| {case} | {mode} | {'unavailable' if mode in unavailable else 'missing'}"
                      " | | | | |")
            continue
        bad = "n/a" if r["non200"] != r["non200"] else str(r["non200"])
        if r["sock"]:
            bad += f" (+{r['sock']} socket errors)"
        md.append(f"| {case} | {mode} | {fmt(r['rps'])} | {fmt(r['p50'])} | {fmt(r['p99'])} | "
                  f"{fmt(r['cpu'], 2)} | {bad} |")

    by = {(c, m): r for c, m, r in rows}
    ratio = {}
    md += ["", "## Throughput, GPU codecs over CPU codecs", "",
           "| case | on req/s | off req/s | on / off |", "|---|---:|---:|---:|"]
    for case in CASES:
        on, off = by[(case, "on")], by[(case, "off")]
        ratio[case] = on["rps"] / off["rps"] if on and off and off["rps"] > 0 else float("nan")
        md.append(f"| {case} | {fmt(on['rps']) if on else 'n/a'} | "
                  f"{fmt(off['rps']) if off else 'n/a'} | {fmt(ratio[case], 2)} |")

    psnr_on, psnr_off = by[(CASES[0], "on")], by[(CASES[1], "on")]
    psnr_ratio = psnr_on["rps"] / psnr_off["rps"] if psnr_on and psnr_off and psnr_off["rps"] > 0 \
        else float("nan")
    md += ["", "## The PSNR's cost", "",
           f"With the GPU codecs, {CASES[0]} (PSNR on) over {CASES[1]} (PSNR off): "
           f"**{fmt(psnr_ratio, 3)}** of the requests per second "
           f"({fmt(psnr_on['rps']) if psnr_on else 'n/a'} against "
           f"{fmt(psnr_off['rps']) if psnr_off else 'n/a'}; issue 34's target: at least 0.9)."]

    md += ["", "## Start and stop", "",
           "tests/stress/startup.py with the GPU codecs and the default workers and warm-up: the "
           "seconds from the start until the port answers (/healthz) and until /readyz says ready "
           "(three starts); a SIGTERM sent 0.05, 0.5, 1 and 2 s after the port answered (during "
           "the warm-up, or just after it): the exit status and the seconds to it; the median of "
           "a round of as many concurrent /blur?sigma=12 requests as workers, right after ready "
           "(each worker's first), over the median of the next three rounds (issue 34's targets: "
           "port within 1 s, ready within 3 s, exit 0 within 1 s, first/rest at most 2).", "",
           "```"] + (startup or ["(not run)"]) + ["```"]

    md += ["", "## One request at a time", "",
           "tests/data/photo_1080p.jpg POSTed raw (`Content-Type: image/jpeg`) to /blur?sigma=12, "
           "one after another: 3 warm-ups, then the median of 20.", "",
           "| mode | Server-Timing total ms | client ms | decode | encode | stage medians, ms |",
           "|---|---:|---:|---|---|---|"]
    for mode in MODES:
        s = single_runs.get(mode)
        if s is None:
            md.append(f"| {mode} | {'unavailable' if mode in unavailable else 'missing'} | | | | |")
        else:
            stages = ", ".join(x.replace(":", " ") for x in s.get("stages", "").split(",") if x)
            md.append(f"| {mode} | {fmt(num(s, 'total_ms'), 2)} | {fmt(num(s, 'client_ms'), 2)} "
                      f"| {s.get('decode', '?')} | {s.get('encode', '?')} | {stages} |")

    md += ["", "## GPU decode batches", ""]
    if batch_line and batch_line.get("present") == "1":
        md.append(f"Mean JPEG decode batch size with mode on, over the whole run: "
                  f"**{batch_line['mean']}** ({batch_line['images']} files in "
                  f"{batch_line['batches']} batches; blurd_jpeg_decode_batch_size sum / count, "
                  f"all devices).")
    elif batch_line:
        md.append("Mode on ran, but /metrics had no blurd_jpeg_decode_batch_size.")
    else:
        md.append("n/a (mode on unavailable).")

    md += ["", "## Peer: torchvision nvJPEG on the same GPU", "",
           "bench/nvjpeg_peer.py: tests/data/photo_1080p.jpg decoded and encoded (quality 90) with "
           "`torchvision.io.decode_jpeg` / `encode_jpeg` on `device=\"cuda\"`, in-process, no "
           "HTTP; images per second, the median of timed loops after a warm-up.", "", "```",
           peer or "(no output)", "```"]

    on = by[(TARGET_CASE, "on")]
    s_on = single_runs.get("on", {})
    nan = float("nan")
    targets = [
        ("on / off throughput >= 4", ratio[TARGET_CASE], lambda v: v >= 4, 2),
        ("req/s with on >= 2000", on["rps"] if on else nan, lambda v: v >= 2000, 1),
        ("blurd CPU ms/req with on <= 4", on["cpu"] if on else nan, lambda v: v <= 4, 2),
        ("p99 with on <= 100 ms", on["p99"] if on else nan, lambda v: v <= 100, 1),
        ("single-request Server-Timing total with on <= 5 ms", num(s_on, "total_ms"),
         lambda v: v <= 5, 2),
        ("no answer but 200 with on (non-200 and socket errors)",
         (on["non200"] + on["sock"]) if on else nan, lambda v: v == 0, 0),
    ]
    md += ["", f"## Targets: {TARGET_CASE}", "", "| target | measured | result |", "|---|---:|---|"]
    passed = 0
    for name, v, ok, digits in targets:
        good = v == v and ok(v)
        passed += good
        md.append(f"| {name} | {fmt(v, digits)} | {'PASS' if good else 'FAIL'} |")
    md.append("")
    md.append(f"{passed} of {len(targets)} targets met.")
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    with open(f"{out_dir}/gpu_codecs.md", "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(f"targets: {passed} of {len(targets)} met")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "images":
        images(*args)
    elif cmd == "single":
        single(*args)
    elif cmd == "idle":
        idle(args[0], float(args[1]))
    elif cmd == "batch":
        batch(*args)
    elif cmd == "report":
        report(*args)
    else:
        sys.exit(__doc__)
