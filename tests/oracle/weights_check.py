#!/usr/bin/env python3
"""weights_check.py SPEC WEIGHTS IO: load batchfit weights into the equivalent
torch.nn.Sequential built from a (sequential) model spec, run the forward
pass on IO's inputs "x" and compare softmax probabilities with IO's "probs".
Exit 0 if they agree (max abs difference <= 1e-4), 1 otherwise."""
import json, struct, sys
import torch
import torch.nn as nn


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        assert t["dtype"] in ("F32", "I32"), t["dtype"]
        b, e = t["data_offsets"]
        dt = torch.float32 if t["dtype"] == "F32" else torch.int32
        out[name] = torch.frombuffer(bytearray(raw[base + b:base + e]), dtype=dt).reshape(t["shape"])
    return out, meta


def build(spec_path):
    """The subset of the spec grammar that is a plain sequence of layers."""
    layers, shape = [], None
    for line in open(spec_path):
        words = line.split("#")[0].split()
        if not words:
            continue
        kw, args = words[0], words[1:]
        opts = dict(a.split("=") for a in args if "=" in a)
        pos = [a for a in args if "=" not in a]
        if kw == "input":
            shape = [int(v) for v in pos[0].split("x")]
            continue
        c = shape[0]
        if kw == "conv":
            k = int(opts.get("k", 1)); s = int(opts.get("stride", 1)); p = int(opts.get("pad", 0))
            layers.append(nn.Conv2d(c, int(pos[0]), k, s, p, bias=opts.get("bias", "1") not in ("0", "false")))
            shape = [int(pos[0]), (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
        elif kw in ("maxpool", "avgpool"):
            k = int(pos[0]); s = int(opts.get("stride", k)); p = int(opts.get("pad", 0))
            layers.append((nn.MaxPool2d if kw == "maxpool" else nn.AvgPool2d)(k, s, p))
            shape = [c, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
        elif kw == "relu":
            layers.append(nn.ReLU())
        elif kw == "gelu":
            layers.append(nn.GELU())
        elif kw == "flatten":
            layers.append(nn.Flatten())
            n = 1
            for v in shape:
                n *= v
            shape = [n]
        elif kw == "linear":
            layers.append(nn.Linear(shape[0], int(pos[0]), bias=opts.get("bias", "1") not in ("0", "false")))
            shape = [int(pos[0])]
        elif kw == "dropout":
            layers.append(nn.Dropout(float(pos[0]) if pos else float(opts.get("p", 0.5))))
        elif kw == "batchnorm":
            layers.append(nn.BatchNorm2d(c) if len(shape) == 3 else nn.BatchNorm1d(c))
        else:
            raise SystemExit(f"weights_check: layer '{kw}' is not handled here")
    return nn.Sequential(*layers)


def main():
    spec, weights, io = sys.argv[1:4]
    model = build(spec)
    w, meta = read_safetensors(weights)
    state = {k: v for k, v in w.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("num_batches_tracked")]
    if missing or unexpected:
        print(f"weights_check: missing {missing}, unexpected {unexpected}")
        return 1
    model.eval()
    data, _ = read_safetensors(io)
    with torch.no_grad():
        probs = torch.softmax(model(data["x"]), dim=1)
    diff = (probs - data["probs"]).abs().max().item()
    agree = (probs.argmax(1) == data["probs"].argmax(1)).float().mean().item()
    print(f"weights_check: {spec}: {len(w)} tensors, max |p_torch - p_batchfit| = {diff:.3g}, arg-max agreement {agree:.3f}, format={meta.get('format')}")
    return 0 if diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
