#!/usr/bin/env python3
"""ckpt_torch.py SPEC CHECKPOINT N LOSS ACC: a batchfit checkpoint loads in
PyTorch as weights. Its tensors are read with the plain safetensors layout
(8-byte header length, JSON header, raw data); the model's go into the
equivalent torch.nn.Sequential with load_state_dict(strict=True), the
checkpoint's own (optimizer.*, gradnorm.prev.*) are set aside. The first N
Fashion-MNIST test images, normalised with the mean and std in the
checkpoint's metadata as batchfit does, then give the loss and accuracy
that `batchfit eval` gave (LOSS, ACC): loss to 1e-5 relative, accuracy to one
sample. Exit 0 if so, 1 otherwise."""
import gzip, os, struct, sys
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weights_check import build, read_safetensors  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
OWN = ("optimizer.", "gradnorm.prev.")


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    dims = [n] + list(struct.unpack(">" + "I" * ((magic & 0xFF) - 1), raw[8:8 + 4 * ((magic & 0xFF) - 1)]))
    off = 4 + 4 * (magic & 0xFF)
    return torch.frombuffer(bytearray(raw[off:]), dtype=torch.uint8).reshape(dims)


def main():
    spec, ckpt, n, want_loss, want_acc = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    tensors, meta = read_safetensors(ckpt)
    if meta.get("format") != "batchfit-checkpoint":
        print(f"ckpt_torch: {ckpt}: format {meta.get('format')}, not a checkpoint")
        return 1
    own = {k: v for k, v in tensors.items() if k.startswith(OWN)}
    weights = {k: v for k, v in tensors.items() if not k.startswith(OWN)}
    model = build(spec)
    model.load_state_dict(weights, strict=True)
    model.eval()
    mean = float(meta["normalize_mean"])
    std = float(meta["normalize_std"])
    x = idx(f"{DATA}/t10k-images-idx3-ubyte.gz")[:n].reshape(n, 1, 28, 28)
    y = idx(f"{DATA}/t10k-labels-idx1-ubyte.gz")[:n].long()
    x = (x.float() / 255.0 - mean) / std
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    print(f"ckpt_torch: {len(weights)} weight tensors loaded strictly, {len(own)} of the checkpoint's own set aside; "
          f"torch loss {loss:.6f} acc {acc:.4f}, batchfit eval loss {want_loss:.6f} acc {want_acc:.4f}")
    ok = abs(loss - want_loss) <= 1e-5 * abs(want_loss) + 1e-6 and abs(acc - want_acc) <= 1.0 / n + 1e-9
    return 0 if ok and own else 1


if __name__ == "__main__":
    sys.exit(main())
