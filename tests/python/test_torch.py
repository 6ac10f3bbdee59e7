"""batchfit.torch: an nn.Module planned and trained through its ONNX export.
The trained module's weights differ from the start, are the weights the
command line trains from the same exported file (bit for bit), and its test
accuracy is the one the command line reports; PyTorch running the module
on the same standardised test samples agrees. Skipped without torch, or
when the library cannot read ONNX files (the ONNX import, --model
FILE.onnx, not built in)."""
import copy
import re
import tempfile
import warnings

import batchfit
import numpy as np
import pytest

from conftest import cli_json

torch = pytest.importorskip("torch", reason="batchfit.torch needs PyTorch (python3-torch)")
import batchfit.torch as bt  # noqa: E402


def small_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))


@pytest.fixture(scope="module")
def onnx_import():
    try:
        bt.plan(small_cnn(), torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1])
    except batchfit.InvalidArgumentError as e:
        if "cannot read ONNX models" in str(e):
            pytest.skip("the library has no ONNX import (--model FILE.onnx; src/nn/onnx*.c, branch wt-onnx): "
                        "batchfit.torch needs it")
        raise


def test_plan_is_the_exported_files(onnx_import, tmp_path):
    m = small_cnn()
    path = bt.export(m, torch.zeros(1, 1, 28, 28), tmp_path / "m.onnx")
    _, want, _ = cli_json("plan", "--model", path, "--memory", "1GiB", "--batch", "1,32", "--threads", "2")
    got = bt.plan(m, torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1, 32], threads=2)
    for k in ("fixed", "per_sample", "plans", "max_batch", "parameters"):
        assert got[k] == want[k], k
    assert got["parameters"] == sum(p.numel() for p in m.parameters())


def test_export_leaves_the_module_as_it_was(onnx_import, tmp_path):
    """Exporting runs the module forward (in training mode: batch norm on the
    example's statistics, dropout drawing from the RNG): plan, find and
    export leave its buffers, its mode and the RNG as they were, and the
    file holds the module's own running statistics."""
    import onnx
    import onnx.numpy_helper
    m = torch.nn.Sequential(*small_cnn(), torch.nn.Dropout(0.5))
    bn = m[1]
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    m.eval()
    start = copy.deepcopy(m.state_dict())
    x = torch.randn(1, 1, 28, 28)
    rng = torch.get_rng_state()
    path = bt.export(m, x, tmp_path / "m.onnx")
    bt.plan(m, x, memory="1GiB", batch=[1])
    bt.find(m, x, memory="64MiB", limit=8, repeats=1)
    now = m.state_dict()
    assert [k for k in start if not torch.equal(start[k], now[k])] == []
    assert not m.training
    assert torch.equal(torch.get_rng_state(), rng)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    for k in ("1.running_mean", "1.running_var"):
        assert np.array_equal(inits[k], start[k].numpy()), k


class MoreThanScores(torch.nn.Module):
    """small_cnn whose forward returns more than its scores, as transformers' models do: a ModelOutput
    (an object with .logits and more), a dict with 'logits', or a tuple (return_dict=False)."""

    def __init__(self, kind):
        super().__init__()
        self.net, self.kind = small_cnn(), kind

    def forward(self, x):
        y = self.net(x)
        if self.kind == "modeloutput":
            import types
            return types.SimpleNamespace(loss=None, logits=y, hidden_states=x.flatten(1))
        if self.kind == "dict":
            return {"logits": y, "past_key_values": x * 2}
        if self.kind == "tuple":
            return y, x.sum(1)
        return {"hidden": y}


def test_a_forward_returning_more_than_its_scores(onnx_import, tmp_path):
    """A forward returning a ModelOutput, a dict or a tuple exports its scores alone: one output, the
    parameters under the module's own names, the plan the plain module's; the module's forward is its own
    again afterwards. Before 2026-12-05: "the graph has 2 outputs". A dict without 'logits' is refused."""
    import onnx
    x = torch.zeros(1, 1, 28, 28)
    want = bt.plan(small_cnn(), x, memory="1GiB", batch=[1, 32], threads=2)
    for kind in ("modeloutput", "dict", "tuple"):
        m = MoreThanScores(kind)
        g = onnx.load(bt.export(m, x, tmp_path / f"{kind}.onnx")).graph
        assert [o.name for o in g.output] == ["logits"], kind
        assert {i.name for i in g.initializer} >= {n for n, _ in m.named_parameters()}, kind
        got = bt.plan(m, x, memory="1GiB", batch=[1, 32], threads=2)
        assert got["plans"] == want["plans"] and got["parameters"] == want["parameters"], kind
        assert "forward" not in m.__dict__ and not isinstance(m(x), torch.Tensor), kind
    with pytest.raises(batchfit.InvalidArgumentError, match=r"its forward returns a dict of \['hidden'\]: batchfit "
                       r"trains on the class scores"):
        bt.export(MoreThanScores("other"), x, tmp_path / "other.onnx")


