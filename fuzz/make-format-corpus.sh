#!/bin/bash
# Writes the seed corpora of the heif, jxl, tiff and gif fuzz targets (fuzz/corpus/<target>/) with
# Debian 12's own encoders from small crops of tests/data's photographs, plus damaged copies, so
# that each corpus holds inputs the decoder accepts and inputs it refuses. Deterministic (the same
# tools give the same bytes). Needs libheif-examples, libavif-bin, libjxl-tools, libtiff-tools,
# python3-pil, python3-numpy and python3-tifffile; CI does not run it.
#   bash fuzz/make-format-corpus.sh
set -euo pipefail
cd "$(dirname "$0")"
data=../tests/data
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf corpus/heif corpus/jxl corpus/tiff corpus/gif
mkdir -p corpus/heif corpus/jxl corpus/tiff corpus/gif

# Sources: 48x32 RGB and RGBA (alpha a ramp), 33x21 RGB (odd), 48x32 gray, 16-bit 48x32 RGB.
$PY - "$data" "$tmp" <<'PY'
import sys
import numpy as np
from PIL import Image
data, tmp = sys.argv[1], sys.argv[2]
a = np.asarray(Image.open(data + "/astronaut.png"))[100:132, 200:248]
Image.fromarray(a).save(tmp + "/rgb.png")
ramp = (np.add.outer(np.arange(32), np.arange(48)) * 255 // 78).astype(np.uint8)
Image.fromarray(np.dstack([a, ramp]), "RGBA").save(tmp + "/rgba.png")
Image.fromarray(a[:21, :33]).save(tmp + "/odd.png")
Image.fromarray(a).convert("L").save(tmp + "/gray.png")
PY

# heif: heif-enc's single picture, its 1x1 grid for an odd size, a 2x1 grid of 32x32 tiles
# rotated (heif-grid.py), avifenc 8-bit 4:2:0 and 10-bit with alpha; damaged: cut in half, a
# byte of the coded data flipped, the grid's size set to 65535x65535 (refused as too large).
heif-enc -q 50 -o corpus/heif/single.heic "$tmp/rgb.png" >/dev/null 2>&1
heif-enc -q 50 -o corpus/heif/odd-grid.heic "$tmp/odd.png" >/dev/null 2>&1
$PY $data/heif-grid.py --tile 32 --quality 50 --rotate 1 --mirror 0 "$tmp/rgb.png" corpus/heif/grid-rot.heic
avifenc -s 8 -y 420 "$tmp/rgb.png" corpus/heif/rgb8.avif >/dev/null
avifenc -s 8 -d 10 "$tmp/rgba.png" corpus/heif/rgba10.avif >/dev/null
avifenc -s 8 "$tmp/gray.png" corpus/heif/gray.avif >/dev/null

# jxl: lossless RGB, RGBA, gray, 16-bit; lossy; a recompressed JPEG with orientation 6; damaged:
# cut in half, a byte flipped.
cjxl "$tmp/rgb.png" corpus/jxl/lossless.jxl -d 0 >/dev/null 2>&1
cjxl "$tmp/rgba.png" corpus/jxl/alpha.jxl -d 0 >/dev/null 2>&1
cjxl "$tmp/gray.png" corpus/jxl/gray.jxl -q 80 >/dev/null 2>&1
cjxl "$tmp/rgb.png" corpus/jxl/lossy.jxl -q 75 >/dev/null 2>&1
cjxl $data/rgb16.png corpus/jxl/rgb16.jxl -d 0 >/dev/null 2>&1
cjxl $data/orient6.jpg corpus/jxl/orient6.jxl >/dev/null 2>&1

# tiff: Pillow's LZW RGB, palette, gray+alpha, CMYK, JPEG, bilevel, orientation 8; tifffile's
# 16-bit planar RGB, associated alpha and float (refused); tiffcp's 16x16 tiles.
$PY - "$tmp" corpus/tiff <<'PY'
import sys
import numpy as np
import tifffile
from PIL import Image
tmp, out = sys.argv[1], sys.argv[2]
rgb, rgba = Image.open(tmp + "/rgb.png"), Image.open(tmp + "/rgba.png")
rgb.save(out + "/lzw.tif", compression="tiff_lzw")
rgb.convert("P", palette=Image.ADAPTIVE, colors=16).save(out + "/palette.tif")
rgba.convert("LA").save(out + "/gray-alpha.tif", compression="tiff_deflate")
rgb.convert("CMYK").save(out + "/cmyk.tif")
rgb.save(out + "/jpeg.tif", compression="jpeg")
rgb.convert("1").save(out + "/bilevel.tif", compression="packbits")
rgb.save(out + "/orient8.tif", tiffinfo={274: 8})
a = np.asarray(rgb).astype(np.uint16) * 257
tifffile.imwrite(out + "/planar16.tif", a.transpose(2, 0, 1), photometric="rgb",
                 planarconfig="separate")
tifffile.imwrite(tmp + "/contig16.tif", a, photometric="rgb")
p = np.asarray(rgba).astype(np.uint32)
pm = np.dstack([(p[..., :3] * p[..., 3:] + 127) // 255, p[..., 3:]]).astype(np.uint8)
tifffile.imwrite(out + "/assoc.tif", pm, photometric="rgb", extrasamples=["assocalpha"])
tifffile.imwrite(out + "/float.tif", np.asarray(rgb).astype(np.float32) / 255, photometric="rgb")
PY
tiffcp -t -w 16 -l 16 -c zip "$tmp/contig16.tif" corpus/tiff/tiled16.tif

# gif: Pillow's transparent and interlaced frames; damaged: cut in half, a screen of 65535 x 65535
# (refused as too large).
$PY - "$tmp" corpus/gif <<'PY'
import sys
from PIL import Image
tmp, out = sys.argv[1], sys.argv[2]
pal = Image.open(tmp + "/rgb.png").convert("P", palette=Image.ADAPTIVE, colors=32)
pal.save(out + "/transparent.gif", transparency=2)
pal.save(out + "/interlaced.gif", interlace=True)
PY

# The damaged copies.
$PY - <<'PY'
def damage(src, dst, how):
    b = bytearray(open(src, "rb").read())
    if how == "half":
        b = b[:len(b) // 2]
    elif how == "flip":
        b[len(b) * 3 // 4] ^= 0x55
    open(dst, "wb").write(bytes(b))

for t, f in (("heif", "single.heic"), ("heif", "rgba10.avif"), ("jxl", "lossless.jxl"),
             ("jxl", "lossy.jxl"), ("tiff", "lzw.tif"), ("tiff", "tiled16.tif"),
             ("gif", "transparent.gif")):
    damage("corpus/%s/%s" % (t, f), "corpus/%s/half-%s" % (t, f), "half")
    damage("corpus/%s/%s" % (t, f), "corpus/%s/flip-%s" % (t, f), "flip")
# A grid claiming 65535 x 65535 (its idat: version, flags 0, rows-1, columns-1, width, height).
b = bytearray(open("corpus/heif/grid-rot.heic", "rb").read())
i = b.index(b"idat") + 4
b[i + 4:i + 8] = b"\xff\xff\xff\xff"
open("corpus/heif/grid-65535.heic", "wb").write(bytes(b))
# A GIF screen of 65535 x 65535.
b = bytearray(open("corpus/gif/interlaced.gif", "rb").read())
b[6:10] = b"\xff\xff\xff\xff"
open("corpus/gif/screen-65535.gif", "wb").write(bytes(b))
PY
ls -l corpus/heif corpus/jxl corpus/tiff corpus/gif
