#!/bin/bash
# On the GPU machine: wrk against blurd on the GPU backend, uploading tests/data/photo_1080p.jpg
# (1920x1080 JPEG) to /blur at sigma 12, then to /convert (decode and encode only, the codec
# baseline), 64 connections for SECONDS each; prints req/s, p50, p99 and the ratio of /blur to
# /convert throughput (the ratio uses /blur with its defaults, PSNR included), and blurd's CPU
# time per request; then /blur without the PSNR, for comparison. Exits non-zero when a request
# failed or the ratio is below 0.9. blurd runs with --gpu-codecs $CODECS (default off: the ratio
# says whether the filter keeps up with the CPU codecs; with the GPU codecs the exact reference
# binds /blur, see bench/gpu_codecs.sh).
# WRK: the wrk binary (default wrk).
#   bench/gpu_load.sh [SECONDS] [BIN]
set -euo pipefail
secs=${1:-30}
bin=${2:-build}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
blurd_start /tmp/gl.out /tmp/gl.err "$bin/blurd" --bind 127.0.0.1 --port 0 --queue 256 \
  --gpu-codecs "${CODECS:-off}" ||
  { echo "blurd did not start: $(cat /tmp/gl.err)" >&2; exit 1; }
export BLURD_LOAD_FILE=tests/data/photo_1080p.jpg
blur=$(wrk_run "$secs" "/blur?sigma=12")
conv=$(wrk_run "$secs" "/convert")
nopsnr=$(wrk_run "$secs" "/blur?sigma=12&psnr=false")
kill -TERM "$pid"
wait "$pid"
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
