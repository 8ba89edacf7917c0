#!/bin/bash
# Region blur against whole-image blur (issue 20's benchmark): a 3840x2160 RGB PNG made from
# tests/data/photo_1080p.jpg (twice the size, with Pillow: PYTHON, default Debian's /usr/bin/python3), /blur?sigma=30 whole and with four 256x256
# regions, psnr=false, on a running blurd's backend; prints the median `filter` stage time
# (Server-Timing) of N requests of each after 2 warm-ups, and their ratio.
#   bench/regions.sh BIN [N] [BLURD FLAGS...]     (BIN: the build folder; N default 7)
# STAGE=kernel times the kernels alone on a GPU (the filter stage there includes the upload of
# the PNG's pixels, the same 25 MB whatever the regions).
set -euo pipefail
bin=${1:-build}
n=${2:-7}
shift 2 || true
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"${PYTHON:-/usr/bin/python3}" -c "
from PIL import Image
Image.open('tests/data/photo_1080p.jpg').convert('RGB').resize((3840, 2160), Image.LANCZOS).save('$tmp/4k.png', compress_level=1)"
blurd_start "$tmp/out" "$tmp/err" "$bin/blurd" --bind 127.0.0.1 --port 0 --access-log off "$@" ||
  { cat "$tmp/err" >&2; exit 1; }
regions="400,300,256,256;1600,900,256,256;2800,400,256,256;3300,1700,256,256"
median_filter() { # PATH: the median filter ms of n requests after 2 warm-ups
  for i in $(seq $((n + 2))); do
    curl -s -o /dev/null -D - -H 'Content-Type: image/png' --data-binary @"$tmp/4k.png" \
      "http://127.0.0.1:$port$1" | tr -d '\r' | grep -i '^server-timing' |
      grep -o "${STAGE:-filter};dur=[0-9.]*" | cut -d= -f2 | if [ "$i" -gt 2 ]; then cat; else cat >/dev/null; fi
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
backend=$(curl -s "http://127.0.0.1:$port/readyz" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("backend"))')
whole=$(median_filter "/blur?sigma=30&psnr=false&format=png&compression=0")
part=$(median_filter "/blur?sigma=30&psnr=false&format=png&compression=0&regions=$regions")
echo "backend $backend, 3840x2160 RGB, sigma 30, median ${STAGE:-filter} stage of $n: whole image $whole ms, four 256x256 regions $part ms, ratio $(awk -v a="$part" -v b="$whole" 'BEGIN { printf "%.3f", a / b }')"
