#!/bin/bash
# On a GPU machine with several GPUs: does blurd's throughput grow with the GPUs? For 1, 2, 4, ...
# GPUs up to all the host has (CUDA_VISIBLE_DEVICES), runs blurd with its defaults (HTTP threads,
# workers, GPU codecs) and --queue 4096, prints its ready time and the time until all its workers
# are made (from its stderr), waits for them, then loads it with WRKS wrk processes (default 6, 4
# threads and CONNS connections each, default 48: one wrk near 4,000 req/s of 1080p uploads is
# its own limit) for SECONDS each, uploading tests/data/photo_1080p.jpg (tests/load/upload.lua) to
# /blur?sigma=12&psnr=false and /blur?sigma=12. Prints the req/s, the largest p99, the non-200
# answers, the host's busy cores and wrk's share (bench/threads.py), and last the ratio of each
# GPU count to one GPU (issue 34's target: 3.6 for four GPUs).
# WRK: the wrk binary (default wrk). PYTHON: python 3 (default python3).
#   bench/gpu_scale.sh [SECONDS] [BIN]          (defaults 10, build)
set -euo pipefail
secs=${1:-10}
bin=${2:-build}
wrks=${WRKS:-6}
conns=${CONNS:-48}
py=${PYTHON:-python3}
export BLURD_LOAD_FILE=tests/data/photo_1080p.jpg
ngpu=$(nvidia-smi -L | wc -l)
paths=("/blur?sigma=12&psnr=false" "/blur?sigma=12")
declare -A rps
counts=()
for ((n = 1; n < ngpu; n *= 2)); do counts+=("$n"); done
counts+=("$ngpu")
err=$(mktemp)
trap 'rm -f "$err" /tmp/gs_wrk.*' EXIT
for n in "${counts[@]}"; do
  devs=$(seq -s, 0 $((n - 1)))
  t0=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$devs "$bin/blurd" --bind 127.0.0.1 --port 0 --queue 4096 \
    --max-conns-per-ip 4096 --access-log off >"$err.out" 2>"$err" &
  pid=$!
  port=
  for _ in $(seq 200); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$err.out" 2>/dev/null | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    sleep 0.05
  done
  ready=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  for _ in $(seq 1200); do grep -q "workers made" "$err" && break; sleep 0.05; done
  echo "GPUs $devs: ready ${ready} s; $(grep -o 'all [0-9]* workers made [0-9.]* s' "$err" || true)"
  for p in "${paths[@]}"; do
    wrk_pids=()
    for i in $(seq "$wrks"); do
      "${WRK:-wrk}" -t4 -c"$conns" -d"${secs}s" --timeout 30s -s tests/load/upload.lua \
        "http://127.0.0.1:$port" -- "$p" >"/tmp/gs_wrk.$i" &
      wrk_pids+=($!)
    done
    sleep 2
    cpu=$("$py" bench/threads.py "$pid" $((secs / 2)) | grep host)
    wait "${wrk_pids[@]}"
    line=$(cat /tmp/gs_wrk.* | grep RESULT | awk '{
      for (i = 1; i <= NF; i++) { split($i, a, "="); v[a[1]] += a[2]; if (a[1] == "p99_ms" && a[2] > m) m = a[2] }
    } END { printf "rps=%.0f non200=%d p99max_ms=%.0f", v["rps"], v["busy503"] + v["other"], m }')
    echo "  $p: $line;$cpu"
    rps["$n $p"]=$(echo "$line" | grep -o 'rps=[0-9]*' | cut -d= -f2)
  done
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$err.out"
done
for p in "${paths[@]}"; do
  for n in "${counts[@]}"; do
    awk -v a="${rps["$n $p"]}" -v o="${rps["1 $p"]}" -v n="$n" -v p="$p" \
      'BEGIN { printf "%s: %d GPUs %d req/s, %.2f of one GPU\n", p, n, a, a / o }'
  done
done
