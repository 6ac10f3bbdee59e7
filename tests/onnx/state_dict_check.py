#!/usr/bin/env python3
"""state_dict_check.py NAME WEIGHTS IO: the weights batchfit saved after
training an imported torchvision model load into that model with a strict
load_state_dict (every entry, nothing else; the batch norms fill in the
num_batches_tracked that ONNX files do not carry), and
the module in eval mode gives batchfit's softmax probabilities on IO's "x"
(IO's "probs"). Exit 0 if the largest difference is at most 1e-4 (both are
float32 evaluations of probabilities in [0, 1]), 1 otherwise."""
import json, struct, sys

import torch
import torchvision


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    codes = {"F32": torch.float32, "I32": torch.int32, "F64": torch.float64}
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=codes[t["dtype"]]).reshape(t["shape"])
    return out, meta


def main():
    name, weights, io = sys.argv[1:4]
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from export import build  # the module export.py exported
    model, _ = build(name)
    w, _ = read_safetensors(weights)
    try:
        model.load_state_dict(w)
    except RuntimeError as e:
        print(f"state_dict_check: {name}: {e}")
        return 1
    state = model.state_dict()
    same = all(torch.equal(state[k], v) for k, v in w.items())
    model.eval()
    data, _ = read_safetensors(io)
    with torch.no_grad():
        probs = torch.softmax(model(data["x"]), dim=1)
    diff = (probs - data["probs"]).abs().max().item()
    print(f"state_dict_check: {name}: load_state_dict took all {len(w)} tensors (bit-exact: {same}); "
          f"max |p_torch - p_batchfit| = {diff:.3g} over {probs.numel()} probabilities")
    return 0 if same and diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
