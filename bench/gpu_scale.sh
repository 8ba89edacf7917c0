#!/bin/bash
# On a GPU machine with several GPUs: does blurd's throughput grow with the GPUs? Runs blurd
# (GPU codecs as by default, 8 HTTP threads, WORKERS workers per GPU in both runs, default 16, so
# that each GPU gets the same share: by default blurd shares the cores out among the GPUs) first
# on one GPU (CUDA_VISIBLE_DEVICES=0), then on all of them, and loads each with wrk (CONNS
# connections, default 128, SECONDS each) uploading tests/data/photo_1080p.jpg to /blur?sigma=12
# and to /blur?sigma=12&psnr=false. Prints each
# RESULT line (req/s, p50, p99, blurd CPU ms per request) and the throughput ratio of all GPUs to
# one (the target for two GPUs is 1.8).
# WRK: the wrk binary (default wrk).
#   bench/gpu_scale.sh [SECONDS] [BIN]          (defaults 20, build)
set -euo pipefail
secs=${1:-20}
bin=${2:-build}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
export BLURD_LOAD_FILE=tests/data/photo_1080p.jpg CONNS=${CONNS:-128}
workers=${WORKERS:-16}
ngpu=$(nvidia-smi -L | wc -l)
all=$(seq -s, 0 $((ngpu - 1)))
paths=("/blur?sigma=12" "/blur?sigma=12&psnr=false")
declare -A rps
for devs in 0 "$all"; do
  CUDA_VISIBLE_DEVICES=$devs blurd_start /tmp/gs.out /tmp/gs.err "$bin/blurd" --bind 127.0.0.1 \
    --port 0 --queue 1024 --max-conns-per-ip 1024 --http-threads 8 --workers "$workers" \
    --access-log off ||
    { echo "blurd did not start: $(cat /tmp/gs.err)" >&2; exit 1; }
  echo "GPUs $devs: $(cat /tmp/gs.out)"
  for p in "${paths[@]}"; do
    res=$(wrk_run "$secs" "$p")
    echo "  $p: $res"
    rps["$devs $p"]=$(echo "$res" | grep -o 'rps=[0-9.]*' | cut -d= -f2)
  done
  kill -TERM "$pid"
  wait "$pid"
done
for p in "${paths[@]}"; do
  awk -v a="${rps["$all $p"]}" -v o="${rps["0 $p"]}" -v n="$ngpu" -v p="$p" \
    'BEGIN { printf "%s: %d GPUs %.1f req/s, one GPU %.1f req/s, ratio %.2f\n", p, n, a, o, a / o }'
done
