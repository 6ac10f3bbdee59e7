#!/usr/bin/env python3
"""torch2.py BATCHFIT OUTDIR [NAME...]: the GPU machine's own PyTorch (2.x,
where the project's tests run Debian's 1.13) exports torchvision's models to
ONNX as batchfit.torch.export does (opset 17, training mode, a dynamic
batch; the TorchScript exporter, dynamo=False, where torch has the choice),
and each file is planned and trained by batchfit on the GPU: does an export
of the PyTorch users have import, plan and train? Also says which of the
Python package's own dependencies (numpy; ctypes is Python's; onnx not since 2026-12-04) this Python has.

Models (10 classes): resnet18 and the ones whose layers reach the GPU's newer
ops: mobilenet_v3_small and efficientnet_b0 (squeeze-and-excitation's channel
scaling), densenet121 (concatenations), vit_b_16 at 224x224 (the class
token's concatenation, the patches' transpose, the position embedding's add
and the class token's slice), convnext_tiny (channels-last transposes, layer
scales) and shufflenet_v2_x1_0 (channel slices and shuffles); sdpa_vit, two
timm-style blocks whose attention is F.scaled_dot_product_attention (PyTorch
2 only: its export scales q and k^T by sqrt(scale), which Debian's 1.13
cannot show; onnx_mhsa.c reads it); sdpa_gpt, nanoGPT with
F.scaled_dot_product_attention(is_causal=True) (its export builds the causal
mask from Trilu; onnx_mhsa.c reads an added causal mask), trained on
synthetic byte tokens."""
import importlib
import inspect
import os
import subprocess
import sys
import time
import warnings

import torch
import torchvision

MODELS = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "densenet121", "vit_b_16", "convnext_tiny",
          "shufflenet_v2_x1_0", "sdpa_vit", "sdpa_gpt"]


class SdpaBlock(torch.nn.Module):
    """timm's pre-norm block with its fused attention: F.scaled_dot_product_attention."""

    def __init__(self, dim, heads):
        super().__init__()
        nn = torch.nn
        self.n1, self.qkv, self.proj, self.heads = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads
        self.n2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.n2(x))


class SdpaVit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.blocks = torch.nn.Conv2d(3, 192, 16, stride=16), torch.nn.Sequential(SdpaBlock(192, 3),
                                                                                             SdpaBlock(192, 3))
        self.norm, self.head = torch.nn.LayerNorm(192), torch.nn.Linear(192, 10)

    def forward(self, x):
        x = self.stem(x)
        n, c, h, w = x.shape
        x = self.blocks(x.reshape(n, c, h * w).permute(0, 2, 1))
        return self.head(self.norm(x)[:, 0])


class SdpaGpt(torch.nn.Module):
    """nanoGPT as it runs on PyTorch 2: F.scaled_dot_product_attention(is_causal=True), whose export makes
    the causal mask in the graph (Expand of ones, Trilu, Where: the host's shape arithmetic), byte tokens."""

    def __init__(self, V=256, T=64, C=128, H=4):
        super().__init__()
        nn = torch.nn
        self.wte, self.wpe, self.heads = nn.Embedding(V, C), nn.Embedding(T, C), H
        self.n1, self.qkv, self.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.n2, self.mlp = nn.LayerNorm(C), nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))
        self.nf, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)
        self.wte.weight = self.head.weight

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        q, k, v = self.qkv(self.n1(x)).split(x.shape[-1], dim=2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, -1))
        x = x + self.mlp(self.n2(x))
        return self.head(self.nf(x))


def have(mod):
    try:
        m = importlib.import_module(mod)
        return getattr(m, "__version__", "present")
    except Exception as e:  # a missing or broken package: say which
        return f"missing ({type(e).__name__}: {e})"


def build(name):
    if name == "sdpa_vit":
        return SdpaVit()
    if name == "sdpa_gpt":
        return SdpaGpt()
    if name in ("efficientnet_b0", "convnext_tiny"):  # stochastic depth's Bernoulli does not export in training
        return getattr(torchvision.models, name)(num_classes=10, stochastic_depth_prob=0.0)
    return getattr(torchvision.models, name)(num_classes=10)


