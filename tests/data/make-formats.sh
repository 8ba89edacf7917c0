#!/bin/bash
# Makes the HEIC, AVIF, JPEG XL, TIFF and GIF test files in tests/data with Debian 12's own
# encoders, and what tests/unit_codec_formats.c compares blurd's decoders with: each file's
# pixels as an independent decoder gives them (heif-convert, djxl, tiff2rgba, Pillow), stored as a
# small PNG, or for the larger images as a NAME.ref line: WIDTHxHEIGHT CHANNELS DEPTH and the
# CRC-32 of the samples (row by row, 16-bit samples little-endian). CI does not run this; it needs
#   apt-get install libheif-examples libavif-bin libjxl-tools libtiff-tools python3-pil \
#     python3-numpy python3-tifffile
# and takes a minute. Run it from anywhere:
#   bash tests/data/make-formats.sh
# The photographs are tests/data's copies of scikit-image's (photo_1080p.jpg, chelsea.png,
# coffee.png, astronaut.png, camera.png) and fixtures made from them (p3.png, rgb16.png,
# rgba16.png, palette.png, orient6.jpg). Every command that writes a test file is below.
set -euo pipefail
cd "$(dirname "$0")"
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# png16.py: reads an 8- or 16-bit PNG (not interlaced) into numpy; Pillow reads 16-bit RGB(A)
# as 8-bit.
cat >"$tmp/png16.py" <<'EOF'
import struct
import zlib
import numpy as np


