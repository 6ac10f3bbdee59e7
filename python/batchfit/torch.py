"""batchfit.torch: a PyTorch nn.Module in and out.

    import batchfit.torch
    p = batchfit.torch.plan(model, torch.zeros(1, 3, 224, 224), memory="11GiB", batch=[32, 64])
    model = batchfit.torch.train(model, data="fashion-mnist", batch="auto", epochs=1)
    model.batchfit_result.test_accuracy

The module is exported to ONNX in a temporary file (opset 17, in training
mode where the export allows it, the batch dimension dynamic) and that file
is what batchfit plans and trains (docs/onnx.md says which operators it
reads). After training, the weights come back into the module with
load_state_dict: ONNX keeps parameters (and batch norms' running
statistics) under their state_dict names, and so do the weights batchfit
writes.

What the plan means: the device memory batchfit needs to train this model
(its own layers, workspaces and optimizer state), not what PyTorch would
use to train it.

batchfit standardises the inputs by the training data's per-channel mean
and standard deviation (unless no_normalize=True): to use the trained
module in PyTorch as batchfit evaluated it, feed it inputs standardised
the same way (result.normalization holds the figures).
"""
import collections.abc
import errno
import inspect
import os
import shutil
import tempfile
import warnings

import numpy as _np
import torch as _torch

from . import _api, _errors, _onnx_inits
from ._config import show
from ._lib import LIBRARY_PATH

OPSET = 17
_ONNX_MISSING = "a model spec is plain text"  # what a library without the ONNX import says of an .onnx file
_FROM_IDS = "export the model from input_ids alone"  # the library's refusal of a causal mask's slice assignment


def export(module, example_input, path, training=True):
    """Write `module` as an ONNX file at `path`: opset 17, the first dimension
    of the input (and output) dynamic, the parameters as initializers under
    their state_dict names. training=True exports in training mode (batch
    norm with batch statistics, dropout active), falling back to the
    module's own mode, with a warning, where the export cannot. Stochastic
    depth (torchvision's StochasticDepth, timm's DropPath) is left out, with
    a warning: it does not export in training mode. The module's modes,
    buffers and drop probabilities are as they were afterwards. example_input
    may be a pair (token ids, attention_mask) for a language model whose
    forward takes the mask: the file then has it as a second input, which
    batchfit reads as the padding's keys. A forward that returns more than
    the scores (transformers' ModelOutput, a dict, a tuple) is exported with
    its scores alone: the logits, or its first tensor. Returns path."""
    _check(module, example_input)
    pair = isinstance(example_input, tuple)
    names = ["input", "attention_mask"] if pair else ["input"]
    kw = dict(opset_version=OPSET, do_constant_folding=False, input_names=names, output_names=["logits"],
              dynamic_axes={**{n: {0: "batch"} for n in names}, "logits": {0: "batch"}})
    if "dynamo" in inspect.signature(_torch.onnx.export).parameters:
        # PyTorch 2.9 on exports with torch.export by default, which needs onnxscript
        # and has no training mode; the TorchScript exporter is what the import knows
        kw["dynamo"] = False
    modes = [_torch.onnx.TrainingMode.TRAINING, _torch.onnx.TrainingMode.PRESERVE] if training else \
        [_torch.onnx.TrainingMode.PRESERVE]
    inputs = example_input if pair else (example_input,)
    if inputs[0].dim() >= 1 and inputs[0].shape[0] == 1:
        # two samples: batch norm in training mode wants more than one value per channel
        inputs = tuple(_torch.cat([t, t]) for t in inputs)
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise _errors.FileNotFound(f"{path}: cannot write the ONNX file: the folder {folder} does not exist",
                                   "path", errno=errno.ENOENT)
    # each submodule's own mode (a frozen batch norm in a training module): the export sets them all alike
    own = [(m, m.training) for m in module.modules()]
    saved = {n: b.detach().clone() for n, b in module.named_buffers()}
    dropped = _without_drop_paths(module, training)
    try:
        with _torch.random.fork_rng(devices=_cuda_devices(module)), _ScoresOnly(module):
            _export_in(module, inputs, path, modes, kw)  # (a traced dropout draws from the RNG)
    finally:
        for m, t in own:
            m.training = t
        for m, attr, p in dropped:
            setattr(m, attr, p)
        _put_back(module, saved)
    _put_back_in_file(path, saved)
    if dropped:
        warnings.warn(f"batchfit.torch: {len(dropped)} stochastic depth module(s) ({type(dropped[0][0]).__name__}, "
                      f"drop probability up to {max(p for _, _, p in dropped):g}) are left out of the export: "
                      f"PyTorch cannot export their per-sample drop in training mode and batchfit has no such "
                      f"layer, so the module trains without them (its dropout layers stay)", stacklevel=3)
    return path


