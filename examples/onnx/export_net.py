import torch
import torch.nn as nn
from torch.onnx import TrainingMode


class Net(nn.Module):
    """A small CNN for 28x28 grayscale images, 10 classes."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Net().train()                      # training mode: batch norm and dropout stay in the graph
    torch.onnx.export(model, torch.randn(1, 1, 28, 28), "net.onnx",
                      opset_version=17, training=TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