def read(path):
    d = open(path, "rb").read()
    pos, idat = 8, b""
    while pos < len(d):
        n, t = struct.unpack(">I4s", d[pos:pos + 8])
        if t == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", d[pos + 8:pos + 18])
        elif t == b"IDAT":
            idat += d[pos + 8:pos + 8 + n]
        pos += 12 + n
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    bpp, stride = ch * depth // 8, w * ch * depth // 8
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, stride + 1).astype(np.int32)
    out, prev = np.zeros((h, stride), np.int32), np.zeros(stride, np.int32)
    for y in range(h):
        f, line, cur = raw[y, 0], raw[y, 1:], np.zeros(stride, np.int32)
        for x in range(stride):
            a = cur[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            p = [0, a, b, (a + b) // 2,
                 a if abs(b - c) <= abs(a - c) and abs(b - c) <= abs(a + b - 2 * c)
                 else (b if abs(a - c) <= abs(a + b - 2 * c) else c)][f]
            cur[x] = (line[x] + p) & 255
        out[y], prev = cur, cur
    out = out.astype(np.uint8)
    return out.view(">u2").reshape(h, w, ch) if depth == 16 else out.reshape(h, w, ch)
EOF

# ---- source pictures (Pillow, numpy) ----
# grid_src.png: 1024x768 from the 1080p photograph, a red 64x64 square at its top-left corner and
# a blue one at its top-right, so that the transforms can be seen on the pixels.
# small.png: 256x192 of astronaut.png with the same markers (32x32). rgba.png: 240x160 of
# chelsea.png with alpha a diagonal ramp (0 at the top-left, 255 at the bottom-right).
# coffee.png's 384x256 crop for the lossy JPEG XL and AVIF.
$PY - "$tmp" <<'EOF'
import sys
import numpy as np
from PIL import Image
tmp = sys.argv[1]

def marked(a, size):
    a = a.copy()
    a[:size, :size] = (255, 0, 0)
    a[:size, -size:] = (0, 0, 255)
    return a

photo = np.asarray(Image.open("photo_1080p.jpg"))[156:924, 448:1472]
Image.fromarray(marked(photo, 64)).save(tmp + "/grid_src.png")
Image.fromarray(marked(np.asarray(Image.open("astronaut.png"))[100:292, 128:384], 32)).save(
    tmp + "/small.png")
c = np.asarray(Image.open("chelsea.png"))[60:220, 100:340]
h, w = c.shape[:2]
ramp = ((np.add.outer(np.arange(h), np.arange(w)) * 255) // (h + w - 2)).astype(np.uint8)
Image.fromarray(np.dstack([c, ramp]), "RGBA").save(tmp + "/rgba.png")
Image.fromarray(np.asarray(Image.open("coffee.png"))[72:328, 108:492]).save(tmp + "/coffee.png")
# float.pfm: the top-left 64x48 of chelsea.png as 32-bit floats v / 255 (PFM: bottom row first).
f = np.asarray(Image.open("chelsea.png"))[:48, :64].astype(np.float32) / 255
with open(tmp + "/float.pfm", "wb") as out:
    out.write(b"PF\n64 48\n-1.0\n" + f[::-1].astype("<f4").tobytes())
EOF

# ---- HEIF: heif-enc (x265) tiles put in a grid by heif-grid.py; avifenc (aom) ----
# heic_grid_rot.heic: 2x2 tiles of 512x512 (the bottom row cropped to 768 rows), rotated 90
# degrees anticlockwise (irot 1): 768x1024 upright.
$PY heif-grid.py --tile 512 --quality 50 --rotate 1 "$tmp/grid_src.png" heic_grid_rot.heic
# heic_transform.heic: one 256x256 tile cropped to 256x192, irot 3 (270 anticlockwise) then
# imir 1 (left to right): EXIF orientation 5 (transpose).
$PY heif-grid.py --tile 256 --quality 60 --rotate 3 --mirror 1 "$tmp/small.png" heic_transform.heic
# heic_shared.heic: 8x6 tiles of 128x128 that all refer to the first tile's data (--share): its
# pictures' streams together are many times the file's size.
$PY heif-grid.py --tile 128 --quality 50 --share "$tmp/grid_src.png" heic_shared.heic
# heic_icc.heic: heif-enc's own single picture of p3.png, its Display P3 profile in colr 'prof'.
heif-enc -q 60 -o heic_icc.heic p3.png >/dev/null 2>&1
# avif10_alpha.avif: 10-bit 4:4:4 with a 10-bit alpha plane, nclx 1/13/6 (sRGB).
avifenc -d 10 -s 6 --min 10 --max 10 "$tmp/rgba.png" avif10_alpha.avif >/dev/null
# avif8_p3.avif: 8-bit 4:2:0, nclx 12/13/6 (Display P3 primaries, sRGB transfer).
avifenc -d 8 -y 420 -s 6 --min 20 --max 20 --cicp 12/13/6 "$tmp/coffee.png" avif8_p3.avif >/dev/null
for f in heic_grid_rot.heic heic_transform.heic heic_icc.heic avif10_alpha.avif avif8_p3.avif; do
  heif-convert "$f" "$tmp/${f%.*}.png" >/dev/null
done

# ---- JPEG XL: cjxl, djxl ----
cjxl p3.png jxl_p3_lossless.jxl -d 0 >/dev/null 2>&1        # lossless, P3 ICC kept
cjxl rgb16.png jxl_rgb16.jxl -d 0 >/dev/null 2>&1           # lossless 16-bit RGB
cjxl gray_alpha.png jxl_gray_alpha.jxl -d 0 >/dev/null 2>&1 # lossless gray+alpha
cjxl "$tmp/coffee.png" jxl_lossy.jxl -q 80 >/dev/null 2>&1  # lossy (XYB), distance 1.9
cjxl orient6.jpg jxl_orient6.jxl >/dev/null 2>&1            # the JPEG kept; EXIF orientation 6
cjxl "$tmp/float.pfm" jxl_float.jxl -d 0 >/dev/null 2>&1     # lossless 32-bit float
for f in jxl_lossy jxl_orient6; do djxl "$f.jxl" "$tmp/$f.png" >/dev/null 2>&1; done

# ---- TIFF: tifffile, Pillow, tiffcp, tiff2rgba ----
# tiff_tiled16.tif: rgb16.png's 16-bit RGB, 32x32 tiles, LZW (tiffcp -t); tiff_palette.tif:
# palette.png as a palette TIFF (Pillow); tiff_orient6.tif: 97x65 of small.png (red marker at
# the stored top-left), Orientation 6, Deflate; tiff_assoc.tif: rgba.png premultiplied, extra
# sample "associated alpha"; tiff_cmyk.tif: chelsea in CMYK (Pillow, no profile); tiff_jpeg.tif:
# JPEG-compressed YCbCr (Pillow, quality 90); tiff_bilevel.tif: 1-bit camera; tiff_float.tif:
# 32-bit float RGB (refused).
$PY - "$tmp" <<'EOF'
import sys
import numpy as np
import tifffile
from PIL import Image
tmp = sys.argv[1]

sys.path.insert(0, tmp)
import png16
rgb16 = png16.read("rgb16.png")
tifffile.imwrite(tmp + "/rgb16.tif", rgb16, photometric="rgb")
Image.open("palette.png").save("tiff_palette.tif")
src = np.asarray(Image.open(tmp + "/small.png"))[:65, :97]
Image.fromarray(src).save("tiff_orient6.tif", compression="tiff_deflate", tiffinfo={274: 6})
Image.fromarray(np.ascontiguousarray(np.rot90(src, -1))).save("tiff_orient6.ref.png")
rgba = np.asarray(Image.open(tmp + "/rgba.png"))[:64, :96].astype(np.uint32)
pm = np.dstack([(rgba[..., :3] * rgba[..., 3:] + 127) // 255, rgba[..., 3:]]).astype(np.uint8)
tifffile.imwrite("tiff_assoc.tif", pm, photometric="rgb", extrasamples=["assocalpha"])
Image.fromarray(rgba.astype(np.uint8), "RGBA").save("tiff_assoc.ref.png")
chelsea = Image.open("chelsea.png").crop((100, 60, 197, 125))
chelsea.convert("CMYK").save("tiff_cmyk.tif", compression="tiff_lzw")
chelsea.save("tiff_jpeg.tif", compression="jpeg", quality=90)
Image.open("tiff_jpeg.tif").convert("RGB").save("tiff_jpeg.ref.png")
Image.open("camera.png").crop((100, 100, 201, 175)).convert("1").save("tiff_bilevel.tif")
Image.open("tiff_bilevel.tif").convert("L").save("tiff_bilevel.ref.png")
tifffile.imwrite("tiff_float.tif", np.asarray(chelsea).astype(np.float32) / 255,
                 photometric="rgb")

# ---- GIF: Pillow ----
# gif_transparent.gif: 97x65 of chelsea in 64 colours, index 3 transparent;
# gif_interlaced.gif: the same colours, interlaced, no transparency.
pal = chelsea.convert("P", palette=Image.ADAPTIVE, colors=64)
pal.save("gif_transparent.gif", transparency=3)
pal.save("gif_interlaced.gif", interlace=True)
for name in ("gif_transparent", "gif_interlaced"):
    Image.open(name + ".gif").convert("RGBA" if name == "gif_transparent" else "RGB").save(
        name + ".ref.png")
EOF
tiffcp -t -w 32 -l 32 -c lzw "$tmp/rgb16.tif" tiff_tiled16.tif
tiff2rgba -c none tiff_cmyk.tif "$tmp/cmyk_rgba.tif"
$PY -c "from PIL import Image; Image.open('$tmp/cmyk_rgba.tif').convert('RGB').save('tiff_cmyk.ref.png')"

# ---- the reference lines: the samples' CRC-32 as the independent decoder gives them ----
# heif-convert writes 10-bit samples as 16-bit PNG samples v << 6; blurd gives round(v * 65535 /
# 1023), which the line is computed for.
$PY - "$tmp" <<'EOF'
import sys
import zlib
import numpy as np
tmp = sys.argv[1]
sys.path.insert(0, tmp)
import png16


def line(name, a, depth, tool):
    h, w, ch = a.shape
    data = a.astype("<u2" if depth == 16 else np.uint8).tobytes()
    with open(name + ".ref", "w") as f:
        f.write("%dx%d %d %d %08x %s\n" % (w, h, ch, depth, zlib.crc32(data) & 0xFFFFFFFF, tool))


for name in ("heic_grid_rot", "heic_transform", "heic_icc", "avif8_p3"):
    line(name, png16.read(tmp + "/" + name + ".png"), 8, "heif-convert")
v = png16.read(tmp + "/avif10_alpha.png").astype(np.int64)
assert (v % 64 == 0).all()
line("avif10_alpha", ((v >> 6) * 65535 + 511) // 1023, 16, "heif-convert")
for name in ("jxl_lossy", "jxl_orient6"):
    line(name, png16.read(tmp + "/" + name + ".png"), 8, "djxl")
EOF
heif-info heic_grid_rot.heic | sed -n 's/^image: /heic_grid_rot.heic: /p'
ls -l heic_*.heic avif*.avif jxl_*.jxl tiff_*.tif gif_*.gif ./*.ref ./*.ref.png