def export(name, path):
    kw = dict(opset_version=17, do_constant_folding=False, input_names=["input"], output_names=["logits"],
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
              training=torch.onnx.TrainingMode.TRAINING)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw["dynamo"] = False
    torch.manual_seed(0)
    m = build(name).train()
    t = time.time()
    with warnings.catch_warnings():  # the tracer's notes on torchvision's Python
        warnings.simplefilter("ignore")
        x = torch.zeros(2, 64, dtype=torch.long) if name == "sdpa_gpt" else torch.randn(2, 3, 224, 224)
        torch.onnx.export(m, (x,), path, **kw)
    print(f"{name}: exported in {time.time() - t:.1f} s, {os.path.getsize(path):,} bytes", flush=True)


def run(cmd, limit):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if not l.startswith("epoch")]
    print(f"$ {' '.join(cmd)}\n" + "\n".join(lines[-8:]) + f"\n(exit {p.returncode}, {time.time() - t:.1f} s)", flush=True)
    return p.returncode


PY_TRAIN = """
import copy, sys, torch, batchfit, batchfit.torch as bt
class SE(torch.nn.Module):  # a squeeze-and-excitation gate: the channel scaling op on the GPU
    def __init__(self, c):
        super().__init__()
        self.f = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(c, 4, 1), torch.nn.ReLU(),
                                     torch.nn.Conv2d(4, c, 1), torch.nn.Sigmoid())
    def forward(self, x):
        return x * self.f(x)
torch.manual_seed(0)
nn = torch.nn
m = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), SE(16), nn.MaxPool2d(2),
                  nn.Flatten(), nn.Linear(16 * 14 * 14, 10)).to(sys.argv[1])
start = copy.deepcopy(m.state_dict())
print("plan:", bt.plan(m, torch.zeros(1, 1, 28, 28, device=sys.argv[1]), device=sys.argv[1], batch=[64]).peak)
bt.train(m, data="fashion-mnist", device=sys.argv[1], epochs=1, batch=64, seed=1, epoch_samples=6000, eval_samples=1000)
r = m.batchfit_result
moved = [k for k in start if not torch.equal(start[k], m.state_dict()[k])]
dev = {str(t.device) for t in m.state_dict().values()}
where = [e.get("device") for e in r.events if e.get("event") == "start"]
print(f"trained on {where}: test accuracy {r.test_accuracy:.4f}, {r.steps} steps; "
      f"{len(moved)} of {len(start)} tensors changed; back on {dev}")
m.eval()
"""


def python_package(bf):
    """batchfit.torch with this Python: a module on the GPU in, trained there, out."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"),
               BATCHFIT_LIB=os.path.join(os.path.dirname(bf), "libbatchfit.so.0"), BATCHFIT_CLI=bf)
    t = time.time()
    p = subprocess.run([sys.executable, "-c", PY_TRAIN, os.environ.get("TORCH2_DEVICE", "cuda")], env=env, capture_output=True, text=True, timeout=300)
    print(f"batchfit.torch on the GPU:\n{p.stdout}{p.stderr[-3000:]}(exit {p.returncode}, {time.time() - t:.1f} s)",
          flush=True)
    return p.returncode


def main():
    bf, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or MODELS
    os.makedirs(out, exist_ok=True)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}")
    for mod in ("onnx", "onnxscript", "numpy"):
        print(f"  {mod}: {have(mod)}")
    bad = 0
    if not have("numpy").startswith("missing"):
        bad += python_package(bf) != 0
    else:
        print("batchfit.torch on the GPU: not tried (a dependency above is missing)")
    for name in names:
        path = os.path.join(out, name + ".onnx")
        try:
            export(name, path)
        except Exception as e:  # the exporter's many kinds
            print(f"{name}: the export failed: {type(e).__name__}: {str(e)[:400]}")
            bad += 1
            continue
        bad += run([bf, "plan", "--model", path, "--device", "cuda", "--batch", "1,32"], 120) != 0
        bad += run([bf, "train", "--model", path, "--data", "synthetic", "--device", "cuda", "--batch", "32",
                    "--epochs", "1", "--epoch-samples", "256", "--log", os.path.join(out, name + ".jsonl")], 240) != 0
        os.remove(path)
    print(f"torch2.py: {bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
