#!/usr/bin/python3
"""img_folders.py - write image folders for tests and benchmarks (PIL).

  img_folders.py fmnist OUT [--per-class N] [--format jpg|png] [--split train|test]
      Fashion-MNIST images (/usr/share/datasets/fashion-mnist) as OUT/<class>/<i>.<fmt>,
      the first N of each class of the split, 28x28 gray.
  img_folders.py colour OUT [--per-class N] [--seed S]
      a small colour set of odd sizes (JPEG and PNG, RGB/gray/RGBA/palette/CMYK),
      three classes of smooth gradients with noise, so it can be learnt a little.
  img_folders.py bench OUT [--count N] [--seed S]
      JPEGs of about 256x256 (sizes 240..300), 10 classes, for bench/img_loader.py.
  img_folders.py bad OUT
      the bad files: a truncated JPEG, a PNG with a bad CRC, a 60000x60000 header
      (JPEG and PNG), a text file named .jpg; and a good one of each kind beside them.
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle_boot"]


def read_idx(path):
    op = gzip.open if os.path.exists(path + ".gz") else open
    with op(path + ".gz" if os.path.exists(path + ".gz") else path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    nd = magic & 0xff
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)


def fmnist(out, per_class, fmt, split):
    pre = "train" if split == "train" else "t10k"
    x = read_idx(f"{FMNIST}/{pre}-images-idx3-ubyte")
    y = read_idx(f"{FMNIST}/{pre}-labels-idx1-ubyte")
    for c, name in enumerate(CLASSES):
        os.makedirs(f"{out}/{name}", exist_ok=True)
        for k, i in enumerate(np.nonzero(y == c)[0][:per_class]):
            im = Image.fromarray(x[i], "L")
            if fmt == "jpg":
                im.save(f"{out}/{name}/{k:05d}.jpg", quality=90)
            else:
                im.save(f"{out}/{name}/{k:05d}.png")


def smooth(rng, w, h, cls):
    """A gradient whose direction depends on the class, plus noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = [xx / max(w - 1, 1), yy / max(h - 1, 1), (xx + yy) / max(w + h - 2, 1)][cls % 3]
    img = np.stack([base, 1 - base, 0.5 + 0.5 * np.sin(6 * base)], -1) * 200 + 20
    img = img + rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# (width, height, how it is saved)
COLOUR_KINDS = [
    (37, 53, "jpg420"), (300, 211, "jpg444"), (53, 37, "gray.jpg"), (64, 48, "cmyk.jpg"),
    (45, 45, "rgb.png"), (33, 70, "rgba.png"), (70, 33, "gray.png"), (50, 41, "pal.png"),
    (640, 480, "jpg420"), (19, 400, "la.png"),
]


def save_kind(arr, path, kind):
    im = Image.fromarray(arr, "RGB")
    if kind == "jpg420":
        im.save(path + ".jpg", quality=85, subsampling=2)
    elif kind == "jpg444":
        im.save(path + ".jpg", quality=92, subsampling=0)
    elif kind == "gray.jpg":
        im.convert("L").save(path + ".jpg", quality=90)
    elif kind == "cmyk.jpg":
        im.convert("CMYK").save(path + ".jpg", quality=90)
    elif kind == "rgb.png":
        im.save(path + ".png")
    elif kind == "rgba.png":
        a = Image.fromarray((np.arange(arr.shape[0] * arr.shape[1]) % 256).astype(np.uint8)
                            .reshape(arr.shape[:2]), "L")
        im.putalpha(a)
        im.save(path + ".png")
    elif kind == "gray.png":
        im.convert("L").save(path + ".png")
    elif kind == "la.png":
        im.convert("LA").save(path + ".png")
    elif kind == "pal.png":
        im.convert("P", palette=Image.ADAPTIVE, colors=50).save(path + ".png")


def colour(out, per_class, seed):
    rng = np.random.default_rng(seed)
    for c in range(3):
        d = f"{out}/class{c}"
        os.makedirs(d, exist_ok=True)
        for k in range(per_class):
            w, h, kind = COLOUR_KINDS[(k + c) % len(COLOUR_KINDS)]
            save_kind(smooth(rng, w, h, c), f"{d}/{k:03d}_{kind.replace('.', '_')}", kind)


def bench(out, count, seed):
    rng = np.random.default_rng(seed)
    for i in range(count):
        c = i % 10
        d = f"{out}/c{c}"
        os.makedirs(d, exist_ok=True)
        w, h = int(rng.integers(240, 301)), int(rng.integers(240, 301))
        Image.fromarray(smooth(rng, w, h, c), "RGB").save(f"{d}/{i:06d}.jpg", quality=90)


def png_chunk(kind, data, good_crc=True):
    crc = zlib.crc32(kind + data) & 0xffffffff
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc if good_crc else crc ^ 1)


def bad(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    arr = smooth(rng, 160, 120, 0)
    Image.fromarray(arr, "RGB").save(f"{out}/good.jpg", quality=90)
    Image.fromarray(arr, "RGB").save(f"{out}/good.png")
    data = open(f"{out}/good.jpg", "rb").read()
    open(f"{out}/truncated.jpg", "wb").write(data[:len(data) // 2])
    png = bytearray(open(f"{out}/good.png", "rb").read())
    # the IDAT chunk's CRC flipped (its data intact)
    at = png.index(b"IDAT") - 4
    n, = struct.unpack(">I", png[at:at + 4])
    png[at + 8 + n] ^= 0xff
    open(f"{out}/badcrc.png", "wb").write(bytes(png))
    # a valid PNG header claiming 60000 x 60000 RGB pixels (10 GB decoded)
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1000)
    open(f"{out}/huge.png", "wb").write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
                                        + png_chunk(b"IEND", b""))
    # the JPEG's SOF0 dimensions rewritten to 60000 x 60000
    j = bytearray(data)
    sof = j.index(b"\xff\xc0")
    j[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    open(f"{out}/huge.jpg", "wb").write(bytes(j))
    open(f"{out}/notimage.jpg", "w").write("this is a text file with an image's name\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["fmnist", "colour", "bench", "bad"])
    ap.add_argument("out")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--format", choices=["jpg", "png"], default="jpg")
    ap.add_argument("--split", choices=["train", "test"], default="train")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.what == "fmnist":
        fmnist(a.out, a.per_class, a.format, a.split)
    elif a.what == "colour":
        colour(a.out, a.per_class, a.seed)
    elif a.what == "bench":
        bench(a.out, a.count, a.seed)
    else:
        bad(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
