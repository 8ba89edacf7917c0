#!/usr/bin/python3
"""Makes the colour-profile fixtures in tests/data: a Display P3 profile and files that carry it.

Run it with Debian's /usr/bin/python3 (python3-pil, liblcms2-2):
    /usr/bin/python3 tests/data/make-icc-fixtures.py
display_p3.icc is built by Little CMS itself (cmsCreateRGBProfile through ctypes): Display P3's
primaries and D65 white with sRGB's tone curve, as Apple defines it. A 160x120 crop of
astronaut.png, read as P3 samples, is saved with that profile by PIL as p3.png, p3.jpg (quality
95) and p3.webp (lossless), and converted to sRGB by PIL's ImageCms (lcms2, perceptual intent, no
flags) as p3_srgb.png: the reference that codec_to_srgb must match within one level.
"""

import ctypes
import io
import os

from PIL import Image, ImageCms

OUT = os.path.dirname(os.path.abspath(__file__))


class XYY(ctypes.Structure):
    _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_double), ("Y", ctypes.c_double)]


def display_p3():
    lcms = ctypes.CDLL("liblcms2.so.2")
    lcms.cmsBuildParametricToneCurve.restype = ctypes.c_void_p
    lcms.cmsCreateRGBProfile.restype = ctypes.c_void_p
    params = (ctypes.c_double * 5)(2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)
    curve = lcms.cmsBuildParametricToneCurve(None, 4, params)
    white = XYY(0.3127, 0.3290, 1.0)
    primaries = (XYY * 3)(XYY(0.680, 0.320, 1.0), XYY(0.265, 0.690, 1.0), XYY(0.150, 0.060, 1.0))
    curves = (ctypes.c_void_p * 3)(curve, curve, curve)
    prof = lcms.cmsCreateRGBProfile(ctypes.byref(white), primaries, curves)
    size = ctypes.c_uint32(0)
    lcms.cmsSaveProfileToMem(ctypes.c_void_p(prof), None, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lcms.cmsSaveProfileToMem(ctypes.c_void_p(prof), buf, ctypes.byref(size))
    lcms.cmsCloseProfile(ctypes.c_void_p(prof))
    lcms.cmsFreeToneCurve(ctypes.c_void_p(curve))
    return buf.raw


def main():
    icc = display_p3()
    with open(os.path.join(OUT, "display_p3.icc"), "wb") as f:
        f.write(icc)
    im = Image.open(os.path.join(OUT, "astronaut.png")).convert("RGB").crop((150, 60, 310, 180))
    im.save(os.path.join(OUT, "p3.png"), icc_profile=icc)
    im.save(os.path.join(OUT, "p3.jpg"), quality=95, icc_profile=icc)
    im.save(os.path.join(OUT, "p3.webp"), lossless=True, icc_profile=icc)
    p3 = ImageCms.ImageCmsProfile(io.BytesIO(icc))
    srgb = ImageCms.createProfile("sRGB")
    ImageCms.profileToProfile(im, p3, srgb, renderingIntent=0, outputMode="RGB").save(
        os.path.join(OUT, "p3_srgb.png"))
    for name in ("p3.png", "p3.jpg", "p3.webp"):
        back = Image.open(os.path.join(OUT, name))
        assert back.info.get("icc_profile") == icc, name
        assert back.size == (160, 120), name


main()