# Drop-path modules as torchvision (ops.StochasticDepth) and timm (DropPath) write them, with the
# attribute holding the drop probability: their in-place bernoulli_ does not export in training mode.
_DROP_PATHS = {"StochasticDepth": "p", "DropPath": "drop_prob"}


def _scores(out):
    """The scores in what a forward returned: a tensor itself; transformers'
    ModelOutput's or a dict's logits; a tuple's first tensor
    (return_dict=False: (logits, past_key_values, ...) without labels)."""
    if isinstance(out, _torch.Tensor):
        return out
    logits = out.get("logits") if isinstance(out, dict) else getattr(out, "logits", None)
    if isinstance(logits, _torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], _torch.Tensor):
        return out[0]
    what = f"a dict of {sorted(out)[:4]}" if isinstance(out, dict) else type(out).__name__
    raise _errors.InvalidArgumentError(f"model: its forward returns {what}: batchfit trains on the class scores, a "
                                       f"tensor, a dict's or ModelOutput's 'logits', or a tuple's first tensor",
                                       "model", _errors.EINVAL)


class _ScoresOnly:
    """While exporting, the module's forward returns its scores alone
    (_scores): an ONNX graph of one output, the parameters' names as they
    were (the forward is replaced on the instance, not wrapped in another
    module)."""

    def __init__(self, module):
        self.module, self.own = module, module.__dict__.get("forward")

    def __enter__(self):
        forward = self.module.forward
        self.module.forward = lambda *a, **k: _scores(forward(*a, **k))
        return self

    def __exit__(self, *exc):
        if self.own is None:
            del self.module.forward
        else:
            self.module.forward = self.own
        return False


def _without_drop_paths(module, training):
    """Set the probability of every drop path that would drop (exported in
    training mode, or in its own) to 0, where it is the identity in either
    mode; returns [(submodule, attribute, probability)] to put back."""
    off = []
    for m in module.modules():
        attr = _DROP_PATHS.get(type(m).__name__)
        p = getattr(m, attr, None) if attr else None
        if isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0 and (training or m.training):
            off.append((m, attr, p))
            setattr(m, attr, 0.0)
    return off


def _check(module, example_input):
    """The two arguments' types, before anything is made or run."""
    if not isinstance(module, _torch.nn.Module):
        raise _errors.ArgumentTypeError(f"module: give a torch.nn.Module, not {type(module).__name__}", "module",
                                        _errors.EINVAL)
    if isinstance(example_input, tuple) and len(example_input) == 2 and \
            all(isinstance(t, _torch.Tensor) for t in example_input):
        ids, mask = example_input
        if ids.dtype not in (_torch.int64, _torch.int32) or ids.dim() != 2 or mask.shape != ids.shape:
            raise _errors.InvalidArgumentError(
                f"example_input: a pair is (token ids, attention_mask), both [batch, T] and the ids integers, not "
                f"{ids.dtype} {list(ids.shape)} and {list(mask.shape)}", "example_input", _errors.EINVAL)
        return
    if not isinstance(example_input, _torch.Tensor):
        hint = " (torch.from_numpy makes one of an array)" if hasattr(example_input, "__array__") else ""
        raise _errors.ArgumentTypeError(f"example_input: give a tensor of one or more samples "
                                        f"(torch.zeros(1, 1, 28, 28)), not {type(example_input).__name__}{hint}",
                                        "example_input", _errors.EINVAL)


def _export_in(module, inputs, path, modes, kw):
    """torch.onnx.export in the first of modes that exports; a warning only
    where training mode failed and the module's own mode then exported.
    A failure is kept as its message only: the exception's traceback holds
    the failed export's graph objects, and while they lived PyTorch 1.13's
    next export failed ("Unable to cast from non-held to held instance"),
    the graph's addresses reused under the stale Python wrappers."""
    first = last = None
    for mode in modes:
        try:
            with warnings.catch_warnings():  # the tracer's notes on the module's Python, not the user's concern
                warnings.simplefilter("ignore", _torch.jit.TracerWarning)
                warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation")
                _torch.onnx.export(module, inputs, path, training=mode, **kw)
        except Exception as e:  # torch's exporter raises many kinds
            last = f"{type(e).__name__}: {e}" if not str(e) else str(e)
            first = first or last
            continue
        if first is not None:
            warnings.warn(f"batchfit.torch: the module does not export in training mode ({first}); exporting it "
                          f"in its own mode", stacklevel=4)
        return
    hint = ""
    if "missing 1 required positional argument: 'attention_mask'" in last and len(inputs) == 1:
        hint = " (give example_input=(ids, attention_mask), both [1, T], for a forward that takes the mask)"
    raise _errors.InvalidArgumentError(f"model: PyTorch could not export the module to ONNX: {last}{hint}", "model",
                                       _errors.EINVAL)


