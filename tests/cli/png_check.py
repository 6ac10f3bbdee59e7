#!/usr/bin/env python3
"""png_check.py - a screenshot is a real picture: a PNG of the expected size
that is not blank (many colours, a fair share of ink). Standard library only.

    png_check.py FILE WIDTH HEIGHT
"""
import struct
import sys
import zlib


def decode(path):
    """Width, height, bytes per pixel and the rows of an 8-bit RGB(A) PNG."""
    d = open(path, "rb").read()
    if d[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG file")
    pos, idat, hdr = 8, b"", None
    while pos < len(d):
        n, kind = struct.unpack(">I4s", d[pos:pos + 8])
        body = d[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if not hdr or not idat:
        sys.exit(f"{path}: a PNG without a header or image data")
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        sys.exit(f"{path}: unexpected PNG format {hdr}")
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev, i = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if f == 2:
            line = bytearray((x + y) & 255 for x, y in zip(line, prev))
        elif f:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b = prev[x]
                if f == 1:
                    line[x] = (line[x] + a) & 255
                elif f == 3:
                    line[x] = (line[x] + (a + b) // 2) & 255
                else:
                    c = prev[x - bpp] if x >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    path, want_w, want_h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    w, h, bpp, rows = decode(path)
    if (w, h) != (want_w, want_h):
        sys.exit(f"{path}: {w}x{h}, expected {want_w}x{want_h}")
    colours, ink = set(), 0
    for r in rows:
        for x in range(0, len(r), bpp):
            px = r[x:x + 3]
            colours.add(px)
            ink += px != b"\xff\xff\xff"
    share = ink / (w * h)
    if len(colours) < 16:
        sys.exit(f"{path}: only {len(colours)} colour(s): a blank page?")
    if not 0.02 <= share <= 0.8:
        sys.exit(f"{path}: {100 * share:.1f}% of the pixels are not white: expected 2% to 80%")
    print(f"ok: {path}: {w}x{h}, {len(colours)} colours, {100 * share:.1f}% ink")


if __name__ == "__main__":
    main()
