#!/usr/bin/python3
"""Makes the generated test images in tests/data from scikit-image's sample photographs.

Run it from anywhere with Debian's /usr/bin/python3 (numpy and PIL come with python3-skimage):
    /usr/bin/python3 tests/data/make-fixtures.py
It copies the photographs it starts from, writes every generated fixture, then reads each one back
and checks it, so a fixture that is not what README.md says fails here rather than in the C tests.
The output is deterministic: running it again gives the same bytes (PIL and zlib versions aside).

tests/unit_codecs.c rebuilds the expected pixels of most PNG fixtures from the copied photographs
with the same formulas as below (REGION, the 16-bit packing, the palette mask, the alpha gradient);
keep the two in step.
"""

import os
import shutil
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
OUT = os.path.dirname(os.path.abspath(__file__))
COPIES = ["camera.png", "astronaut.png", "chelsea.png", "coffee.png", "logo.png",
          "rocket.jpg", "hubble_deep_field.jpg"]

# The region the small PNG fixtures are cut from: x, y, width, height. Odd sizes, so that row
# strides, 1-bit padding and Adam7 passes with partial blocks are all exercised.
REGION = (200, 100, 97, 65)
REGION_B = (200, 100, 101, 75)  # gray1.png and interlaced.png
ORIENT_SIZE = (64, 48)          # upright size of orient1.jpg ... orient8.jpg
GRAY_KEY = 0                    # the tRNS colour of gray_trns.png
RGB_KEY = (192, 128, 128)       # the tRNS colour of rgb_trns.png


def path(name):
    return os.path.join(OUT, name)


def load(name):
    return np.array(Image.open(os.path.join(SKIMAGE, name)))


def crop(a, region):
    x, y, w, h = region
    return a[y:y + h, x:x + w]


def gradient(w, h, maxval):
    """A diagonal alpha ramp, 0 at the top-left corner and maxval at the bottom-right."""
    y, x = np.mgrid[0:h, 0:w]
    return ((x + y) * maxval // (w + h - 2)).astype(np.uint16 if maxval > 255 else np.uint8)


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def write_png(name, a, interlace=False):
    """A minimal PNG writer for what PIL cannot write: 16-bit gray+alpha, RGB and RGBA, and Adam7.

    a is (height, width, channels) of uint8 or uint16; rows use filter 0 (None)."""
    if a.ndim == 2:
        a = a[:, :, None]
    h, w, c = a.shape
    depth = 16 if a.dtype == np.uint16 else 8
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    raw = a.astype(">u2") if depth == 16 else a.astype(np.uint8)
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    data = bytearray()
    for x0, y0, dx, dy in passes:
        sub = raw[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue  # an empty pass has no rows at all, not even filter bytes
        for row in sub:
            data += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 1 if interlace else 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(data), 9))
    png += chunk(b"IEND", b"")
    with open(path(name), "wb") as f:
        f.write(png)


def pack16(hi, lo):
    """16-bit samples whose high byte is one photograph and low byte another, so that the C test
    can rebuild them exactly and a byte-order mistake cannot go unnoticed."""
    return hi.astype(np.uint16) * 256 + lo.astype(np.uint16)


def exif_app1(orientation, big_endian):
    """An APP1 payload: "Exif\\0\\0", a TIFF header and IFD0 with Make (ASCII, stored out of
    line) and Orientation (SHORT, inline)."""
    e = ">" if big_endian else "<"
    make = b"blurd fixtures\x00"
    ifd = struct.pack(e + "H", 2)
    ifd += struct.pack(e + "HHII", 0x010F, 2, len(make), 8 + 2 + 2 * 12 + 4)
    ifd += struct.pack(e + "HHI", 0x0112, 3, 1) + struct.pack(e + "HH", orientation, 0)
    ifd += struct.pack(e + "I", 0)
    tiff = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8) + ifd + make
    return b"Exif\x00\x00" + tiff


def stored_for(upright, orientation):
    """The pixels to store so that applying EXIF orientation gives upright back (the inverse of
    the display transform of each orientation)."""
    u = upright
    return {1: u, 2: u[:, ::-1], 3: u[::-1, ::-1], 4: u[::-1, :],
            5: u.transpose(1, 0, 2), 6: np.rot90(u, 1), 7: u.transpose(1, 0, 2)[::-1, ::-1],
            8: np.rot90(u, -1)}[orientation]


