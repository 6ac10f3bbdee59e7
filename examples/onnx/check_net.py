import gzip, json, struct, sys
import numpy as np
import torch
from export_net import Net


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {k: torch.frombuffer(bytearray(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                                   dtype=torch.float32).reshape(v["shape"]) for k, v in header.items()}
    return tensors, meta


def idx(path):
    raw = gzip.open(path).read()
    dims = struct.unpack(">I", raw[:4])[0] & 0xff
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


weights, meta = read_safetensors("net.safetensors")
model = Net()
print(model.load_state_dict(weights))  # strict: every tensor, by name
model.eval()

d = "/usr/share/datasets/fashion-mnist/"
x = torch.from_numpy(idx(d + "t10k-images-idx3-ubyte.gz").astype(np.float32) / 255).unsqueeze(1)
y = torch.from_numpy(idx(d + "t10k-labels-idx1-ubyte.gz").astype(np.int64))
mean, std = float(meta["normalize_mean"]), float(meta["normalize_std"])  # what batchfit trained with
with torch.no_grad():
    pred = model((x - mean) / std).argmax(1)
print(f"PyTorch, batchfit's weights: test accuracy {(pred == y).float().mean().item():.2%}")