def test_a_module_applied_twice_shares_its_weights(onnx_import):
    """A Linear applied twice shares its weights between the two places: batchfit's plan counts them once,
    PyTorch's count (before 2026-12-05 each place got a copy that trained apart: 'fc.weight.1' saved beside
    'fc.weight', 13,274 parameters for 13,002). Training: test_hand_written_blocks_train_and_come_back's
    shared_mlp; the gradients against PyTorch's: onnx_torch shared_mlp."""
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.fc, self.out = torch.nn.Linear(784, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 10)

        def forward(self, x):
            return self.out(torch.relu(self.fc(torch.relu(self.fc(self.inp(x.flatten(1)))))))

    m = Twice()
    got = bt.plan(m, torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1])
    assert got["parameters"] == sum(p.numel() for p in m.parameters()) == 13002


def test_export_to_a_missing_folder(onnx_import, tmp_path):
    """The path's folder is checked first: a FileNotFoundError naming it, no
    warning about training mode."""
    with warnings.catch_warnings(record=True) as seen, pytest.raises(FileNotFoundError) as e:
        warnings.simplefilter("always")
        bt.export(small_cnn(), torch.zeros(1, 1, 28, 28), tmp_path / "no" / "m.onnx")
    assert "does not exist" in str(e.value) and e.value.field == "path"
    assert not [w for w in seen if "training mode" in str(w.message)]


def test_arguments_of_the_wrong_type(tmp_path, monkeypatch):
    """A module that is not an nn.Module, an example that is not a tensor:
    batchfit's TypeError naming the argument, nothing exported, no folder left."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    x = torch.zeros(1, 1, 28, 28)
    for call, field in ((lambda: bt.plan(small_cnn(), None), "example_input"),
                        (lambda: bt.plan(small_cnn(), np.zeros((1, 1, 28, 28))), "example_input"),
                        (lambda: bt.plan(lambda t: t, x), "module"),
                        (lambda: bt.find(None, x), "module"),
                        (lambda: bt.train(small_cnn(), example_input=[1.0]), "example_input"),
                        (lambda: bt.export("m", x, tmp_path / "m.onnx"), "module")):
        with pytest.raises(batchfit.ArgumentTypeError) as e:
            call()
        assert e.value.field == field and str(e.value).startswith(field + ": give a"), str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_an_image_folder_needs_the_example(tmp_path):
    """Data that does not give the input's shape (an image folder: the model's
    size decides how its images are resized) asks for example_input, saying
    why and what torchvision's models take; nothing is exported or trained."""
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    for data, why in ((tmp_path / "imgs", "what batchfit resizes and crops the folder's images to, and a module "
                       "that pools adaptively has none of its own: torchvision's models take "
                       "torch.zeros(1, 3, 224, 224)"), ("some.csv", "the export needs the input's shape")):
        with pytest.raises(batchfit.InvalidArgumentError) as e:
            bt.train(small_cnn(), data=str(data), epochs=1)
        assert e.value.field == "example_input" and why in str(e.value), str(e.value)


def test_exports_after_failed_ones(tmp_path):
    """A failed export leaves nothing behind that breaks the next: with the
    failures' exceptions kept (their tracebacks hold the graph), PyTorch
    1.13's export after two failed ones of convnext_tiny (its stochastic
    depth's bernoulli_ does not export) raised "Unable to cast from non-held
    to held instance" for a model that exports alone (2026-12-04)."""
    torchvision = pytest.importorskip("torchvision")
    x = torch.zeros(1, 3, 32, 32)
    for i in range(2):
        try:
            bt.export(torchvision.models.convnext_tiny(num_classes=10), x, tmp_path / "bad.onnx")
            pytest.skip("this torch exports convnext_tiny in training mode")
        except batchfit.InvalidArgumentError as e:
            assert "could not export" in str(e) and e.__cause__ is None, str(e)
    bt.export(torchvision.models.resnet18(num_classes=10), x, tmp_path / "resnet18.onnx")
    assert (tmp_path / "resnet18.onnx").stat().st_size > 10**6


