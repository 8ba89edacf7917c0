#!/usr/bin/env python3
# Idle RSS after bursts, and CPU time a request: N stretches of 20 s of tests/load/soak.py's mix,
# open loop at 80% of the capacity measured first (10 s, 4 connections), blurd's VmRSS read 1 s
# after each stretch. For tuning the allocator: run blurd's environment as you would deploy it,
# e.g. MALLOC_ARENA_MAX=8 bench/idle_rss.py build/blurd 5 (docs/engineering-notes.md).
#   bench/idle_rss.py BLURD_BIN [STRETCHES (default 5)]
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "load"))
import soak  # noqa: E402


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def main():
    binary, stretches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    out = tempfile.NamedTemporaryFile(prefix="blurd-idle-out.")
    err = tempfile.NamedTemporaryFile(prefix="blurd-idle-err.")
    blurd, port = soak.start(binary, [], out, err)
    mix = soak.load_mix()
    print(f"start rss_kb={soak.rss_kb(blurd.pid)}", flush=True)
    capacity = soak.Client(port, mix).closed_loop(4, 10)
    print(f"capacity rps={capacity:.1f}", flush=True)
    for i in range(stretches):
        client, c0 = soak.Client(port, mix), cpu_ms(blurd.pid)
        client.open_loop(0.8 * capacity, 20, time.monotonic())
        ok = sum(map(len, client.latency.values()))
        cpu = (cpu_ms(blurd.pid) - c0) / max(ok, 1)
        time.sleep(1.0)
        print(f"stretch {i} ok={ok} errors={sum(client.errors.values())} "
              f"cpu_ms_per_request={cpu:.1f} idle_rss_kb={soak.rss_kb(blurd.pid)}", flush=True)
    blurd.terminate()
    blurd.wait()


if __name__ == "__main__":
    main()
