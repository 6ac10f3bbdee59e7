"""Writes gn_noaffine.onnx, which tests/cli/onnx.sh reads as a refusal (run from tests/onnx): Conv2d(3, 8, 3)
on [N, 3, 8, 8] images, nn.GroupNorm(2, 8, affine=False), ReLU, a global average pool and Linear(8, 3),
exported by Debian's PyTorch (opset 17, training mode, a dynamic batch). It is refused at the Mul by a
constant after the Reshape back: batchfit's groupnorm learns its scale and shift. (nn.InstanceNorm2d's
default, affine=False, is fuzz/corpus/onnx/unsupported_instancenorm.onnx.) export.py's gn_cnn has the forms
batchfit reads, checked against PyTorch (onnx_torch)."""
import sys

import torch
import torch.nn as nn
from torch.onnx import TrainingMode


def main():
    for name, norm in (("gn_noaffine", nn.GroupNorm(2, 8, affine=False)),):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(3, 8, 3), norm, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
        torch.onnx.export(m, torch.randn(2, 3, 8, 8), f"{name}.onnx", opset_version=17,
                          training=TrainingMode.TRAINING, do_constant_folding=False, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return 0


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    sys.exit(main())