def test_stochastic_depth_is_left_out(onnx_import):
    """torchvision's efficientnet_b0 as a user makes it (training mode,
    stochastic depth 0.2) did not export at all: its StochasticDepth's
    bernoulli_ does not export in training mode. Now the drop paths are left
    out with a warning saying so, and the module comes back as it was: its
    drop probabilities, and each submodule's own mode (a frozen batch norm
    stays in eval mode, which the export's train(True) and the restoring
    train(was) set to training before)."""
    torchvision = pytest.importorskip("torchvision")

    class DropPath(torch.nn.Module):  # timm's, as its drop_path() writes it
        def __init__(self, drop_prob):
            super().__init__()
            self.drop_prob = drop_prob

        def forward(self, x):
            if self.drop_prob == 0.0 or not self.training:
                return x
            keep = 1 - self.drop_prob
            return x * x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep) / keep

    m = torchvision.models.efficientnet_b0(num_classes=10)
    depths = [s.p for s in m.modules() if type(s).__name__ == "StochasticDepth"]
    assert len(depths) == 16 and max(depths) > 0.18  # 0.2 * i / 16 for block i
    m.features[0][1].eval()  # a frozen batch norm
    own = [s.training for s in m.modules()]
    want = f"{sum(p > 0 for p in depths)} stochastic depth module(s) (StochasticDepth, drop probability up to " \
           f"{max(depths):g}) are left out of the export"
    with pytest.warns(UserWarning, match=re.escape(want)):
        p = bt.plan(m, torch.zeros(1, 3, 64, 64), memory="2GiB", batch=[2])
    assert p.peak[2] > 0
    assert [s.p for s in m.modules() if type(s).__name__ == "StochasticDepth"] == depths
    assert [s.training for s in m.modules()] == own and not m.features[0][1].training
    c = torch.nn.Sequential(*small_cnn()[:4], DropPath(0.3), *small_cnn()[4:])
    with pytest.warns(UserWarning, match=r"1 stochastic depth module\(s\) \(DropPath, drop probability up to 0\.3\)"):
        bt.plan(c, torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1])
    assert c[4].drop_prob == 0.3


def test_a_wrong_example_is_not_blamed_on_training_mode(onnx_import):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail the call
        with pytest.raises(batchfit.InvalidArgumentError) as e:
            bt.plan(small_cnn(), torch.zeros(1, 3, 32, 32), memory="1GiB", batch=[1])
    assert "could not export" in str(e.value) and e.value.field == "model"


def test_train_module_in_and_out(onnx_import, fmnist, tmp_path):
    opts = dict(epochs=1, batch=64, seed=1, epoch_samples=3000, eval_samples=1000, memory="512MiB", threads=2)
    m = small_cnn()
    start = copy.deepcopy(m.state_dict())
    path = bt.export(copy.deepcopy(m), torch.zeros(1, 1, 28, 28), tmp_path / "start.onnx")
    out = bt.train(m, data="fashion-mnist", **opts)
    assert out is m
    res = m.batchfit_result
    trained = m.state_dict()
    moved = [k for k in start if k.endswith(("weight", "bias")) and not torch.equal(start[k], trained[k])]
    assert len(moved) == 6, moved  # conv, batch norm and linear: weights and biases

    save = tmp_path / "cli.safetensors"
    _, want, _ = cli_json("train", "--model", path, "--data", "fashion-mnist", "--save", save,
                          *[a for k, v in opts.items() for a in ("--" + k.replace("_", "-"), str(v))])
    assert res.test_accuracy == want["test_accuracy"] and res.steps == want["steps"]
    for name, w in batchfit.read_weights(save).items():
        assert np.array_equal(trained[name].numpy().view(np.uint32), w.view(np.uint32)), name

    assert_torch_agrees(m, res, fmnist)


def assert_torch_agrees(m, res, fmnist):
    """PyTorch on the trained module, on the first 1000 test samples standardised as batchfit does
    (batch norm on its statistics), gets batchfit's test accuracy."""
    _, _, xte, yte = fmnist
    mean, std = res.normalization["mean"][0], res.normalization["std"][0]
    x = (torch.from_numpy(xte[:1000].astype(np.float32) / 255.0).unsqueeze(1) - mean) / std
    m.eval()
    with torch.no_grad():
        acc = (m(x).argmax(1).numpy() == yte[:1000]).mean()
    # float32 sums in another order may flip a sample on the boundary, not more than a few
    assert abs(acc - res.test_accuracy) <= 0.005, (acc, res.test_accuracy)


class SqueezeExcite(torch.nn.Module):
    """MobileNetV3's parts: hardswish, a squeeze-and-excitation gate by hardsigmoid."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                     torch.nn.Hardswish(), torch.nn.MaxPool2d(2))
        self.fc1, self.fc2 = torch.nn.Conv2d(8, 4, 1), torch.nn.Conv2d(4, 8, 1)
        self.f = torch.nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        y = self.c(x)
        s = torch.nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.f(torch.flatten(y * s, 1))


def test_squeeze_excitation_trains_and_comes_back(onnx_import, fmnist):
    """The gate's convolutions train, and PyTorch running the trained module
    gets batchfit's test accuracy."""
    m = SqueezeExcite()
    start = copy.deepcopy(m.state_dict())
    bt.train(m, data="fashion-mnist", epochs=1, batch=64, seed=1, epoch_samples=3000, eval_samples=1000,
             memory="512MiB", threads=2)
    res, trained = m.batchfit_result, m.state_dict()
    for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "c.0.weight", "f.weight"):
        assert not torch.equal(start[k], trained[k]), k
    assert res.test_accuracy > 0.5, res.test_accuracy
    assert_torch_agrees(m, res, fmnist)


