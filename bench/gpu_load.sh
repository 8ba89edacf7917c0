#!/bin/bash
# On the GPU machine: wrk against blurd on the GPU backend, uploading tests/data/photo_1080p.jpg
# (1920x1080 JPEG) to /blur at sigma 12, then to /convert (decode and encode only, the codec
# baseline), 64 connections for SECONDS each; prints req/s, p50, p99 and the ratio of /blur to
# /convert throughput (the ratio uses /blur with its defaults, PSNR included), and blurd's CPU
# time per request; then /blur without the PSNR, for comparison. Exits non-zero when a request
# failed or the ratio is below 0.9.
# WRK: the wrk binary (default wrk).
#   bench/gpu_load.sh [SECONDS] [BIN]
set -euo pipefail
secs=${1:-30}
bin=${2:-build}
wrk=${WRK:-wrk}
"$bin/blurd" --bind 127.0.0.1 --port 0 --queue 256 >/tmp/gl.out 2>/tmp/gl.err &
pid=$!
for _ in $(seq 100); do
  port=$(grep -o '127.0.0.1:[0-9]*' /tmp/gl.out 2>/dev/null | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.1
done
export BLURD_LOAD_FILE=tests/data/photo_1080p.jpg
cpu_s() { awk '{ printf "%.2f", ($14 + $15) / 100 }' /proc/$pid/stat; } # blurd's CPU seconds
# one wrk run; prints its RESULT line with blurd's CPU milliseconds per request added
run() {
  local c0 line
  c0=$(cpu_s)
  line=$("$wrk" -t4 -c64 -d"${secs}s" --timeout 30s -s tests/load/upload.lua "http://127.0.0.1:$port" -- "$1" | grep RESULT)
  echo "$line cpu_ms_per_request=$(awk -v a="$c0" -v b="$(cpu_s)" -v l="$line" 'BEGIN { match(l, /requests=[0-9]+/); n = substr(l, RSTART + 9, RLENGTH - 9); printf "%.2f", 1000 * (b - a) / n }')"
}
blur=$(run "/blur?sigma=12")
conv=$(run "/convert")
nopsnr=$(run "/blur?sigma=12&psnr=false")
kill -TERM $pid
wait $pid
echo "blurd: $(cat /tmp/gl.out)"
echo "/blur?sigma=12:            $blur"
echo "/convert:                  $conv"
echo "/blur?sigma=12&psnr=false: $nopsnr"
awk -v b="$blur" -v c="$conv" 'function f(s, k) { match(s, k "=[0-9.]+"); return substr(s, RSTART + length(k) + 1, RLENGTH - length(k) - 1) }
  BEGIN {
    r = f(b, "rps") / f(c, "rps")
    printf "ratio of /blur to /convert throughput: %.3f (target >= 0.9)\n", r
    bad = 0
    split("busy503 other timeouts connect read write", ks, " ")
    for (i in ks) if (f(b, ks[i]) != 0 || f(c, ks[i]) != 0) { print "FAIL: " ks[i] " is not 0"; bad = 1 }
    if (r < 0.9) { print "FAIL: ratio below 0.9"; bad = 1 }
    exit bad
  }'
