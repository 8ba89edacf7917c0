#!/usr/bin/python3
"""Writes a HEIC file whose primary image is a grid of HEVC tiles, as phones write them.

libheif 1.15's heif-enc codes one image per file (a grid only as a 1x1 wrapper for odd sizes), so
this script cuts the picture into tiles, has heif-enc code each tile as a HEIC file of its own,
takes each tile's HEVC data and its hvcC configuration out of those files, and writes them into
one HEIF file: a 'grid' item (the picture's size, cropped from the tiles' union) that refers to
the tiles with 'dimg', with 'ispe', 'pixi', the tiles' 'colr' and, when asked, the transforms
'irot' (rotation anticlockwise) and 'imir' (mirror), which a reader applies after the grid.

    tests/data/heif-grid.py [--tile 512] [--quality 50] [--rotate 0..3] [--mirror 0|1]
                            [--share] [--jobs 2] in.png out.heic

--share makes every tile refer to the first tile's data (a valid file whose pictures repeat one
stream, and whose pictures' streams together are many times its size).

The pixels are all heif-enc's (x265 through libheif); this script only moves boxes.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from PIL import Image


def box(typ, payload):
    return struct.pack(">I4s", 8 + len(payload), typ) + payload


def full_box(typ, version, flags, payload):
    return box(typ, struct.pack(">I", version << 24 | flags) + payload)


def children(b, off, end):
    """(type, payload start, box end) of each box in b[off:end]."""
    while off + 8 <= end:
        size, typ = struct.unpack(">I4s", b[off : off + 8])
        hdr = 8
        if size == 1:
            size = struct.unpack(">Q", b[off + 8 : off + 16])[0]
            hdr = 16
        elif size == 0:
            size = end - off
        yield typ, off + hdr, off + size
        off += size


def uint(b, off, n):
    return int.from_bytes(b[off : off + n], "big") if n else 0


def parse_iloc(b, off, end):
    version = b[off]
    p = off + 4
    offset_size, length_size = b[p] >> 4, b[p] & 15
    base_size, index_size = b[p + 1] >> 4, (b[p + 1] & 15) if version >= 1 else 0
    p += 2
    count = uint(b, p, 2 if version < 2 else 4)
    p += 2 if version < 2 else 4
    items = {}
    for _ in range(count):
        item = uint(b, p, 2 if version < 2 else 4)
        p += 2 if version < 2 else 4
        method = 0
        if version >= 1:
            method = uint(b, p, 2) & 15
            p += 2
        p += 2  # data_reference_index
        base = uint(b, p, base_size)
        p += base_size
        n = uint(b, p, 2)
        p += 2
        extents = []
        for _ in range(n):
            p += index_size
            eo = uint(b, p, offset_size)
            p += offset_size
            el = uint(b, p, length_size)
            p += length_size
            extents.append((base + eo, el))
        items[item] = (method, extents)
    return items


def tile_parts(path):
    """The hvcC box, the colr box (or None) and the coded data of the HEVC image in a HEIC file."""
    b = open(path, "rb").read()
    meta = next((s, e) for t, s, e in children(b, 0, len(b)) if t == b"meta")
    types, props, assoc, iloc, idat = {}, [], {}, {}, b""
    for t, s, e in children(b, meta[0] + 4, meta[1]):
        if t == b"iinf":
            n_size = 2 if b[s] == 0 else 4
            for it, i_s, _ in children(b, s + 4 + n_size, e):
                if it == b"infe":
                    types[uint(b, i_s + 4, 2)] = b[i_s + 8 : i_s + 12]
        elif t == b"iloc":
            iloc = parse_iloc(b, s, e)
        elif t == b"idat":
            idat = b[s:e]
        elif t == b"iprp":
            for pt, p_s, p_e in children(b, s, e):
                if pt == b"ipco":
                    props = [b[c_s - 8 : c_e] for _, c_s, c_e in children(b, p_s, p_e)]
                elif pt == b"ipma":
                    version, flags = b[p_s], uint(b, p_s + 1, 3)
                    q = p_s + 4
                    n = uint(b, q, 4)
                    q += 4
                    for _ in range(n):
                        item = uint(b, q, 2 if version < 1 else 4)
                        q += 2 if version < 1 else 4
                        k = b[q]
                        q += 1
                        idx = []
                        for _ in range(k):
                            if flags & 1:
                                idx.append(uint(b, q, 2) & 0x7FFF)
                                q += 2
                            else:
                                idx.append(b[q] & 0x7F)
                                q += 1
                        assoc[item] = idx
    hevc = [i for i, t in types.items() if t == b"hvc1"]
    if len(hevc) != 1:
        sys.exit(f"{path}: expected one hvc1 item, found {len(hevc)}")
    item = hevc[0]
    mine = [props[i - 1] for i in assoc[item]]
    hvcc = next(p for p in mine if p[4:8] == b"hvcC")
    colr = next((p for p in mine if p[4:8] == b"colr"), None)
    method, extents = iloc[item]
    src = b if method == 0 else idat
    data = b"".join(src[o : o + n] for o, n in extents)
    return hvcc, colr, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tile", type=int, default=512)
    ap.add_argument("--quality", type=int, default=50)
    ap.add_argument("--rotate", type=int, default=0, choices=range(4))
    ap.add_argument("--mirror", type=int, default=-1, choices=(-1, 0, 1))
    ap.add_argument("--share", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("src")
    ap.add_argument("dst")
    a = ap.parse_args()

    im = Image.open(a.src).convert("RGB")
    w, h, t = im.width, im.height, a.tile
    cols, rows = (w + t - 1) // t, (h + t - 1) // t
    if cols > 256 or rows > 256:
        sys.exit("at most 256 x 256 tiles")
    padded = Image.new("RGB", (cols * t, rows * t))
    padded.paste(im, (0, 0))
    # Replicate the last column and row into the padding, as an encoder pads its blocks.
    if cols * t > w:
        padded.paste(im.crop((w - 1, 0, w, h)).resize((cols * t - w, h)), (w, 0))
    if rows * t > h:
        padded.paste(padded.crop((0, h - 1, cols * t, h)).resize((cols * t, rows * t - h)), (0, h))

    with tempfile.TemporaryDirectory() as tmp:

        def encode(i):
            r, c = divmod(i, cols)
            png, heic = os.path.join(tmp, f"{i}.png"), os.path.join(tmp, f"{i}.heic")
            padded.crop((c * t, r * t, c * t + t, r * t + t)).save(png)
            subprocess.run(["heif-enc", "-q", str(a.quality), "-o", heic, png], check=True,
                           stdout=subprocess.DEVNULL)
            return tile_parts(heic)

        with ThreadPoolExecutor(a.jobs) as pool:
            tiles = list(pool.map(encode, range(rows * cols)))

    n = rows * cols
    grid_id = n + 1
    # Properties, 1-based: the hvcC of each distinct configuration, the tiles' ispe, the grid's
    # ispe, pixi, colr (the first tile's), then the transforms.
    props, hvcc_index = [], {}
    for hvcc, _, _ in tiles:
        if hvcc not in hvcc_index:
            props.append(hvcc)
            hvcc_index[hvcc] = len(props)
    props.append(full_box(b"ispe", 0, 0, struct.pack(">II", t, t)))
    tile_ispe = len(props)
    props.append(full_box(b"ispe", 0, 0, struct.pack(">II", w, h)))
    grid_ispe = len(props)
    props.append(full_box(b"pixi", 0, 0, bytes([3, 8, 8, 8])))
    pixi = len(props)
    colr = None
    if tiles[0][1] is not None:
        props.append(tiles[0][1])
        colr = len(props)
    transforms = []
    if a.rotate:
        props.append(box(b"irot", bytes([a.rotate])))
        transforms.append(len(props))
    if a.mirror >= 0:
        props.append(box(b"imir", bytes([a.mirror])))
        transforms.append(len(props))

    def assoc(item, idx, essential):
        return struct.pack(">HB", item, len(idx)) + bytes(
            (0x80 if e else 0) | i for i, e in zip(idx, essential))

    ipma = struct.pack(">I", n + 1)
    for i, (hvcc, _, _) in enumerate(tiles):
        idx = [hvcc_index[hvcc], tile_ispe] + ([colr] if colr else [])
        ipma += assoc(i + 1, idx, [1, 0] + ([0] if colr else []))
    gidx = [grid_ispe, pixi] + ([colr] if colr else []) + transforms
    ipma += assoc(grid_id, gidx, [0, 0] + ([0] if colr else []) + [1] * len(transforms))

    infe = b"".join(
        full_box(b"infe", 2, 1, struct.pack(">HH4s", i + 1, 0, b"hvc1") + b"\0") for i in range(n))
    infe += full_box(b"infe", 2, 0, struct.pack(">HH4s", grid_id, 0, b"grid") + b"\0")
    iinf = full_box(b"iinf", 0, 0, struct.pack(">H", n + 1) + infe)
    grid_data = struct.pack(">BBBBHH", 0, 0, rows - 1, cols - 1, w, h)
    iref = full_box(b"iref", 0, 0, box(b"dimg", struct.pack(">HH", grid_id, n) +
                                       b"".join(struct.pack(">H", i + 1) for i in range(n))))
    hdlr = full_box(b"hdlr", 0, 0, struct.pack(">I4s12x", 0, b"pict") + b"\0")
    pitm = full_box(b"pitm", 0, 0, struct.pack(">H", grid_id))
    iprp = box(b"iprp", box(b"ipco", b"".join(props)) + full_box(b"ipma", 0, 0, ipma))
    idat = box(b"idat", grid_data)
    ftyp = box(b"ftyp", b"heic" + struct.pack(">I", 0) + b"mif1heicmiaf")

    def iloc(mdat_start):
        body = struct.pack(">BBH", 0x44, 0x00, n + 1)
        off = mdat_start
        for i, (_, _, data) in enumerate(tiles):
            if a.share:
                data = tiles[0][2]
            body += struct.pack(">HHHHII", i + 1, 0, 0, 1, off, len(data))
            off += 0 if a.share else len(data)
        body += struct.pack(">HHHHII", grid_id, 1, 0, 1, 0, len(grid_data))
        return full_box(b"iloc", 1, 0, body)

    def meta(mdat_start):
        return full_box(b"meta", 0, 0, hdlr + pitm + iinf + iref + iprp + idat + iloc(mdat_start))

    head = ftyp + meta(0)
    head = ftyp + meta(len(head) + 8)  # the same length: iloc's offsets are fixed-size
    mdat = box(b"mdat", tiles[0][2] if a.share else b"".join(d for _, _, d in tiles))
    with open(a.dst, "wb") as f:
        f.write(head + mdat)


if __name__ == "__main__":
    main()