class Parametric(torch.nn.Module):
    """PReLU with a slope per channel after a conv, and one slope after a linear layer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                     torch.nn.PReLU(8), torch.nn.MaxPool2d(2))
        self.f = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 32), torch.nn.PReLU(),
                                     torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.f(self.c(x))


def test_prelu_trains_and_comes_back(onnx_import, fmnist):
    """nn.PReLU's slopes (one per channel, one in all) train and come back
    into the module's state_dict, and PyTorch running the trained module
    gets batchfit's test accuracy."""
    m = Parametric()
    start = copy.deepcopy(m.state_dict())
    bt.train(m, data="fashion-mnist", epochs=1, batch=64, seed=1, epoch_samples=3000, eval_samples=1000,
             memory="512MiB", threads=2)
    res, trained = m.batchfit_result, m.state_dict()
    assert trained["c.2.weight"].shape == (8,) and trained["f.2.weight"].shape == (1,)
    for k in ("c.2.weight", "f.2.weight", "c.0.weight", "f.1.weight"):
        assert not torch.equal(start[k], trained[k]), k
    assert res.test_accuracy > 0.5, res.test_accuracy
    assert_torch_agrees(m, res, fmnist)


class Normed(torch.nn.Module):
    """A conv, then InstanceNorm2d: an operator batchfit does not read (selu,
    then prelu were the example until batchfit read them)."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.n = torch.nn.InstanceNorm2d(4)
        self.f = torch.nn.Linear(4 * 28 * 28, 10)

    def forward(self, x):
        return self.f(torch.flatten(self.n(self.c(x)), 1))


class Gated(torch.nn.Module):
    """A conv gated by its own sigmoid (SiLU written out), then sigmoid and tanh."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.f = torch.nn.Linear(4 * 28 * 28, 10)

    def forward(self, x):
        y = self.c(x)
        return self.f(torch.tanh(torch.sigmoid(torch.flatten(y * torch.sigmoid(y), 1))))


def test_smooth_activations_are_read(onnx_import):
    """y * sigmoid(y), sigmoid and tanh load (their numbers against PyTorch:
    tests/test_layers_torch.c and onnx_torch act_cnn)."""
    p = bt.plan(Gated(), torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1])
    assert p.fits and p.largest_batch > 1


def test_an_operator_it_cannot_read_names_the_module(onnx_import, tmp_path, monkeypatch):
    """The library's message names the node and operator; the package puts
    the module where the library named the temporary file, which is gone."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the export's directory goes there
    with pytest.raises(batchfit.InvalidArgumentError) as e:
        bt.plan(Normed(), torch.zeros(1, 1, 28, 28), memory="1GiB", batch=[1])
    msg = str(e.value)
    assert "the Normed module's ONNX export" in msg and "InstanceNormalization" in msg, msg
    assert "batchfit-torch-" not in msg, msg
    assert e.value.field == "model"
    assert list(tmp_path.iterdir()) == []  # the export's directory removed


def test_convnext_and_shufflenet_train_and_come_back(onnx_import):
    """torchvision's ConvNeXt (its permutes to channels-last and back, layer
    scales) and ShuffleNetV2 (chunks, channel shuffles) train on arrays and
    every parameter comes back moved, in the module's own shapes (the layer
    scale [C,1,1]); before 2026-12-05 both were refused at their first
    Transpose or Reshape."""
    from torchvision.models import shufflenet_v2_x0_5
    from torchvision.models.convnext import CNBlock, CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    cnx = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)
    with torch.no_grad():  # from their 1e-6, so that the blocks' own parameters get gradients that move them
        for mod in cnx.modules():
            if isinstance(mod, CNBlock):
                mod.layer_scale.fill_(0.5)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 96)
    for m in (cnx, shufflenet_v2_x0_5(num_classes=10)):
        start = copy.deepcopy(m.state_dict())
        bt.train(m, data=(x, y), epochs=1, batch=32, memory="1GiB", threads=2)
        assert m.batchfit_result.steps == 3
        for name, p in m.named_parameters():
            assert p.shape == start[name].shape and not torch.equal(p.detach(), start[name]), name
    assert cnx.features[1][0].layer_scale.shape == (16, 1, 1)


@pytest.mark.parametrize("name", ["layerscale_mini", "mhsa_mini", "shared_mlp"])
def test_hand_written_blocks_train_and_come_back(onnx_import, name):
    """Modules as users write them (tests/onnx/export.py): LayerScaleMini's learned [C] scales on
    channels-last tokens (the original ConvNeXt's gamma), in a ViT block (timm's LayerScale) and on a vector;
    MhsaMini's self-attention written out as timm's Attention (unbind, index) and minGPT's; SharedMlp's Linear
    and LayerNorm each applied twice (their weights shared; before 2026-12-05 trained apart as copies). They
    train on arrays and every parameter comes back moved, in its own shape; before 2026-12-05 the first two
    were refused at load (the first gamma's Mul, the first attention's Reshape)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx"))
    from export import build
    torch.manual_seed(0)
    m, size = build(name)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3, size, size)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    start = copy.deepcopy(m.state_dict())
    bt.train(m, data=(x, y), epochs=1, batch=32, memory="512MiB", threads=2)
    assert m.batchfit_result.steps == 2
    for pname, p in m.named_parameters():
        assert p.shape == start[pname].shape and not torch.equal(p.detach(), start[pname]), pname
    if name == "layerscale_mini":
        for pname in ("cn.gamma", "ls1", "ls2", "ls_head"):
            assert m.state_dict()[pname].shape == (16,)
        assert m.state_dict()["rezero"].shape == ()  # one learned number comes back 0-d, as the module has it


