#!/usr/bin/python3
"""img_loader.py - decode + augment images/s at 224x224: batchfit's loader
against PyTorch's DataLoader with torchvision's transforms, the same number
of workers, in one run.

Both sides read the same folder of about-256x256 JPEGs (scripts/img_folders.py
bench), make RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize samples in batches of 64, and are timed over the same number of
samples after one warm-up batch. batchfit: bfit_img_loader (build/bench/),
its loader threads; PyTorch: DataLoader(num_workers=N) worker processes
(PIL decoding). The sides alternate, PAIRS times, and the medians are
compared.

  bench/img_loader.py [--build build] [--workers 1,2] [--count 2000] [--samples 1000]
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TORCH_SIDE = r'''
import sys, time, torch, torchvision
import torchvision.transforms as T
from torch.utils.data import DataLoader
d, workers, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = torchvision.datasets.ImageFolder(d, tf)
dl = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, drop_last=False, persistent_workers=workers > 0)
n, t0, first = 0, None, True
while n < samples:
    for x, y in dl:
        if first:  # warm-up batch: workers started, caches warm
            first, t0 = False, time.perf_counter()
            continue
        n += x.shape[0]
        if n >= samples:
            break
print(f"samples_per_s={n / (time.perf_counter() - t0):.1f}")
'''


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(out.split("samples_per_s=")[1].split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=f"{ROOT}/build")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--count", type=int, default=2000, help="images in the generated folder")
    ap.add_argument("--samples", type=int, default=1000, help="samples timed per side")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--data", help="an existing folder instead of a generated one")
    a = ap.parse_args()
    import torch, torchvision, PIL
    exe = f"{a.build}/bench/bfit_img_loader"
    with tempfile.TemporaryDirectory() as tmp:
        data = a.data
        if not data:
            data = f"{tmp}/imgs"
            subprocess.run([sys.executable, f"{ROOT}/scripts/img_folders.py", "bench", data, "--count", str(a.count)],
                           check=True)
        print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, "
              f"torchvision {torchvision.__version__}, PIL {PIL.__version__} (libjpeg-turbo through PIL); batchfit: "
              f"TurboJPEG + libspng; {a.samples} samples of RandomResizedCrop(224)+flip+normalise per side, "
              f"median of {a.pairs}; no BLAS on either side (decode and resample only)")
        print(f"{'workers':>7} {'batchfit/s':>11} {'pytorch/s':>10} {'ratio':>6}")
        for w in (int(x) for x in a.workers.split(",")):
            bf, pt = [], []
            for p in range(a.pairs):
                sides = [("bf", [exe, data, "resnet18", "224", str(w), str(a.samples)]),
                         ("pt", [sys.executable, "-c", TORCH_SIDE, data, str(w), str(a.samples)])]
                for name, cmd in (sides if p % 2 == 0 else sides[::-1]):
                    (bf if name == "bf" else pt).append(run(cmd))
            b, t = statistics.median(bf), statistics.median(pt)
            print(f"{w:>7} {b:>11.0f} {t:>10.0f} {b / t:>5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