def make_png_fixtures(camera, astronaut, coffee):
    cam, ast, cof = crop(camera, REGION), crop(astronaut, REGION), crop(coffee, REGION)
    w, h = REGION[2], REGION[3]
    write_png("gray16.png", pack16(cam, cof[:, :, 1]))
    Image.fromarray(np.dstack([cam, gradient(w, h, 255)]), "LA").save(path("gray_alpha.png"))
    write_png("gray_alpha16.png", np.dstack([pack16(cam, cof[:, :, 0]), gradient(w, h, 65535)]))
    write_png("rgb16.png", pack16(ast, cof))
    write_png("rgba16.png", np.dstack([pack16(ast, cof), gradient(w, h, 65535)]))

    # Palette: astronaut posterised to 3-3-2 bits, so it has at most 256 colours and the test can
    # rebuild it with a mask. palette_trns.png adds tRNS with alpha = (blue >> 6) * 85.
    post = ast & np.array([0xE0, 0xE0, 0xC0], dtype=np.uint8)
    colours, index = np.unique(post.reshape(-1, 3), axis=0, return_inverse=True)
    pal = Image.fromarray(index.reshape(h, w).astype(np.uint8), "P")
    pal.putpalette(colours.flatten().tolist())
    pal.save(path("palette.png"))
    alpha = bytes(int(c[2] >> 6) * 85 for c in colours)
    pal.save(path("palette_trns.png"), transparency=alpha)

    # tRNS on gray and RGB: a colour key. Posterised to 2 bits a channel so that the key colour
    # covers whole areas (check() makes sure it does).
    Image.fromarray(cam & 0xC0, "L").save(path("gray_trns.png"), transparency=GRAY_KEY)
    Image.fromarray(ast & 0xC0, "RGB").save(path("rgb_trns.png"), transparency=RGB_KEY)

    camb = crop(camera, REGION_B)
    Image.fromarray(camb >= 128).convert("1").save(path("gray1.png"))
    write_png("interlaced.png", crop(astronaut, REGION_B), interlace=True)

    square = np.zeros((64, 64, 4), dtype=np.uint8)
    square[20:44, 20:44] = (255, 0, 0, 255)
    Image.fromarray(square, "RGBA").save(path("red_square.png"))

    small = Image.fromarray(crop(coffee, (0, 0, 128, 96)))
    small.save(path("truncated_full.tmp.png"))
    full = open(path("truncated_full.tmp.png"), "rb").read()
    os.remove(path("truncated_full.tmp.png"))
    with open(path("truncated.png"), "wb") as f:
        f.write(full[:len(full) * 2 // 3])  # cut in the middle of IDAT


def make_jpeg_fixtures(camera, astronaut, chelsea, coffee):
    Image.fromarray(chelsea).save(path("progressive.jpg"), quality=90, progressive=True)
    Image.fromarray(crop(camera, (0, 0, 480, 360))).save(path("gray.jpg"), quality=90)
    Image.fromarray(crop(coffee, (0, 0, 96, 64))).convert("CMYK").save(path("cmyk.jpg"),
                                                                        quality=90)

    upright = np.array(Image.fromarray(crop(astronaut, (0, 0, 256, 192))).resize(
        ORIENT_SIZE, Image.LANCZOS))
    for o in range(1, 9):
        stored = np.ascontiguousarray(stored_for(upright, o))
        Image.fromarray(stored).save(path("orient%d.jpg" % o), quality=95, subsampling=0,
                                     exif=exif_app1(o, big_endian=(o % 2 == 1)))

    hubble = Image.open(os.path.join(SKIMAGE, "hubble_deep_field.jpg")).convert("RGB")
    hd = hubble.crop((0, 155, 1000, 718)).resize((1920, 1080), Image.LANCZOS)
    hd.save(path("photo_1080p.jpg"), quality=90)
    # Gray HD and Full HD photographs for seed 000's Table 2 (tools/report.c).
    hd.convert("L").save(path("gray_1080p.jpg"), quality=95)
    retina = Image.open(os.path.join(SKIMAGE, "retina.jpg")).convert("L")
    retina.crop((0, 309, 1411, 1103)).resize((1280, 720), Image.LANCZOS).save(
        path("gray_720p.jpg"), quality=95)

    full = path("truncated_full.tmp.jpg")
    Image.fromarray(crop(coffee, (0, 0, 128, 96))).save(full, quality=90)
    data = open(full, "rb").read()
    os.remove(full)
    with open(path("truncated.jpg"), "wb") as f:
        f.write(data[:len(data) * 2 // 3])  # cut in the entropy-coded data


def make_webp_fixtures(astronaut, chelsea):
    """WebP through PIL's libwebp: lossy and lossless, with and without alpha, and an animation."""
    ast = crop(astronaut, REGION)
    rgba = Image.fromarray(np.dstack([ast, gradient(REGION[2], REGION[3], 255)]), "RGBA")
    Image.fromarray(chelsea).save(path("lossy.webp"), quality=80, method=4)
    Image.fromarray(ast).save(path("lossless.webp"), lossless=True, quality=100, method=4)
    rgba.save(path("alpha_lossless.webp"), lossless=True, exact=True, quality=100, method=4)
    rgba.save(path("alpha_lossy.webp"), quality=80, method=4)
    frames = [Image.fromarray(crop(astronaut, (x, 100, 48, 32))) for x in (200, 248)]
    frames[0].save(path("animated.webp"), save_all=True, append_images=frames[1:], duration=100,
                   loop=0, quality=80)


def check_webp(astronaut):
    def chunks(name):
        d = open(path(name), "rb").read()
        assert d[:4] == b"RIFF" and d[8:12] == b"WEBP", name
        return d[12:16]

    assert chunks("lossy.webp") == b"VP8 " and chunks("lossless.webp") == b"VP8L"
    assert chunks("alpha_lossless.webp") == b"VP8L"
    assert chunks("alpha_lossy.webp") == b"VP8X" and b"ALPH" in open(path("alpha_lossy.webp"),
                                                                       "rb").read()
    assert chunks("animated.webp") == b"VP8X" and Image.open(path("animated.webp")).n_frames == 2
    ast = crop(astronaut, REGION)
    assert (np.array(Image.open(path("lossless.webp"))) == ast).all()
    rgba = np.array(Image.open(path("alpha_lossless.webp")))
    assert (rgba[:, :, :3] == ast).all()
    assert (rgba[:, :, 3] == gradient(REGION[2], REGION[3], 255)).all()
    assert Image.open(path("alpha_lossy.webp")).mode == "RGBA"
    assert Image.open(path("lossy.webp")).size == (451, 300)


def check(camera, astronaut):
    """Reads the fixtures back with PIL and checks what the README promises."""
    def png_header(name):
        d = open(path(name), "rb").read()
        w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", d[16:29])
        return w, h, depth, colour, interlace, d

    expect = {"gray16.png": (16, 0), "gray_alpha.png": (8, 4), "gray_alpha16.png": (16, 4),
              "rgb16.png": (16, 2), "rgba16.png": (16, 6), "palette.png": (8, 3),
              "palette_trns.png": (8, 3), "gray1.png": (1, 0), "interlaced.png": (8, 2),
              "red_square.png": (8, 6), "gray_trns.png": (8, 0), "rgb_trns.png": (8, 2)}
    for name, (depth, colour) in expect.items():
        got = png_header(name)
        assert got[2:4] == (depth, colour), (name, got[:5])
        assert got[4] == (1 if name == "interlaced.png" else 0), name
    assert b"tRNS" in png_header("palette_trns.png")[5]
    assert b"tRNS" not in png_header("palette.png")[5]
    for name in ("gray_trns.png", "rgb_trns.png"):
        assert b"tRNS" in png_header(name)[5]
        alpha = np.array(Image.open(path(name)).convert("RGBA"))[:, :, 3]
        assert 0.05 < (alpha == 0).mean() < 0.95, name

    inter = np.array(Image.open(path("interlaced.png")))
    assert (inter == crop(astronaut, REGION_B)).all()
    g1 = np.array(Image.open(path("gray1.png")).convert("L"))
    assert (g1 == np.where(crop(camera, REGION_B) >= 128, 255, 0)).all()
    assert (np.array(Image.open(path("gray16.png"))) >> 8 == crop(camera, REGION)).all()
    sq = np.array(Image.open(path("red_square.png")))
    assert tuple(sq[0, 0]) == (0, 0, 0, 0) and tuple(sq[32, 32]) == (255, 0, 0, 255)

    up = np.array(Image.open(path("orient1.jpg"))).astype(int)
    for o in range(1, 9):
        im = Image.open(path("orient%d.jpg" % o))
        assert im.getexif().get(0x0112) == o, o
        fixed = np.array(ImageOps.exif_transpose(im)).astype(int)
        assert fixed.shape == up.shape, (o, fixed.shape)
        assert np.abs(fixed - up).mean() < 2.0, (o, np.abs(fixed - up).mean())
    # The upright image must not look like its own mirror images, or wrong orientations would pass.
    for other in (up[:, ::-1], up[::-1, :], up[::-1, ::-1]):
        assert np.abs(other - up).mean() > 20

    assert Image.open(path("progressive.jpg")).info.get("progressive")
    assert Image.open(path("gray.jpg")).mode == "L"
    assert Image.open(path("cmyk.jpg")).mode == "CMYK"
    assert Image.open(path("photo_1080p.jpg")).size == (1920, 1080)
    assert Image.open(path("gray_1080p.jpg")).size == (1920, 1080)
    assert Image.open(path("gray_720p.jpg")).size == (1280, 720)
    assert Image.open(path("gray_720p.jpg")).mode == "L"
    for name in ("truncated.png", "truncated.jpg"):
        try:
            Image.open(path(name)).load()
            if name.endswith(".png"):
                raise AssertionError(name + " loads")
        except OSError:
            pass


def main():
    for name in COPIES:
        shutil.copyfile(os.path.join(SKIMAGE, name), path(name))
    camera, astronaut = load("camera.png"), load("astronaut.png")
    chelsea, coffee = load("chelsea.png"), load("coffee.png")
    make_png_fixtures(camera, astronaut, coffee)
    make_jpeg_fixtures(camera, astronaut, chelsea, coffee)
    make_webp_fixtures(astronaut, chelsea)
    check(camera, astronaut)
    check_webp(astronaut)
    total = sum(os.path.getsize(path(f)) for f in os.listdir(OUT))
    print("tests/data: %d files, %d bytes" % (len(os.listdir(OUT)), total))


if __name__ == "__main__":
    main()
