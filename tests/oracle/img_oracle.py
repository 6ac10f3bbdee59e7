#!/usr/bin/python3
"""img_oracle.py IMG_DUMP SOURCE_DIR - the library's image decoding and
transforms against PIL's and torchvision's on the same files.

Files come from scripts/img_folders.py (Fashion-MNIST JPEGs and PNGs, colour
images of odd sizes: 4:2:0 and 4:4:4 JPEG, gray and CMYK JPEG, RGB, RGBA,
gray, gray+alpha and palette PNG; the bad files). The library's side runs in
tests/tools/img_dump.c. Where the definitions are the same (decoding, PIL's
bilinear resize, Resize + CenterCrop, resized_crop, JPEG DCT scaling against
PIL's draft mode) the pixels must be equal, bit for bit. Where they differ
by design (a JPEG decoded at reduced size against torchvision's full decode)
the difference is measured and held to a stated bound.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F

checks = 0
failures = []


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print("FAIL:", what)


class Dump:
    def __init__(self, exe, tmp):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.tmp, self.n = tmp, 0

    def __call__(self, *args):
        """Run one command; the pixels (h, w, c) or the error message."""
        self.n += 1
        out = f"{self.tmp}/out{self.n}.raw"
        self.p.stdin.write(" ".join(str(a) for a in args) + f" {out}\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline().strip()
        if answer != "ok":
            return answer
        with open(out, "rb") as f:
            w, h, c = map(int, f.readline().split())
            return np.frombuffer(f.read(), np.uint8).reshape(h, w, c)


def pil_rgb(path, c):
    im = Image.open(path).convert("RGB")
    return im if c == 3 else im.convert("L")


def arr(im):
    a = np.asarray(im)
    return a[:, :, None] if a.ndim == 2 else a


def diff(a, b):
    if isinstance(a, str):
        return a
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    return int(np.abs(a.astype(int) - b.astype(int)).max())


def exact(a, b, what):
    d = diff(a, b)
    check(d == 0, f"{what}: {d}")


def decode_checks(dump, files):
    for f in files:
        for c in (3, 1):
            exact(dump("decode", f, c, 1), arr(pil_rgb(f, c)), f"decode {os.path.basename(f)} c={c}")
        if f.endswith(".jpg") and min(Image.open(f).size) >= 64:
            for k in (2, 4, 8):
                im = Image.open(f)
                w, h = im.size
                im.draft(im.mode, (w // k, h // k))
                exact(dump("decode", f, 3, k), arr(im.convert("RGB")), f"decode 1/{k} {os.path.basename(f)}")


def transform_checks(dump, files, rng):
    for f in files:
        im = pil_rgb(f, 3)
        w, h = im.size
        for _ in range(3):  # PIL's resize with a box
            x0, y0 = rng.uniform(0, w / 2), rng.uniform(0, h / 2)
            # PIL takes the box as C floats: the same floats on both sides
            box = tuple(float(np.float32(v)) for v in (x0, y0, rng.uniform(x0 + 1, w), rng.uniform(y0 + 1, h)))
            ow, oh = int(rng.integers(1, 2 * w)), int(rng.integers(1, 2 * h))
            ref = arr(im.resize((ow, oh), Image.BILINEAR, box=box))
            exact(dump("resize", f, 3, *(f"{v:.9g}" for v in box), ow, oh), ref,
                  f"resize {os.path.basename(f)} box {box} to {ow}x{oh}")
        for (H, W, R) in ((24, 24, 28), (32, 20, 0), (64, 64, 72), (7, 9, 5)):
            tf = T.Compose([T.Resize(R if R else max(H, W)), T.CenterCrop((H, W))])
            for c in (3, 1):
                ref = arr(tf(pil_rgb(f, c)))
                exact(dump("eval", f, c, H, W, R, 0), ref, f"Resize({R})+CenterCrop({H},{W}) {os.path.basename(f)} c={c}")
        for _ in range(3):  # resized_crop on fixed parameters
            ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
            top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            H, W = int(rng.integers(4, 40)), int(rng.integers(4, 40))
            ref = arr(F.resized_crop(im, top, left, ch, cw, [H, W]))
            exact(dump("crop", f, 3, H, W, top, left, ch, cw, 0), ref,
                  f"resized_crop({top},{left},{ch},{cw})->{H}x{W} {os.path.basename(f)}")


def dct_checks(dump, f, stats):
    """Resize + CenterCrop of a large JPEG decoded at a reduced size: equal to
    PIL's draft + resize with its box; against torchvision's full decode, the
    difference measured."""
    im0 = Image.open(f)
    w, h = im0.size
    for R, H in ((120, 112), (64, 56), (240, 224)):
        nw, nh = F._compute_resized_output_size((h, w), [R]) [::-1]
        im = Image.open(f)
        _, box = im.draft("RGB", (nw, nh))
        ref = arr(F.center_crop(im.convert("RGB").resize((nw, nh), Image.BILINEAR, box=box), [H, H]))
        got = dump("eval", f, 3, H, H, R, 1)
        exact(got, ref, f"DCT-scaled Resize({R})+CenterCrop({H}) vs PIL draft {os.path.basename(f)}")
        full = arr(T.Compose([T.Resize(R), T.CenterCrop(H)])(Image.open(f).convert("RGB")))
        if not isinstance(got, str):
            d = np.abs(got.astype(int) - full.astype(int))
            stats.append((R, H, int(d.max()), float(d.mean())))


def bad_checks(dump, bad):
    expect = {"truncated.jpg": "bad JPEG data", "badcrc.png": "CRC", "huge.png": "60000 x 60000",
              "huge.jpg": "60000 x 60000", "notimage.jpg": "neither JPEG nor PNG"}
    for name, words in expect.items():
        p = f"{bad}/{name}"
        for c in (3, 1):
            got = dump("decode", p, c, 1)
            check(isinstance(got, str) and got.startswith("error:") and p in got and words in got,
                  f"{name}: expected an error naming it with '{words}', got {got if isinstance(got, str) else 'pixels'}")
    for name in ("good.jpg", "good.png"):
        exact(dump("decode", f"{bad}/{name}", 3, 1), arr(pil_rgb(f"{bad}/{name}", 3)), f"decode {name}")


def main():
    exe, src = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("img_folders", f"{src}/scripts/img_folders.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        gen.colour(f"{tmp}/colour", 10, 3)
        gen.fmnist(f"{tmp}/fm_jpg", 2, "jpg", "train")
        gen.fmnist(f"{tmp}/fm_png", 1, "png", "train")
        gen.bad(f"{tmp}/bad")
        files = sorted(os.path.join(r, n) for d in ("colour", "fm_jpg", "fm_png") for r, _, ns in
                       os.walk(f"{tmp}/{d}") for n in ns)
        dump = Dump(exe, tmp)
        decode_checks(dump, files)
        transform_checks(dump, [f for f in files if "colour" in f] + files[-3:], rng)
        stats = []
        for f in files:
            if Image.open(f).size == (640, 480):
                dct_checks(dump, f, stats)
        bad_checks(dump, f"{tmp}/bad")
        dump.p.stdin.close()
        dump.p.wait()
    for R, H, mx, mean in stats:
        print(f"DCT-scaled decode vs torchvision's full decode, Resize({R})+CenterCrop({H}) of 640x480: "
              f"max |diff| {mx}, mean |diff| {mean:.3f} (of 255)")
        # stated bound (docs/data.md): the mean difference under 2 levels of 255
        check(mean < 2.0, f"DCT-scaled vs full decode mean difference {mean:.3f} over 2")
    if failures:
        print(f"img_oracle: {len(failures)} of {checks} checks failed")
        return 1
    print(f"img_oracle: all {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