def digits_text(tmp_path, T, V):
    """A text of lines of digits counting on from a random start, which a model learns, and PyTorch's own loss
    of a module of context T and vocabulary V on 64 of its windows."""
    rng = np.random.default_rng(0)
    lines = ["".join(str((s + i) % 10) for i in range(30)) for s in rng.integers(0, 10, 2100)]
    text = tmp_path / "digits.txt"
    text.write_text("\n".join(lines) + "\n")
    ids = torch.tensor(list(text.read_bytes()[:(T + 1) * 64]), dtype=torch.long).view(64, T + 1)
    assert int(ids.max()) < V

    def loss(mod):
        mod.eval()
        with torch.no_grad():
            lg = mod(ids[:, :T])
        return torch.nn.functional.cross_entropy(lg.reshape(-1, V), ids[:, 1:].reshape(-1)).item()

    return text, loss


def language_model(name, **kw):
    """tests/onnx/export.py's module NAME (GPT, Llama, HFGPT2, TutorialLM), built with seed 0."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx"))
    import export
    torch.manual_seed(0)
    return getattr(export, name)(**kw)


def trains_on_text(m, tmp_path, T, V=256):
    """m (context T, vocabulary V: a text is bytes) trained by batchfit.torch for an epoch on digits_text:
    PyTorch's own loss on the text falls below half, and every parameter comes back moved."""
    text, loss = digits_text(tmp_path, T, V)
    start, before = copy.deepcopy(m.state_dict()), loss(m)
    bt.train(m, data=str(text), example_input=torch.zeros(1, T, dtype=torch.long), epochs=1, batch=32, lr=3e-3,
             optimizer="adamw", memory="512MiB", threads=2)
    after = loss(m)
    assert after < 0.5 * before, (before, after)
    for pname, p in m.named_parameters():
        assert p.shape == start[pname].shape and not torch.equal(p.detach(), start[pname]), pname


def test_a_gpt_trains_on_text_and_comes_back(onnx_import, tmp_path):
    """A language model as nanoGPT writes it (tests/onnx/export.py's gpt_mini: nn.Embedding tables for
    tokens and positions, causal self-attention with a tril buffer and masked_fill, a head tied to the
    token table; here with a byte vocabulary) trains on a text (trains_on_text), and the tie holds
    (lm_head.weight is wte.weight, batchfit's trained table). Before 2026-12-05 its integer input was refused
    at load."""
    m = language_model("GPT", V=256, T=16, C=32, H=4, L=2)
    trains_on_text(m, tmp_path, 16)
    assert m.lm_head.weight is m.wte.weight
    assert torch.equal(m.wte.weight.detach(), torch.from_numpy(m.batchfit_result.weights["wte.weight"]))


def test_a_llama_trains_on_text_and_comes_back(onnx_import, tmp_path):
    """A LLaMA-style language model (tests/onnx/export.py's Llama: RMSNorm as LLaMA's code writes it, with its
    float casts, SwiGLU's silu(w1(x)) * w3(x), causal attention without biases, an untied head) trains on a
    text (trains_on_text), the RMSNorm weights among those that move. Before 2026-12-05 it was refused at the
    RMSNorm's Cast."""
    m = language_model("Llama", V=256, T=16, C=32, H=4, L=2, hidden=64)
    trains_on_text(m, tmp_path, 16)
    assert torch.equal(m.norms[0].weight.detach(), torch.from_numpy(m.batchfit_result.weights["norms.0.weight"]))


