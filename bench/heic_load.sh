#!/bin/bash
# A 12-megapixel HEIC as a phone writes it (4032x3024, a grid of 48 HEVC tiles of 512x512) served
# by blurd, against what the machine's cores can decode: the decode limit.
#   bench/heic_load.sh --make OUT.heic      makes the file (needs heif-enc, python3 with Pillow and
#                                            numpy: the 1080p photograph mirrored into a 4032x3024
#                                            mosaic, then tests/data/heif-grid.py, as
#                                            bench/cpu_codecs.sh does)
#   bench/heic_load.sh HEIC [SECONDS] [BIN] [OUTDIR]   (defaults 20, build, docs)
# The run: REPS (7) whole-process decodes of HEIC by BIN/format_decode, whose median process CPU
# time per decode gives the decode limit, cores x 1000 / CPU ms decodes a second; then blurd
# (BIN/blurd, its default backend, --queue 1024 --max-conns-per-ip 1024 --access-log off), ready,
# under wrk (CONNS, default 32, connections for SECONDS) uploading HEIC to /blur?sigma=12, which
# answers JPEG: req/s, p50, p99, non-200 answers and blurd's CPU ms per request. Writes
# OUTDIR/heic_load.md: the table and the rate as a share of the decode limit (the target: 0.8 or
# more). WRK: the wrk binary (default wrk). Run from the repository root.
set -euo pipefail
if [ "${1:-}" = --make ]; then
  out=$2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "${PYTHON:-/usr/bin/python3}" -c "
import numpy as np
from PIL import Image
a = np.asarray(Image.open('tests/data/photo_1080p.jpg'))
row = np.concatenate([a, a[:, ::-1], a], axis=1)[:, :4032]
Image.fromarray(np.concatenate([row, row[::-1], row], axis=0)[:3024]).save('$tmp/12mp.png')"
  "${PYTHON:-/usr/bin/python3}" tests/data/heif-grid.py --tile 512 --quality 50 "$tmp/12mp.png" "$out"
  exit 0
fi
heic=$1
secs=${2:-20}
bin=${3:-build}
outdir=${4:-docs}
reps=${REPS:-7}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
cores=$(nproc)
cpu_ms=$(for _ in $(seq "$reps"); do "$bin/format_decode" "$heic"; done |
  sed -n 's/.*CPU \([0-9.]*\) ms$/\1/p' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
limit=$(awk -v c="$cores" -v ms="$cpu_ms" 'BEGIN { printf "%.1f", c * 1000 / ms }')
echo "decode: median CPU $cpu_ms ms of $reps; $cores cores: limit $limit decodes/s"
blurd_start "$tmp/out" "$tmp/err" "$bin/blurd" --bind 127.0.0.1 --port 0 --queue 1024 \
  --max-conns-per-ip 1024 --access-log off
blurd_ready 180 || { cat "$tmp/err" >&2; exit 1; }
backend=$(curl -s "http://127.0.0.1:$port/readyz" | grep -o '"backend": *"[^"]*"' | head -1 || true)
BLURD_LOAD_FILE=$heic CONNS=${CONNS:-8} wrk_run 5 "/blur?sigma=12" >/dev/null # warm
line=$(BLURD_LOAD_FILE=$heic CONNS=${CONNS:-32} wrk_run "$secs" "/blur?sigma=12")
echo "$line"
kill -TERM "$pid"
wait "$pid" || true
pid=
get() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$line"; }
rate=$(get rps)
share=$(awk -v r="$rate" -v l="$limit" 'BEGIN { printf "%.2f", r / l }')
verdict=$(awk -v s="$share" 'BEGIN { print (s >= 0.8 ? "PASS" : "FAIL") }')
mkdir -p "$outdir"
{
  echo "# A 12 MP HEIC served against the cores' decode limit"
  echo
  echo "$(date -u +%F), $(hostname), $cores cores, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'), blurd $backend."
  echo "Command: \`WRK=${WRK:-wrk} bench/heic_load.sh HEIC $secs $bin $outdir\` ($(stat -c %s "$heic") bytes, 4032x3024, 48 tiles)."
  echo
  echo "| measure | value |"
  echo "|---|---|"
  echo "| format_decode, median process CPU ms of $reps | $cpu_ms |"
  echo "| decode limit ($cores cores x 1000 / CPU ms), decodes/s | $limit |"
  echo "| /blur?sigma=12 (JPEG out), wrk ${CONNS:-32} connections ${secs} s, req/s | $rate |"
  echo "| p50 ms, p99 ms | $(get p50_ms), $(get p99_ms) |"
  echo "| 503 and other non-200 answers | $(get busy503), $(get other) |"
  echo "| blurd CPU ms per request | $(get cpu_ms_per_request) |"
  echo "| req/s / decode limit (target 0.8) | **$share** $verdict |"
} >"$outdir/heic_load.md"
cat "$outdir/heic_load.md"