def _cuda_devices(module):
    return sorted({b.device.index or 0 for b in module.parameters() if b.device.type == "cuda"})


def _put_back(module, saved):
    """The export runs the module forward, in training mode a batch norm's
    running statistics (and its count) take the example's: give the module
    its own back."""
    with _torch.no_grad():
        for n, b in module.named_buffers():
            if n in saved:
                b.copy_(saved[n])


def _put_back_in_file(path, saved):
    """The file's initializers are the buffers after that forward: write the
    module's own there (the names are the state_dict's), in place, without
    the onnx package (_onnx_inits)."""
    try:
        _onnx_inits.rewrite(path, {n: _bytes(t) for n, t in saved.items()})
    except ValueError as e:
        raise _errors.FormatError(f"batchfit.torch: cannot put the module's buffers back into its export: {e}") \
            from None


def _bytes(t):
    """A tensor's bytes as ONNX's raw_data holds them (any dtype, 0-d too)."""
    u = t.detach().cpu().contiguous().reshape(-1).view(_torch.uint8)
    try:
        return u.numpy().tobytes()
    except RuntimeError:  # a torch without NumPy
        return bytes(u.tolist())


def _device_of(module):
    for p in module.parameters():
        return p.device
    return _torch.device("cpu")


class _Exported:
    """The module exported into a temporary directory, removed afterwards. A
    library error raised inside names the module's export, not the file
    (gone once the call returns); one from a library without the ONNX import
    says so."""

    def __init__(self, module, example_input):
        _check(module, example_input)
        self.dir = tempfile.mkdtemp(prefix="batchfit-torch-")
        self.name = "".join(c if c.isalnum() or c in "-_" else "_" for c in type(module).__name__) or "module"
        self.path = os.path.join(self.dir, self.name + ".onnx")
        try:
            dev = _device_of(module)
            export(module, tuple(t.to(dev) for t in example_input) if isinstance(example_input, tuple)
                   else example_input.to(dev), self.path)
        except BaseException:
            self.close()
            raise

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        self.close()
        if not isinstance(e, _errors.Error):
            return
        if _ONNX_MISSING in str(e):
            raise _errors.InvalidArgumentError(
                f"model: this libbatchfit ({_api.version()} at {LIBRARY_PATH}) cannot read ONNX models: it was "
                f"built without the ONNX import (--model FILE.onnx); its message: {e}", "model", _errors.EINVAL) from e
        if self.path in e.message:
            e.message = e.message.replace(self.path, f"the {self.name} module's ONNX export (batchfit.torch.export "
                                                     f"writes it to a file of yours)")
            e.args = (e.message,)


def _on_export(module, example_input, call):
    """call(path) on the module's export. A causal model whose attention_mask
    batchfit does not read (transformers 4.42 on write the padding into the
    causal mask by a slice assignment) is exported again from the token ids
    alone, with a warning: its padding comes after every real token, so it
    trains the same."""
    try:
        with _Exported(module, example_input) as ex:
            return call(ex.path)
    except _errors.Error as e:
        if not (isinstance(example_input, tuple) and _FROM_IDS in str(e)):
            raise
        why = e
    params = list(inspect.signature(module.forward).parameters.values())
    if len(params) < 2 or params[1].default is inspect.Parameter.empty:  # forward needs its mask
        raise why
    warnings.warn(f"batchfit.torch: {type(module).__name__} was exported from the token ids alone: batchfit does "
                  f"not read the way it applies its attention_mask (a causal mask that does not need it, batchfit "
                  f"padding after the tokens); its message: {why}", stacklevel=3)
    with _Exported(module, example_input[0]) as ex:
        return call(ex.path)


def plan(module, example_input, **options):
    """batchfit.plan of the module (exported to ONNX with example_input, a
    tensor of one or more samples): the memory batchfit needs to train it."""
    return _on_export(module, example_input, lambda path: _api.plan(path, **options))


