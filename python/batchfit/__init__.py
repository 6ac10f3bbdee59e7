"""batchfit from Python: the exact memory plan, the batch finder and
training with the batch size managed, on the C library (libbatchfit.so)
through ctypes (no compiler and no package beyond Python's own needed;
NumPy for arrays and weights).

    import batchfit
    p = batchfit.plan("resnet18", memory="11GiB", batch=[1, 32, 64])
    print(p)                       # the table `batchfit plan` prints
    p.largest_batch, p.peak[64]    # figures, from the result's JSON (p.json)
    f = batchfit.find("mlp", memory="512MiB")
    r = batchfit.train("mlp", data=(x, y), batch="auto", epochs=2, on_event=print)
    r.test_accuracy, r.weights["0.weight"]
    batchfit.report("run.jsonl", "run.html")

Keyword arguments are the command line's options (micro_batch=16 is
--micro-batch 16). Failures raise batchfit.Error (ValueError,
FileNotFoundError, MemoryError... where those fit). batchfit.torch takes
a PyTorch nn.Module in and out. docs/python.md is the guide.
"""
from ._errors import (ArgumentTypeError, DeviceError, Error, FileError, FileNotFound, FormatError,
                      Interrupted, InvalidArgumentError, MissingFileArgument, OutOfMemoryError, PeerError, StateError, StoppedError)
from ._lib import LIBRARY_PATH
from ._api import evaluate, find, format_size, options, parse_size, plan, read_weights, report, train, version
from ._results import Find, Plan, Result, Training

__version__ = version()

__all__ = ["plan", "find", "train", "evaluate", "report", "version", "options", "parse_size", "format_size",
           "read_weights", "Plan", "Find", "Training", "Result", "Error", "InvalidArgumentError",
           "ArgumentTypeError", "FileError", "FileNotFound", "FormatError", "OutOfMemoryError", "DeviceError",
           "MissingFileArgument", "StateError", "StoppedError", "PeerError", "Interrupted", "LIBRARY_PATH"]
