#!/bin/bash
# The CPU codecs on a 1920x1080 photograph (tests/data/photo_1080p.jpg) through blurd's CPU
# backend: PNG (the default compression), JPEG (quality 90), lossy WebP (quality 90) and lossless WebP. For
# each, the encode stage of /convert from the JPEG to the format and the decode stage of /convert
# of that file back to JPEG, from Server-Timing, the median of REPS (default 9) requests; and the
# file's size. PNG and WebP cost the same on the GPU backend, where they stay on the CPU (plus an
# upload and a download of the pixels). Prints Markdown tables; the PNG ones come after.
#   bench/cpu_codecs.sh [BUILD (default build)]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
bin=${1:-build}/blurd
port=${PORT:-8391}
reps=${REPS:-9}
url=http://127.0.0.1:$port
tmp=$(mktemp -d)
"$bin" --backend cpu --bind 127.0.0.1 --port "$port" --access-log off >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
blurd_ready 120 || { echo "blurd not ready after 120 s" >&2; exit 1; } # warm: the first job ran

# The median duration of stage in REPS answers to /convert?query with file.
time_of() {
  for _ in $(seq "$reps"); do
    curl -s -o /dev/null -D - -F "image=@$3" "$url/convert?$2" | grep -i '^server-timing' |
      tr ',' '\n' | sed -n "s/^ *$1;.*dur=\([0-9.]*\).*/\1/p"
  done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

printf '| format | encode ms | decode ms | bytes |\n|---|---|---|---|\n'
for f in png jpeg webp webp_lossless; do
  q="format=${f%_lossless}"
  if [ "$f" = webp_lossless ]; then q="$q&lossless=true"; fi
  curl -s -o "$tmp/$f" -F image=@tests/data/photo_1080p.jpg "$url/convert?$q"
  printf '| %s | %s | %s | %s |\n' "$f" "$(time_of encode "$q" tests/data/photo_1080p.jpg)" \
    "$(time_of decode format=jpeg "$tmp/$f")" "$(stat -c %s "$tmp/$f")"
done

# PNG against libvips and libpng: `blurd convert` of the photograph to PNG at the default level
# and `vips copy` to PNG at its default (whole commands, decode included, median of REPS), then
# every level of blurd's encoder against libpng with zlib (build/codec_bench png) and the
# deflaters alone on the filtered rows (codec_bench deflate) on three images that compress
# differently: the photograph, its blur at sigma 12 (what /blur?sigma=12&format=png encodes) and
# its /variance?radius=7 map (16-bit gray); then lossy WebP at each effort on the photograph and
# the blur, with libwebp alone at effort 2 (four segments: what blurd's one-segment rule for
# smooth images, docs/methods.md "WebP effort", is measured against), and the PNG decoder
# (codec_bench pngdec: blurd's and libspng's, median of 11) on blurd's PNGs at the default level
# and on other encoders'.
median_s() {
  for _ in $(seq "$reps"); do
    /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1
  done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
bin_dir=$(dirname "$bin")
printf '\n| PNG of photo_1080p.jpg | seconds | bytes |\n|---|---|---|\n'
t=$(median_s "$bin" convert tests/data/photo_1080p.jpg "$tmp/blurd.png")
printf '| blurd convert (default compression) | %s | %s |\n' "$t" "$(stat -c %s "$tmp/blurd.png")"
if command -v vips >/dev/null; then
  t=$(median_s vips copy tests/data/photo_1080p.jpg "$tmp/vips.png")
  printf '| vips copy (%s) | %s | %s |\n' "$(vips --version)" "$t" "$(stat -c %s "$tmp/vips.png")"
else
  echo "| vips copy | not installed (apt-get install libvips-tools) | |"
fi
# Level 0 (stored) keeps every sample of the blur and the map for the benchmarks below.
"$bin" blur --sigma 12 --compression 0 tests/data/photo_1080p.jpg "$tmp/blur12_0.png" 2>/dev/null
"$bin" variance --radius 7 --compression 0 tests/data/photo_1080p.jpg "$tmp/variance_0.png" \
  2>/dev/null
for img in tests/data/photo_1080p.jpg "$tmp/blur12_0.png" "$tmp/variance_0.png"; do
  printf '\n%s\n\n' "$(basename "$img")"
  "$bin_dir/codec_bench" png "$img" 3
  printf '\n'
  "$bin_dir/codec_bench" deflate "$img" 3
done
for img in tests/data/photo_1080p.jpg "$tmp/blur12_0.png"; do
  printf '\nWebP, quality 90: %s\n\n' "$(basename "$img")"
  "$bin_dir/codec_bench" webp "$img" 90 3
done
printf '\n'
"$bin" blur --sigma 12 tests/data/photo_1080p.jpg "$tmp/blur12.png" 2>/dev/null
"$bin" variance --radius 7 tests/data/photo_1080p.jpg "$tmp/variance.png" 2>/dev/null
"$bin" convert --compression 6 tests/data/photo_1080p.jpg "$tmp/level6.png" 2>/dev/null
# Pillow's adaptive filters (mostly paeth), as RGB, RGBA (alpha a diagonal ramp) and 8-bit gray.
"${PYTHON:-/usr/bin/python3}" -c "
import numpy as np
from PIL import Image
im = Image.open('tests/data/photo_1080p.jpg')
im.save('$tmp/pillow.png')
ramp = (np.add.outer(np.arange(im.height), np.arange(im.width)) % 256).astype(np.uint8)
Image.fromarray(np.dstack([np.asarray(im), ramp]), 'RGBA').save('$tmp/pillow_rgba.png')
im.convert('L').save('$tmp/pillow_gray.png')" 2>/dev/null || true
vips copy "$tmp/blurd.png" "$tmp/interlaced.png[interlace]" 2>/dev/null || true
# shellcheck disable=SC2046 # the optional files are words of their own
"$bin_dir/codec_bench" pngdec "$tmp/blurd.png" "$tmp/blur12.png" "$tmp/variance.png" \
  "$tmp/level6.png" $(ls "$tmp/vips.png" "$tmp"/pillow*.png 2>/dev/null) tests/data/astronaut.png \
  tests/data/palette.png $(ls "$tmp/interlaced.png" 2>/dev/null)