def test_transformers_gpt2_trains_and_comes_back(onnx_import, tmp_path):
    """GPT-2 as transformers writes it (tests/onnx/export.py's HFGPT2: Conv1D layers with weights [in, out],
    the attention's torch.where, dropout 0.1, lm_head tied to wte) trains on a text (trains_on_text), each
    Conv1D weight back in its own [in, out] shape, and the tie holds. Before 2026-12-05 it was refused at the
    ids' Reshape."""
    m = language_model("HFGPT2", V=256, T=16, C=32, H=4, L=2, p=0.1)
    trains_on_text(m, tmp_path, 16)
    assert m.lm_head.weight is m.transformer.wte.weight
    assert m.batchfit_result.weights["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)


def test_distilbert_trains_and_comes_back(onnx_import, tmp_path):
    """DistilBERT as transformers writes it (tests/onnx/export.py's DistilBert: q_lin, k_lin, v_lin with biases
    viewed (bs, -1, H, d), q divided by sqrt(d), bidirectional post-norm blocks, vocab_projector tied to the word
    embeddings; exported without its attention_mask, which batchfit.torch does not pass) trains on a text
    (trains_on_text) and the tie holds. Before 2026-12-05 it was refused at the views' -1."""
    m = language_model("DistilBert", V=256, T=16, C=32, H=4, L=2, hidden=64, p=0.1)
    trains_on_text(m, tmp_path, 16)
    assert m.vocab_projector.weight is m.distilbert.embeddings.word_embeddings.weight
    assert m.batchfit_result.weights["distilbert.transformer.layer.0.attention.q_lin.weight"].shape == (32, 32)


def test_bert_trains_and_comes_back(onnx_import, tmp_path):
    """BERT as transformers writes it (tests/onnx/export.py's HFBert: BertForMaskedLM in small, token types from
    a buffer of zeros, the all-ones attention mask BertModel makes when none is given, post-norm layers, the MLM
    head tied to the word embeddings with its own bias) trains on a text (trains_on_text), the token type table
    among the parameters that move, and both ties hold. Before 2026-12-05 it was refused at the token types'
    Expand."""
    m = language_model("HFBert", V=256, T=16, C=32, H=4, L=2, hidden=64, p=0.1, mask_input=False)
    trains_on_text(m, tmp_path, 16)
    pr = m.cls.predictions
    assert pr.decoder.weight is m.bert.embeddings.word_embeddings.weight and pr.decoder.bias is pr.bias
    assert m.batchfit_result.weights["bert.embeddings.token_type_embeddings.weight"].shape == (2, 32)


def test_a_module_that_takes_an_attention_mask_trains(onnx_import, tmp_path):
    """A language model whose forward requires attention_mask (tests/onnx/export.py's DistilBert, its mask
    argument made required) trains given example_input=(ids, mask): the export has the mask as a second input,
    which batchfit reads as the padding's keys. Given the ids alone, its export fails, saying so."""
    class NeedsMask(language_model("DistilBert", V=256, T=16, C=32, H=4, L=1, hidden=64).__class__):
        def forward(self, input_ids, attention_mask):
            return super().forward(input_ids, attention_mask)

    class Ones(torch.nn.Module):  # PyTorch's loss on the text: no padding, every token kept
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(ids, torch.ones_like(ids))

    torch.manual_seed(0)
    m = NeedsMask(V=256, T=16, C=32, H=4, L=1, hidden=64)
    ids = torch.zeros(1, 16, dtype=torch.long)
    with pytest.raises(batchfit.InvalidArgumentError, match="give example_input=\\(ids, attention_mask\\)"):
        bt.plan(m, ids, memory="1GiB")
    with pytest.raises(batchfit.InvalidArgumentError, match="a pair is \\(token ids, attention_mask\\)"):
        bt.plan(m, (ids, torch.ones(1, 8)), memory="1GiB")
    text, loss = digits_text(tmp_path, 16, 256)
    start, before = copy.deepcopy(m.state_dict()), loss(Ones(m))
    bt.train(m, data=str(text), example_input=(ids, torch.ones_like(ids)), epochs=1, batch=32, lr=3e-3,
             optimizer="adamw", memory="512MiB", threads=2)
    assert loss(Ones(m)) < 0.5 * before
    for pname, p in m.named_parameters():
        assert not torch.equal(p.detach(), start[pname]), pname


def test_the_transformer_tutorials_model_trains_and_comes_back(onnx_import, tmp_path):
    """The PyTorch Transformer tutorial's language model (tests/onnx/export.py's TutorialLM: embeddings times
    sqrt(C), the sinusoidal PositionalEncoding buffer with its dropout, nn.TransformerEncoder under a causal
    mask, the tutorial's dropout 0.2, on the attention weights too) trains on a text (trains_on_text), and the
    sinusoids come back as they were, bit for bit (a buffer: not trained). Before 2026-12-05 it was refused
    at the Mul by sqrt(C)."""
    m = language_model("TutorialLM", V=256, T=16, C=32, H=4, L=2, dropout=0.2)
    pe = m.pos_encoder.pe.clone()
    trains_on_text(m, tmp_path, 16)
    assert torch.equal(m.pos_encoder.pe, pe)
    assert m.batchfit_result.weights["pos_encoder.pe"].shape == tuple(pe.shape)


class ScaledByBuffer(torch.nn.Module):
    """A fixed per-channel scale kept as a buffer: ONNX has it as an initializer, like a parameter."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.register_buffer("scale", torch.full((4, 1, 1), 0.5))
        self.f = torch.nn.Linear(4 * 28 * 28, 10)

    def forward(self, x):
        return self.f(torch.flatten(self.c(x) * self.scale, 1))


def test_a_buffer_trained_as_a_layer_scale_is_named(onnx_import):
    """The Mul by the buffer is read as a learned layer scale; the module gets it back trained, and the
    package says so by name rather than silently."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)
    m = ScaledByBuffer()
    with pytest.warns(UserWarning, match=r"1 buffer\(s\) were trained as parameters .*: scale"):
        bt.train(m, data=(x, y), epochs=1, batch=32, memory="512MiB", threads=2)
    assert not torch.equal(m.scale, torch.full((4, 1, 1), 0.5))


def word_classes(root, n, T, seed):
    """root/animals and root/tools: n texts each of 1 to 8 words drawn from the class's own words. Returns
    PyTorch's (ids, attention_mask, labels) of them, each text's first T bytes, padded with id 0."""
    import random
    r = random.Random(seed)
    words = {"animals": "cat dog horse otter badger heron newt lynx".split(),
             "tools": "saw drill hammer chisel wrench plane rasp vise".split()}
    ids = torch.zeros(2 * n, T, dtype=torch.long)
    mask = torch.zeros(2 * n, T, dtype=torch.long)
    labels = []
    for c, (name, ws) in enumerate(sorted(words.items())):
        (root / name).mkdir(parents=True)
        for i in range(n):
            b = (" ".join(r.choice(ws) for _ in range(r.randint(1, 8))) + "\n").encode()
            (root / name / f"{i:03d}.txt").write_bytes(b)
            b = b[:T]
            k = len(labels)
            ids[k, :len(b)], mask[k, :len(b)] = torch.tensor(list(b)), 1
            labels.append(c)
    return ids, mask, torch.tensor(labels)


def classifier_on_word_classes(m, tmp_path):
    """m trained by batchfit.torch on word_classes' folders (300 texts a class, 3 epochs): PyTorch's own
    accuracy on 200 other texts, given their attention_mask, before and after."""
    ids, mask, y = word_classes(tmp_path / "test", 100, 32, 2)
    word_classes(tmp_path / "train", 300, 32, 1)

    def accuracy():
        m.eval()
        with torch.no_grad():
            return (m(ids, mask).argmax(1) == y).float().mean().item()

    before = accuracy()
    bt.train(m, data=str(tmp_path / "train"), example_input=(ids[:1], mask[:1]), epochs=3, batch=16, lr=3e-3,
             optimizer="adamw", memory="512MiB", threads=2, seed=1)
    after = accuracy()
    print(f"accuracy before {before:.3f}, after {after:.3f}, batchfit's {m.batchfit_result.test_accuracy:.3f}")
    return before, after


def test_a_sequence_classifier_trains_on_class_folders(onnx_import, tmp_path):
    """transformers' DistilBertForSequenceClassification (tests/onnx/export.py's DistilBertCls: the first token's
    state through pre_classifier, ReLU and classifier) trains on a folder of class folders of texts: batchfit
    pads each text with -1 and masks the padding's keys, PyTorch's accuracy on other texts, given their
    attention_mask, goes from chance to above 90%, and the weights come back whole. Before 2026-12-05 a token
    model had no data of one label a sequence."""
    m = language_model("DistilBertCls", V=256, T=32, C=32, H=4, L=1, hidden=64, classes=2)
    start = copy.deepcopy(m.state_dict())
    before, after = classifier_on_word_classes(m, tmp_path)
    assert before < 0.7 and after > 0.9, (before, after)
    assert m.batchfit_result.test_accuracy > 0.9
    for pname, p in m.named_parameters():
        assert not torch.equal(p.detach(), start[pname]), pname


def test_a_classifier_trains_on_a_tokenizers_output(onnx_import, tmp_path):
    """DistilBertForSequenceClassification given a tokenizer's output with labels ({"input_ids",
    "attention_mask", "labels"}, right-padded with id 0, as transformers' BatchEncoding holds it) and no
    example_input (the pair is made from it): PyTorch's accuracy on other texts goes above 90%."""
    m = language_model("DistilBertCls", V=256, T=32, C=32, H=4, L=1, hidden=64, classes=2)
    ids, mask, y = word_classes(tmp_path / "test", 100, 32, 2)
    tids, tmask, ty = word_classes(tmp_path / "train", 300, 32, 1)
    bt.train(m, data={"input_ids": tids.numpy(), "attention_mask": tmask.numpy(), "labels": ty.numpy()}, epochs=3,
             batch=16, lr=3e-3, optimizer="adamw", memory="512MiB", threads=2, seed=1)
    m.eval()
    with torch.no_grad():
        after = (m(ids, mask).argmax(1) == y).float().mean().item()
    print(f"accuracy after {after:.3f}")
    assert after > 0.9, after


def test_a_causal_mask_batchfit_does_not_read_is_left_out(onnx_import, tmp_path):
    """transformers' LlamaForSequenceClassification as 4.42 to 4.44 write it (tests/onnx/export.py's
    HFLlamaCls442: the attention_mask added to the causal mask made in forward, written back by a slice
    assignment, which batchfit refuses), given a tokenizer's output with its mask: batchfit.torch exports it again
    from the ids alone, saying so, and it trains: PyTorch's accuracy on 200 other texts, given their mask, goes
    above 90%. Before 2026-12-06 the refusal ended the call. A forward that needs its mask keeps the refusal."""
    m = language_model("HFLlamaCls442", V=256, T=32, C=32, H=4, L=2, hidden=64, classes=2, rope="hf")
    m.pad_id = 0  # word_classes pads with 0, as the tokenizer's pad token
    ids, mask, y = word_classes(tmp_path / "test", 100, 32, 2)
    tids, tmask, ty = word_classes(tmp_path / "train", 300, 32, 1)
    data = {"input_ids": tids.numpy(), "attention_mask": tmask.numpy(), "labels": ty.numpy()}
    with pytest.warns(UserWarning, match="HFLlamaCls442 was exported from the token ids alone: .*export the model "
                                         "from input_ids alone"):
        bt.train(m, data=data, epochs=3, batch=16, lr=3e-3, optimizer="adamw", memory="512MiB", threads=2, seed=1)
    m.eval()
    with torch.no_grad():
        after = (m(ids, mask).argmax(1) == y).float().mean().item()
    print(f"accuracy after {after:.3f}")
    assert after > 0.9, after

    class NeedsMask(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids, attention_mask)

    with pytest.raises(batchfit.InvalidArgumentError, match="export the model from input_ids alone"):
        bt.plan(NeedsMask(m), (ids[:1], mask[:1]), memory="512MiB")


def sentence_pairs(n, T, seed):
    """A tokenizer's output of n sentence pairs without a separator (token_type_ids 0 for the first sentence,
    1 for the second, right-padded with id 0): random letters, 2 to 13 in each sentence, labelled 1 where the
    first is the longer (ties left out). Only the token types say where one ends: without them the task is
    chance."""
    r = np.random.default_rng(seed)
    ids, types, mask = (np.zeros((n, T), dtype=np.int64) for _ in range(3))
    labels = []
    k = 0
    while k < n:
        a, b = r.integers(2, 14, 2)
        if a == b:
            continue
        ids[k, :a + b] = r.integers(97, 123, a + b)
        types[k, a:a + b], mask[k, :a + b] = 1, 1
        labels.append(int(a > b))
        k += 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": np.array(labels)}


def test_sentence_pairs_train_by_their_token_types(onnx_import, tmp_path):
    """transformers' BertForSequenceClassification (export.py's HFBertCls) given a tokenizer's output of
    sentence pairs (token_type_ids 1 for the second sentence): batchfit adds each token's type row (the id
    carries its type), so a task only the types can tell (which sentence is the longer, no separator) is
    learnt: PyTorch's accuracy on 300 other pairs, given their types, from about 50% to above 90%. Before
    2026-12-06 token type 1 was refused. A model without token types refuses the pairs, naming the token."""
    m = language_model("HFBertCls", V=256, T=32, C=32, H=4, L=1, hidden=64, p=0.0, classes=2)
    test, train = sentence_pairs(300, 32, 2), sentence_pairs(1200, 32, 1)

    def accuracy():
        m.eval()
        with torch.no_grad():
            out = m(torch.tensor(test["input_ids"]), torch.tensor(test["attention_mask"]),
                    torch.tensor(test["token_type_ids"]))
        return (out.argmax(1).numpy() == test["labels"]).mean()

    before = accuracy()
    bt.train(m, data=train, epochs=4, batch=32, lr=3e-3, optimizer="adamw", memory="512MiB", threads=2, seed=1)
    after = accuracy()
    print(f"accuracy before {before:.3f}, after {after:.3f}")
    assert before < 0.7 and after > 0.9, (before, after)
    d = language_model("DistilBertCls", V=256, T=32, C=32, H=4, L=1, hidden=64, classes=2)
    with pytest.raises(batchfit.InvalidArgumentError, match="data: \\(arrays\\) holds a token of type 1 at position "
                                                           "[0-9]+ .*, but .* has no token types"):
        bt.train(d, data=train, max_steps=1, memory="512MiB", threads=2)


def test_sentence_transformers_pooling_trains_on_class_folders(onnx_import, tmp_path):
    """A sentence classifier as users write one on an encoder: DistilBERT's body, sentence-transformers'
    mean_pooling by the attention_mask (mask.unsqueeze(-1).expand(h.size()).float(), torch.sum(h * m, 1) /
    torch.clamp(m.sum(1), min=1e-9); tests/onnx/export.py's MeanPoolCls), a linear classifier. batchfit reads
    the pooling as the mean of each text's real tokens (before 2026-12-05 refused at the mask's Unsqueeze):
    PyTorch's accuracy on other texts, given their mask, goes from chance to above 90%."""
    before, after = classifier_on_word_classes(
        language_model("MeanPoolCls", V=256, T=32, C=32, H=4, L=1, hidden=64, classes=2), tmp_path)
    assert before < 0.7 and after > 0.9, (before, after)
