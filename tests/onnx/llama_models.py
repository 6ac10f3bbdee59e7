"""Writes the LLaMA-style language models tests/cli/onnx.sh and test_cuda_ops read (run from tests/onnx),
exported by Debian's PyTorch as token_models.py exports its GPTs (opset 17, training mode, a dynamic batch,
int64 token ids [batch, 32]):

- llama_text.onnx: export.py's Llama (RMSNorm, SwiGLU, no position embedding, an untied head; the first
  block's attention nanoGPT's, the second's LLaMA's own with wq, wk, wv and the mask made in forward) with a
  byte vocabulary (256 ids), 32 tokens of context, width 16, 2 heads, 2 blocks, a SwiGLU of 32: what
  cli_onnx trains on a text;
- ../../fuzz/corpus/onnx/llama_ok.onnx: the same file, the fuzzer's seed, which test_cuda_ops trains on the
  GPU against the CPU.

export.py's llama_mini is the same structure checked against PyTorch (onnx_torch)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import Llama  # noqa: E402
from token_models import export  # noqa: E402


def main():
    for path in ("llama_text.onnx", "../../fuzz/corpus/onnx/llama_ok.onnx"):
        torch.manual_seed(0)
        export(Llama(V=256, T=32, C=16, H=2, L=2, hidden=32), path)


if __name__ == "__main__":
    main()