def find(module, example_input, **options):
    """batchfit.find of the module (exported to ONNX with example_input)."""
    return _on_export(module, example_input, lambda path: _api.find(path, **options))


def _example_for(data, example_input):
    """A tensor of one sample: given, from the arrays' shape, or Fashion-MNIST's."""
    if example_input is not None:
        return example_input
    if isinstance(data, collections.abc.Mapping) and hasattr(data.get("input_ids"), "shape"):
        ids = _torch.zeros((1, data["input_ids"].shape[-1]), dtype=_torch.long)  # a tokenizer's output
        return (ids, _torch.ones_like(ids)) if "attention_mask" in data else ids
    if isinstance(data, (tuple, list)) and len(data) == 2 and hasattr(data[0], "shape"):
        kind = getattr(getattr(data[0], "dtype", None), "kind", "f")  # token ids: integers
        return _torch.zeros((1,) + tuple(data[0].shape[1:]), dtype=_torch.long if kind in "iu" else _torch.float32)
    if data is None or (isinstance(data, str) and data == "fashion-mnist"):
        return _torch.zeros(1, 1, 28, 28)
    folder = isinstance(data, (str, os.PathLike)) and os.path.isdir(data)
    why = ("the model's input size is what batchfit resizes and crops the folder's images to, and a module "
           "that pools adaptively has none of its own: torchvision's models take torch.zeros(1, 3, 224, 224)"
           if folder else "the export needs the input's shape; a language model's is token ids, "
           "torch.zeros(1, T, dtype=torch.long) for T tokens of context")
    raise _errors.InvalidArgumentError(f"example_input: give a tensor of one sample (torch.zeros(1, C, H, W)) for "
                                       f"data {show(data)}: {why}", "example_input", _errors.EINVAL)


def load_weights(module, weights):
    """Load {state_dict name: array} into the module (load_state_dict), the
    state_dict's other entries (num_batches_tracked) kept; returns the
    parameters the weights did not hold."""
    state = module.state_dict()
    before = {n: t.detach().cpu().numpy() for n, t in module.named_buffers() if n in weights}
    # a tied weight (nanoGPT's lm_head.weight is wte.weight) is one tensor under two names and one in the
    # weights: its other names get the same values, or load_state_dict would put the old ones back
    shared = {state[n].data_ptr(): n for n in weights if n in state}
    for name, w in weights.items():
        if name in state:
            t = state[name]
            state[name] = _torch.from_numpy(w).reshape(t.shape).to(device=t.device, dtype=t.dtype)
    for name, t in list(state.items()):
        if name not in weights and t.numel() and shared.get(t.data_ptr()) not in (None, name):
            state[name] = state[shared[t.data_ptr()]]
    # ONNX does not tell parameters from buffers: a buffer batchfit learned (a Mul by a [C,1,1] one is read
    # as a layer scale) is one PyTorch would not have trained; one it held constant (a sinusoidal position
    # table) comes back as it was
    learned = [n for n in before if not n.endswith(("running_mean", "running_var")) and
               not _np.array_equal(before[n].reshape(-1), _np.asarray(weights[n]).reshape(-1))]
    if learned:
        warnings.warn(f"batchfit.torch: {len(learned)} buffer(s) were trained as parameters (ONNX does not say which "
                      f"initializers are buffers; a Mul by one of [C,1,1] is read as a learned layer scale): "
                      f"{', '.join(learned[:5])}", stacklevel=3)
    module.load_state_dict(state)
    return [n for n, p in module.named_parameters() if n not in weights]


def train(module, data=None, example_input=None, **options):
    """Train the module with batchfit (batchfit.train's arguments: data, batch,
    epochs, on_event, ...) and load the trained weights back into it.
    Returns the module, trained in place; module.batchfit_result is the
    Training result (test_accuracy, events, weights, normalization).
    example_input (one sample) is needed only for data that is neither
    arrays nor Fashion-MNIST. A Ctrl-C leaves the module as it was."""
    options.pop("weights", None)
    res = _on_export(module, _example_for(data, example_input), lambda path: _api.train(path, data=data, **options))
    untouched = load_weights(module, res.weights)
    if untouched:
        warnings.warn(f"batchfit.torch: {len(untouched)} parameter(s) were not in batchfit's weights and keep their "
                      f"values: {', '.join(untouched[:5])}", stacklevel=2)
    module.batchfit_result = res
    return module
