#!/bin/sh
# Times the filter stage of each method on one CPU core (taskset -c 0), best of REPEAT runs,
# for the cost model in api/ops/common.c: prints endpoint, parameters, pixels, channels and the
# filter stage's milliseconds; then the encode stage of /convert of 2000x2000 noise, RGB and
# RGBA (the slowest content for PNG and WebP), at each PNG level and WebP effort, for the
# encode's part of the model (op_encode_s). Usage: sh scripts/cost-calibration.sh [BLURD] (default build/blurd).
# The pool runs two threads on the one core, so the wall time is one core's work.
set -eu
BIN=${1:-build/blurd}
REPEAT=${REPEAT:-3}
RGB=tests/data/photo_1080p.jpg  # 1920x1080 RGB
GRAY=tests/data/gray_720p.jpg   # 1280x720 gray
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() { # endpoint image params...
  ep=$1 img=$2
  shift 2
  best=1e18
  for _ in $(seq "$REPEAT"); do
    ms=$(taskset -c 0 "$BIN" "$ep" --backend cpu --max-cost 0 --json "$@" "$img" "$OUT/o.png" |
      sed -n "s/.*\"${STAGE:-filter}\":\([0-9.]*\).*/\1/p")
    [ -z "$ms" ] && ms=0
    best=$(echo "$best $ms" | awk '{ print ($2 < $1) ? $2 : $1 }')
  done
  echo "$ep $* $(basename "$img") ${STAGE:-filter}_ms=$best"
}
for s in 2 8 32; do run blur "$RGB" --compression 0 --method fir --sigma "$s" --psnr false; done
for s in 8 32; do run blur "$RGB" --compression 0 --method separable --sigma "$s" --psnr false; done
run blur "$RGB" --compression 0 --method fir --sigma 8 --truncate 8 --psnr false
for s in 8 64; do run blur "$RGB" --compression 0 --method yvv --sigma "$s" --psnr false; done
run blur "$RGB" --compression 0 --method deriche --sigma 8 --psnr false
for s in 8 32; do run blur "$RGB" --compression 0 --method yvv2way --sigma "$s" --psnr false; done
for s in 8 64 300; do run blur "$RGB" --compression 0 --method pyramid --sigma "$s" --psnr false; done
for s in 2 8 300; do run blur "$RGB" --compression 0 --method auto --sigma "$s" --psnr false; done
for s in 8 32; do run blur "$RGB" --compression 0 --method yvv --sigma "$s" --psnr true; done
run sharpen "$RGB" --compression 0 --sigma 2 --psnr false
run convert "$RGB"
for m in naive koenig welford; do for r in 3 7 15; do
  run variance "$GRAY" --method "$m" --radius "$r" --psnr false --compression 0
done; done
for m in pairwise threewise exact; do for r in 7 31; do
  run variance "$GRAY" --method "$m" --radius "$r" --psnr false --compression 0
done; done
run variance "$GRAY" --method exact --radius 127 --psnr false --compression 0
run variance "$GRAY" --method naive --radius 7 --psnr true --compression 0
for r in 5 50; do run contrast "$RGB" --compression 0 --radius "$r"; done
for k in 3 9 15 31; do
  kern=$(awk -v k="$k" 'BEGIN { printf "["; for (i = 0; i < k * k; i++) printf "%s1", i ? "," : ""; printf "]" }')
  run convolve "$RGB" --compression 0 --kernel "$kern"
done
# The encode: noise images made by blurd itself (a PNG written stored, from /dev/urandom's bytes
# wrapped by python3's zlib and struct, the standard library only).
for c in 3 4; do
  python3 - "$OUT/noise$c.png" "$c" <<'PY'
import struct, sys, zlib, os
path, c, w, h = sys.argv[1], int(sys.argv[2]), 2000, 2000
raw = b"".join(b"\0" + os.urandom(w * c) for _ in range(h))
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
ihdr = struct.pack(">IIBBBBB", w, h, 8, 2 if c == 3 else 6, 0, 0, 0)
open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 0)) + chunk(b"IEND", b""))
PY
done
for c in 3 4; do
  for l in 0 1 2 3 4 5 6 7 8 9; do STAGE=encode run convert "$OUT/noise$c.png" --format png --compression "$l"; done
  for e in 0 1 2 3 4 5 6; do STAGE=encode run convert "$OUT/noise$c.png" --format webp --effort "$e"; done
  STAGE=encode run convert "$OUT/noise$c.png" --format webp --lossless true
  STAGE=encode run convert "$OUT/noise$c.png" --format jpeg --quality 100
done
