#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets, fuzz/corpus/<target>/, from tests/data.

Run it from anywhere with Debian's /usr/bin/python3 (PIL comes with python3-pil):
    /usr/bin/python3 fuzz/make-corpus.py
It empties each corpus folder first, then writes small real images (copies of the smaller
fixtures, and crops re-encoded with PIL, WebP through PIL's libwebp), multipart/form-data bodies as curl and browsers send
them, parameter inputs, and whole requests for the handler, in the input formats that
fuzz/README.md describes. The output is deterministic (PIL and libjpeg versions aside).
"""

import base64
import io
import json
import os
import shutil
import struct
import zlib

from PIL import Image

FUZZ = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(FUZZ, "..", "tests", "data")
CORPUS = os.path.join(FUZZ, "corpus")

# Boundaries the way real clients make them: curl, Chrome, Python requests.
CURL = "------------------------d74496d66958873e"
WEBKIT = "----WebKitFormBoundary7MA4YWxkTrZu0gW"
REQUESTS = "a3f1c9b2e8d74c6f9e0b1d2c3a4f5e6d"


def fixture(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def pil_bytes(img, fmt, **opts):
    out = io.BytesIO()
    img.save(out, fmt, **opts)
    return out.getvalue()


def crop(name, box):
    return Image.open(os.path.join(DATA, name)).crop(box)


def png_filtered(img, filters):
    """A PNG of img (PIL, mode L, LA, RGB or RGBA; 8-bit) whose row y has filter type
    filters[y % len(filters)]: 0-4 as PNG defines them (9.2), anything else written as it is."""
    colour = {"L": 0, "LA": 4, "RGB": 2, "RGBA": 6}[img.mode]
    w, h = img.size
    bpp = len(img.mode)
    raw = img.tobytes()
    stride = w * bpp
    out, prior = b"", bytes(stride)
    for y in range(h):
        row, f = raw[y * stride:(y + 1) * stride], filters[y % len(filters)]
        line = bytearray([f])
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prior[i], prior[i - bpp] if i >= bpp else 0
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            pred = [0, a, b, (a + b) // 2, a if pa <= pb and pa <= pc else b if pb <= pc else c]
            line.append((x - pred[f]) & 255 if f < 5 else x)
        out += bytes(line)
        prior = row

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(out, 9)) +
            chunk(b"IEND", b""))


def part(boundary, name, data, filename=None, ctype=None):
    head = 'Content-Disposition: form-data; name="%s"' % name
    if filename:
        head += '; filename="%s"' % filename
    head += "\r\n"
    if ctype:
        head += "Content-Type: %s\r\n" % ctype
    return b"--" + boundary.encode() + b"\r\n" + head.encode() + b"\r\n" + data + b"\r\n"


def form(boundary, *parts, close=True):
    return b"".join(parts) + (b"--" + boundary.encode() + b"--\r\n" if close else b"")


def request(method, uri, ctype="", accept="", body=b""):
    return ("%s\n%s\n%s\n%s\n" % (method, uri, ctype, accept)).encode() + body


def mp_type(boundary):
    return "multipart/form-data; boundary=" + boundary


PNG_COPIES = ["red_square.png", "gray1.png", "palette.png", "palette_trns.png", "gray_trns.png",
              "rgb_trns.png", "gray_alpha.png", "gray16.png", "rgba16.png", "interlaced.png",
              "truncated.png"]
JPEG_COPIES = ["orient3.jpg", "orient6.jpg", "progressive.jpg", "cmyk.jpg", "truncated.jpg"]


def images():
    """The png and jpeg corpora; returns a few small images for the other corpora."""
    for name in PNG_COPIES:
        write("png", name, fixture(name))
    # 4-bit palette and a tiny 16-bit gray, odd sizes.
    write("png", "palette4.png", pil_bytes(crop("palette.png", (0, 0, 13, 7)).quantize(16),
                                           "PNG", bits=4))
    write("png", "gray16_tiny.png", pil_bytes(Image.open(os.path.join(DATA, "gray16.png"))
                                              .crop((10, 10, 15, 13)), "PNG"))
    # Rows png.c unfilters itself (codecs/png_unfilter.c): PIL's adaptive filters (mostly paeth)
    # on a photograph, every filter type in turn as gray+alpha and RGBA, and a filter type byte
    # that PNG does not define.
    photo = Image.open(os.path.join(DATA, "orient1.jpg")).crop((3, 5, 26, 22))  # 23x17
    write("png", "rgb_adaptive.png", pil_bytes(photo, "PNG"))
    write("png", "la_filters.png", png_filtered(photo.convert("LA"), [4, 4, 3, 1, 2, 0, 4, 4]))
    write("png", "rgba_filters.png", png_filtered(photo.convert("RGBA"), [3, 4, 4, 0, 1, 2, 3]))
    write("png", "bad_filter.png", png_filtered(photo, [4, 4, 1, 7]))
    for name in JPEG_COPIES:
        write("jpeg", name, fixture(name))
    gray = crop("gray.jpg", (200, 100, 264, 148))  # 64x48 of the camera man
    write("jpeg", "gray_crop.jpg", pil_bytes(gray, "JPEG", quality=90))
    rgb = Image.open(os.path.join(DATA, "orient1.jpg")).crop((3, 5, 40, 34))  # 37x29
    write("jpeg", "rgb420_optimized.jpg", pil_bytes(rgb, "JPEG", quality=60, subsampling=2,
                                                    optimize=True))
    write("jpeg", "rgb422_progressive.jpg", pil_bytes(rgb, "JPEG", quality=85, subsampling=1,
                                                      progressive=True))
    write("jpeg", "gray_progressive_comment.jpg",
          pil_bytes(gray.crop((0, 0, 17, 9)), "JPEG", quality=95, progressive=True,
                    comment=b"blurd fuzz seed"))
    # Display P3 profiles (tests/data/display_p3.icc) in each format, for the ICC reader.
    icc = fixture("display_p3.icc")
    write("png", "p3_icc.png", pil_bytes(rgb.crop((0, 0, 9, 7)), "PNG", icc_profile=icc))
    write("jpeg", "p3_icc.jpg", pil_bytes(rgb.crop((0, 0, 9, 7)), "JPEG", quality=80,
                                          icc_profile=icc))
    write("webp", "p3_icc.webp", pil_bytes(rgb.crop((0, 0, 9, 7)), "WEBP", lossless=True,
                                           icc_profile=icc))
    return {
        "png": fixture("red_square.png"),  # 64x64 RGBA, 159 bytes
        "gray1": fixture("gray1.png"),  # 101x75 1-bit gray
        "jpeg": fixture("orient6.jpg"),  # 48x64 stored, EXIF orientation 6
        "cmyk": fixture("cmyk.jpg"),
    }


def multipart(img):
    png, jpeg = img["png"], img["jpeg"]
    # curl -F image=@red_square.png
    write("multipart", "curl-image", mp_type(CURL).encode() + b"\n" +
          form(CURL, part(CURL, "image", png, "red_square.png", "image/png")))
    # curl -F image=@orient6.jpg -F 'params={"sigma":2.5,"format":"png"}'
    write("multipart", "curl-image-params",
          mp_type(CURL).encode() + b"\n" +
          form(CURL, part(CURL, "image", jpeg, "orient6.jpg", "image/jpeg"),
               part(CURL, "params", b'{"sigma":2.5,"format":"png"}')))
    # A browser form, quoted boundary, field "file".
    write("multipart", "browser-file-quoted",
          ('multipart/form-data; charset=utf-8; boundary="%s"' % WEBKIT).encode() + b"\n" +
          form(WEBKIT, part(WEBKIT, "file", png, "a b.png", "image/png"),
               part(WEBKIT, "params", b'{"method": "yvv", "sigma": "3"}', ctype="application/json")))
    # Python requests: no filename, preamble before the first boundary, blanks after one.
    body = (b"preamble\r\n--" + REQUESTS.encode() + b"  \r\n" +
            b'Content-Disposition: form-data; name=image\r\n\r\n' + png + b"\r\n--" +
            REQUESTS.encode() + b"--")
    write("multipart", "requests-preamble", (mp_type(REQUESTS) + "\n").encode() + body)
    # Malformed: the body ends before its closing boundary.
    write("multipart", "bad-unterminated", mp_type(CURL).encode() + b"\n" +
          form(CURL, part(CURL, "image", png[:80], "x.png"), close=False))
    # Malformed: a part without a name, then no boundary parameter at all.
    write("multipart", "bad-noname", mp_type(CURL).encode() + b"\n--" + CURL.encode() +
          b"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--" + CURL.encode() + b"--\r\n")
    write("multipart", "bad-noboundary", b"multipart/form-data\n--x\r\n\r\n--x--")


def params():
    seeds = {
        "sigma": "sigma=2",
        "every-param": "method=separable&sigma=2.5&truncate=3&format=jpeg&quality=80"
                       "&compression=9&psnr=false",
        "yvv-coeffs": "method=yvv&sigma=1e1&coeffs=1995&psnr=1",
        "escapes": "sigma=%32%2E5&method=fir%5Fshared&format=png",
        "json-only": "\n" + '{"sigma": 3.0, "method": "deriche", "psnr": false, "quality": "75"}',
        "query-and-json": "sigma=3&format=png\n" + '{"sigma": 3, "compression": 1}',
        "conflict": "sigma=3\n" + '{"sigma": 4}',
        "nul-separator": "method=auto\0" + '{"sigma": "12", "truncate": 8}',
        "bad-values": "sigma=-1&quality=101&method=gauss",
        "not-for-method": "method=yvv&sigma=2&truncate=3",
        "bad-json": "\n" + '{"sigma": [1, 2], "sigma": 1',
    }
    for name, text in seeds.items():
        write("params", name, text)


def handler(img):
    png, jpeg, gray1, cmyk = img["png"], img["jpeg"], img["gray1"], img["cmyk"]
    curl_png = form(CURL, part(CURL, "image", png, "red_square.png", "image/png"))
    seeds = {
        # Valid uploads, one per method and output mode.
        "multipart-png-sigma2": request("POST", "/blur?sigma=2", mp_type(CURL), "*/*", curl_png),
        "raw-jpeg": request("POST", "/blur?sigma=3&quality=80", "image/jpeg", "", jpeg),
        "multipart-params-json": request(
            "POST", "/blur", mp_type(WEBKIT), "application/json",
            form(WEBKIT, part(WEBKIT, "image", gray1, "g.png", "image/png"),
                 part(WEBKIT, "params", b'{"method":"deriche","sigma":2.5,"format":"jpeg"}'))),
        "raw-png-fir": request("POST", "/blur?method=fir&sigma=1.5&truncate=3&psnr=false",
                               "image/png", "", png),
        "octet-yvv2way": request("POST", "/blur?method=yvv2way&sigma=4&coeffs=1995",
                                 "application/octet-stream", "", gray1),
        "fir-shared-jpeg-out": request("POST", "/blur?method=fir_shared&sigma=1&format=jpeg",
                                       "image/png", "application/json", png),
        "fir-mwpt-jpeg-in": request("POST", "/blur?method=fir_mwpt&sigma=0.5&format=png"
                                    "&compression=0", "image/jpeg", "", jpeg),
        "yvv-blocked": request("POST", "/blur?method=yvv_blocked&sigma=7&coeffs=variance",
                               "image/png", "", png),
        "yvv-2002": request("POST", "/blur?method=yvv&sigma=20&coeffs=2002", "image/png", "", gray1),
        "separable-sigma-max": request("POST", "/blur?method=separable&sigma=300", "image/png", "",
                                       png),
        "auto-file-field": request(
            "POST", "/blur?sigma=5", 'multipart/form-data; boundary="%s"' % WEBKIT, "",
            form(WEBKIT, part(WEBKIT, "file", jpeg, "o.jpg", "image/jpeg"))),
        # Errors.
        "bad-method": request("DELETE", "/blur?sigma=2", "image/png", "", png),
        "huge-sigma": request("POST", "/blur?sigma=1e9", mp_type(CURL), "", curl_png),
        "conflict": request(
            "POST", "/blur?sigma=3", mp_type(CURL), "",
            form(CURL, part(CURL, "image", png, "r.png"), part(CURL, "params", b'{"sigma":4}'))),
        "no-image": request("POST", "/blur?sigma=3", mp_type(CURL), "",
                            form(CURL, part(CURL, "params", b'{"psnr":false}'))),
        "text-plain": request("POST", "/blur?sigma=3", "text/plain", "", b"hello"),
        "cmyk": request("POST", "/blur?sigma=3", "image/jpeg", "", cmyk),
        "truncated-png": request("POST", "/blur?sigma=3", "image/png", "", png[:100]),
        "too-many-pixels": request("POST", "/blur?sigma=3", "image/png", "",
                                   pil_bytes(Image.new("L", (300, 300), 77), "PNG")),
        "too-wide": request("POST", "/blur?sigma=3", "image/png", "",
                            pil_bytes(Image.new("RGB", (2000, 2), (1, 2, 3)), "PNG")),
        "not-found": request("GET", "/blur/../etc/passwd"),
        "healthz": request("GET", "/healthz"),
        "readyz-head": request("HEAD", "/readyz"),
        "methods": request("GET", "/methods?x=1", "", "application/json"),
        "metrics": request("GET", "/metrics"),
    }
    for name, data in seeds.items():
        write("handler", name, data)


def json_request(uri, obj, ctype="application/json", accept=""):
    return request("POST", uri, ctype, accept, json.dumps(obj, separators=(",", ":")).encode())


def json_bodies(img):
    """Handler seeds with a JSON body: the image in base64, with and without a data: prefix,
    wrapped at 76 columns, with the parameters beside it; and its errors."""
    png, jpeg = img["png"], img["jpeg"]
    b64 = base64.b64encode(png).decode()
    wrapped = base64.encodebytes(png).decode()  # 76 columns, as base64(1) and MIME write it
    seeds = {
        "json-png-sigma": json_request("/blur", {"image": b64, "sigma": 2}),
        "json-data-url-jpeg-json-out": json_request(
            "/blur?sigma=3", {"image": "data:image/jpeg;base64," + base64.b64encode(jpeg).decode(),
                              "method": "yvv", "format": "png"},
            "application/json; charset=utf-8", "application/json"),
        "json-wrapped-convolve": json_request(
            "/convolve", {"image": wrapped, "kernel": [[0, -1, 0], [-1, 5, -1], [0, -1, 0]]}),
        "json-unpadded-convert": json_request("/convert?format=jpeg",
                                              {"image": b64.rstrip("="), "quality": 70}),
        "json-bad-base64": json_request("/blur", {"image": b64[:40] + "*" + b64[41:], "sigma": 2}),
        "json-cut-group": json_request("/contrast", {"image": b64[:4 * 20 + 1]}),
        "json-no-image": json_request("/blur", {"sigma": 2}),
        "json-conflict": json_request("/blur?sigma=3", {"image": b64, "sigma": 4}),
        "json-array": request("POST", "/variance", "application/json", "", b'["' + b64.encode() +
                              b'"]'),
    }
    for name, data in seeds.items():
        write("handler", name, data)


def webp():
    """The webp corpus (small crops written by PIL's libwebp: lossy, lossless, with alpha, with
    ICC and EXIF chunks, cut short; the animation of tests/data) and the handler's WebP seeds."""
    rgb = Image.open(os.path.join(DATA, "orient1.jpg")).crop((3, 5, 40, 34))  # 37x29
    rgba = rgb.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(rgb.size))
    lossless = pil_bytes(rgb, "WEBP", lossless=True, quality=50)
    seeds = {
        "lossy_rgb.webp": pil_bytes(rgb, "WEBP", quality=60),
        "lossless_rgb.webp": lossless,
        "lossless_alpha.webp": pil_bytes(rgba, "WEBP", lossless=True, exact=True),
        "lossy_alpha.webp": pil_bytes(rgba, "WEBP", quality=70, alpha_quality=60),
        "icc_exif.webp": pil_bytes(rgb, "WEBP", quality=80, icc_profile=b"\0" * 128,
                                   exif=b"Exif\0\0MM\0*\0\0\0\x08\0\0\0\0\0\0"),
        "animated.webp": fixture("animated.webp"),
        "truncated.webp": lossless[:len(lossless) * 2 // 3],
    }
    for name, data in seeds.items():
        write("webp", name, data)
    small = pil_bytes(rgba, "WEBP", lossless=True)
    handler_seeds = {
        "webp-raw-lossless-out": request("POST", "/blur?sigma=2&format=webp&lossless=true",
                                         "image/webp", "", small),
        "webp-png-to-lossy-json": request("POST", "/convert?format=webp&quality=60", "image/png",
                                          "application/json", fixture("red_square.png")),
        "webp-multipart-contrast": request(
            "POST", "/contrast?radius=2", mp_type(CURL), "",
            form(CURL, part(CURL, "image", seeds["lossy_rgb.webp"], "a.webp", "image/webp"))),
        "webp-animated": request("POST", "/blur?sigma=2", "image/webp", "", seeds["animated.webp"]),
    }
    for name, data in handler_seeds.items():
        write("handler", name, data)


def main():
    for target in ["png", "jpeg", "webp", "multipart", "params", "handler"]:
        shutil.rmtree(os.path.join(CORPUS, target), ignore_errors=True)
        os.makedirs(os.path.join(CORPUS, target))
    img = images()
    multipart(img)
    params()
    handler(img)
    webp()
    json_bodies(img)


if __name__ == "__main__":
    main()
