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

# HEIC input: a 12-megapixel photograph as a phone writes it (4032x3024, a grid of 512x512 HEVC
# tiles), made here from the 1080p photograph mirrored into a 4032x3024 mosaic (the detail of a
# real photograph, not an upscale) with heif-enc and tests/data/heif-grid.py; then, alternated,
# REPS whole-process runs each of blurd's decoder (build/format_decode, which calls
# codec_heif_decode and writes the raw pixels) and `vips copy in.heic out.v`: the median wall-clock
# seconds and CPU seconds (user + system) of each, and their ratios.
if command -v heif-enc >/dev/null && command -v vips >/dev/null; then
  "${PYTHON:-/usr/bin/python3}" -c "
import numpy as np
from PIL import Image
a = np.asarray(Image.open('tests/data/photo_1080p.jpg'))
row = np.concatenate([a, a[:, ::-1], a], axis=1)[:, :4032]
Image.fromarray(np.concatenate([row, row[::-1], row], axis=0)[:3024]).save('$tmp/12mp.png')"
  "${PYTHON:-/usr/bin/python3}" tests/data/heif-grid.py --tile 512 --quality 50 "$tmp/12mp.png" \
    "$tmp/12mp.heic"
  for _ in $(seq "$reps"); do
    /usr/bin/time -f "blurd %e %U %S" "$bin_dir/format_decode" "$tmp/12mp.heic" "$tmp/12mp.raw" \
      2>&1 >/dev/null | tail -1
    /usr/bin/time -f "vips %e %U %S" vips copy "$tmp/12mp.heic" "$tmp/12mp.v" 2>&1 | tail -1
  done | awk '
    { wall[$1, ++n[$1]] = $2; cpu[$1, n[$1]] = $3 + $4 }
    function median(a, who, k,   v, i, j, t) {
      for (i = 1; i <= k; i++) v[i] = a[who, i]
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      return v[int((k + 1) / 2)]
    }
    END {
      bw = median(wall, "blurd", n["blurd"]); vw = median(wall, "vips", n["vips"])
      bc = median(cpu, "blurd", n["blurd"]); vc = median(cpu, "vips", n["vips"])
      printf "\n| 12 MP HEIC (4032x3024, 48 tiles of 512x512), median of %d | wall s | CPU s |\n", n["blurd"]
      printf "|---|---|---|\n| blurd (format_decode: codec_heif_decode, raw pixels written) | %.2f | %.2f |\n", bw, bc
      printf "| vips copy in.heic out.v | %.2f | %.2f |\n| vips / blurd | %.2f | %.2f |\n", vw, vc, vw / bw, vc / bc
    }'
else
  echo "| 12 MP HEIC | heif-enc or vips not installed (libheif-examples, libvips-tools) | |"
fi
