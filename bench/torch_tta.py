#!/usr/bin/python3
"""torch_tta.py - the PyTorch side of bench/time_to_acc.py: the recipe of
bench/time_to_acc.c (bfit_tta) in PyTorch, with a fixed batch.

    torch_tta.py MODEL.cfg BATCH [key=value ...]

keys as bfit_tta's: lr (for a batch of lr_ref; 0.05), lr_ref (128), target
(0.91), max_epochs (10), eval_every (samples, 6000), threads (2), seed (1),
wd (5e-4), momentum (0.9), warmup (samples of linear warm-up from 0, 0),
data (an MNIST-format directory; default Fashion-MNIST's), schedule
(constant or cosine: over max_epochs' steps after the warm-up, to 0, as
batchfit's), full (1: train all max_epochs; final_acc is the last accuracy).

The model is the nn.Sequential of the spec (torch_peer.build), trained with
SGD (momentum, weight decay) at lr * BATCH / lr_ref on the training split,
standardised by its mean and standard deviation, shuffled every epoch, the
last batch of an epoch the remainder; cross-entropy, mean over the batch.
Every eval_every samples (and at each epoch's end) the whole test split is
evaluated; the time is that of the training steps alone (taking the batch,
zero_grad, forward, loss, backward, the update), evaluation excluded.
Prints an `eval` line per evaluation and one `side=torch` result line; the
BLAS it loaded is in blas= (bench/compare.py's check).
"""
import gzip
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import build, loaded_blas  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    """An IDX file (gzipped or not) as a numpy array."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    zero, dtype, nd = struct.unpack(">HBB", raw[:4])
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    assert zero == 0 and dtype == 0x08, path
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(d, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"torch_tta.py: no {stem} in {d}")


def load(d, shape):
    xs, ys = {}, {}
    for split, stem in (("train", "train"), ("test", "t10k")):
        xs[split] = torch.from_numpy(idx(find(d, f"{stem}-images-idx3-ubyte")).astype(np.float32) / 255.0)
        ys[split] = torch.from_numpy(idx(find(d, f"{stem}-labels-idx1-ubyte")).astype(np.int64))
    mean, std = xs["train"].mean(), xs["train"].std()
    for s in xs:
        xs[s] = ((xs[s] - mean) / std).reshape(-1, *shape).contiguous()
    return xs["train"], ys["train"], xs["test"], ys["test"]


def accuracy(model, x, y):
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            right += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return right / len(x)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: torch_tta.py MODEL.cfg BATCH [key=value ...]")
    o = dict(lr=0.05, lr_ref=128, target=0.91, max_epochs=10, eval_every=6000, threads=2, seed=1, wd=5e-4,
             momentum=0.9, warmup=0, data=DATA, schedule="constant", full=0)
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        if k not in o:
            sys.exit(f"torch_tta.py: unknown key {k}")
        o[k] = type(o[k])(v) if not isinstance(o[k], float) else float(v)
    batch = int(sys.argv[2])
    torch.set_num_threads(o["threads"])
    torch.manual_seed(o["seed"])
    model, shape, _ = build(sys.argv[1])
    xtr, ytr, xte, yte = load(o["data"], shape)
    lr = o["lr"] * batch / o["lr_ref"]
    warm = o["warmup"] // batch
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=o["momentum"], weight_decay=o["wd"])
    lossf = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(o["seed"])
    n, step, samples, train_s, next_eval = len(xtr), 0, 0, 0.0, o["eval_every"]
    total = o["max_epochs"] * ((n + batch - 1) // batch)
    if o["schedule"] not in ("constant", "cosine"):
        sys.exit(f"torch_tta.py: schedule must be constant or cosine, not {o['schedule']}")
    reached, acc = None, 0.0
    for epoch in range(o["max_epochs"]):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            t0 = time.perf_counter()
            j = perm[i:i + batch]
            x, y = xtr[j], ytr[j]
            for g in opt.param_groups:
                g["lr"] = lr * (step / warm if step < warm else 1.0 if o["schedule"] == "constant"
                                else (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))) / 2)
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            train_s += time.perf_counter() - t0
            step += 1
            samples += len(j)
            if samples < next_eval and i + batch < n:
                continue
            if samples >= next_eval:
                next_eval += o["eval_every"]
            acc = accuracy(model, xte, yte)
            print(f"eval samples={samples} steps={step} train_s={train_s:.3f} acc={acc:.4f} loss={loss.item():.4f}",
                  flush=True)
            if acc >= o["target"] and not reached:
                reached = (train_s, samples, step)
                if not o["full"]:
                    break
        if reached and not o["full"]:
            break
    blas, _ = loaded_blas()
    t, s, k = reached or (train_s, samples, step)
    print(f"side=torch batch={batch} reached={int(bool(reached))} time_s={t:.3f} samples={s} steps={k} "
          f"final_acc={acc:.4f} train_s={train_s:.3f} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"blas={blas}")


if __name__ == "__main__":
    main()
