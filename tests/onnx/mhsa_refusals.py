"""Writes the hand-written attentions tests/cli/onnx.sh reads (run from tests/onnx): each is
Conv2d(3, 8, 4, stride=4) on [N, 3, 8, 8] images (4 tokens of 8), one self-attention block of 2 heads
written out, then token 0 and Linear(8, 3), exported by Debian's PyTorch (opset 17, training mode, a
dynamic batch), differing in what the attention does that batchfit's attention layer does not:

- mhsa_noscale.onnx: timm's form without the 1/sqrt(d) scale (refused at the Softmax, naming the scale);
- mhsa_mask.onnx: minGPT's form with a mask that is not causal, masked_fill by a triu buffer (a token
  sees itself and the tokens after it; refused where the mask meets the scores: the causal mask, tril,
  is the one batchfit reads, export.py's gpt_mini);
- mhsa_dropout.onnx: timm's form with attn_drop p = 0.1 (refused at that Dropout until 2026-12-05; since,
  the attention layer's dropout on its weights: cli_onnx trains it);
- mhsa_qdrop.onnx: timm's form with a dropout of p = 0.1 on q (refused at that Dropout: the attention layer
  drops only its weights);
- mhsa_ok.onnx: timm's form as batchfit reads it, moved to fuzz/corpus/onnx/ (the fuzzer's seed;
  cli_onnx trains it; test_cuda_ops trains it on the GPU against the CPU).

tests/onnx/export.py's mhsa_mini has the forms batchfit reads, checked against PyTorch (onnx_torch)."""
import os
import sys

import torch
import torch.nn as nn
from torch.onnx import TrainingMode


class Attn(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1 if form in ("dropout", "qdrop") else 0.0)
        self.register_buffer("bias", torch.triu(torch.ones(4, 4)).view(1, 1, 4, 4))

    def forward(self, x):
        B, T, C = x.shape
        if self.form == "mask":
            q, k, v = (t.view(B, T, 2, 4).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / 2.0)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        else:
            q, k, v = self.qkv(x).reshape(B, T, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
            if self.form == "qdrop":
                q = self.drop(q)
            att = q @ k.transpose(-2, -1) * (1.0 if self.form == "noscale" else 0.5)
        att = att.softmax(dim=-1)
        y = ((att if self.form == "qdrop" else self.drop(att)) @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class Net(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.stem, self.attn, self.head = nn.Conv2d(3, 8, 4, stride=4), Attn(form), nn.Linear(8, 3)

    def forward(self, x):
        x = self.stem(x)
        n, c, h, w = x.shape
        x = x.reshape(n, c, h * w).permute(0, 2, 1)
        return self.head(self.attn(x)[:, 0])


def main():
    for form in ("noscale", "mask", "dropout", "qdrop", "ok"):
        torch.manual_seed(0)
        torch.onnx.export(Net(form), torch.randn(2, 3, 8, 8), f"mhsa_{form}.onnx", opset_version=17,
                          training=TrainingMode.TRAINING, do_constant_folding=False, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    os.replace("mhsa_ok.onnx", "../../fuzz/corpus/onnx/mhsa_ok.onnx")
    return 0


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    sys.exit(main())
