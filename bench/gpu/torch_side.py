#!/usr/bin/python3
"""torch_side.py - the PyTorch side of the GPU proof kit (bench/gpu/run.sh).

    torch_side.py ways    --device cuda --cap-gib 9.21 [--model resnet50] [--dry-run]
    torch_side.py speed   --device cuda --model resnet50|gpt2 --precision f32|bf16 --batch N [--steps S]
    torch_side.py finders --device cuda [--model resnet50] [--start N] [--dry-run]

Each prints one JSON line per result. The step everywhere is PyTorch eager
with SGD (momentum 0.9) and cross-entropy: zero_grad, forward, loss,
backward, step. AMP is torch.autocast in bf16; checkpointing is
torch.utils.checkpoint over the network's stages (ResNet) or blocks (GPT).

ways: the Deelvin table's PyTorch column: the largest batch that trains in
f32, AMP, and AMP with checkpointing, with the process's memory capped by
torch.cuda.set_per_process_memory_fraction (cap / total), and
torch.cuda.max_memory_allocated at that batch. The batch is searched by
doubling then bisection; a trial is two steps (the first makes the
optimizer's state). --dry-run (no GPU): a small ResNet (a basic block per
stage) on 32x32 images on the CPU, whose memory PyTorch cannot cap there: a
batch "fits" when it is at most a simulated limit per mode (said so in every
line), and one model per mode serves every trial; the search and the steps
are the real code.

speed: samples/s (and tokens/s) of --steps timed steps after 3 untimed
ones, each synchronised, the median.

finders: Lightning's Tuner.scale_batch_size (binsearch) and accelerate's
find_executable_batch_size, where those packages are installed (else a line
saying so), each timed and counted in trial steps.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DRY_CAP = {"f32": 3, "amp": 4, "amp_ckpt": 6}  # dry run: simulated largest batches


def out(**kv):
    print(json.dumps(kv), flush=True)


# ---- models -------------------------------------------------------------------

class Block(nn.Module):
    """A GPT-2 block: x + attn(ln1(x)), then x + mlp(ln2(x)); causal."""

    def __init__(self, C, H):
        super().__init__()
        self.h = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = (t.reshape(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: the matrix materialised
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.h) ** 0.5)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2 (small: 12 layers, 12 heads, 768 features, 1024 tokens, 50257
    ids), the head tied to the token table, as batchfit's gpt2 preset."""

    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        self.head.weight = self.wte.weight
        self.T, self.V, self.ckpt = T, V, False

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x) if self.ckpt and self.training else b(x)
        return self.head(self.ln(x))


class ResNetCkpt(nn.Module):
    """A torchvision ResNet whose four stages are checkpointed (the stem runs
    as usual, so a stage's input requires a gradient and reentrant
    checkpointing gives its parameters theirs)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        n = self.net
        x = n.maxpool(n.relu(n.bn1(n.conv1(x))))
        for stage in (n.layer1, n.layer2, n.layer3, n.layer4):
            x = torch.utils.checkpoint.checkpoint(stage, x) if self.training else stage(x)
        return n.fc(torch.flatten(n.avgpool(x), 1))


def build(name, ckpt=False):
    """(model, make_batch(b, device) -> (x, y), classes-or-tokens per sample)"""
    import torchvision

    if name in ("resnet50", "resnet-tiny"):
        if name == "resnet50":
            net = torchvision.models.resnet50()
        else:  # the dry run's: one basic block a stage, 32x32 images
            net = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)
        side, classes = (224, 1000) if name == "resnet50" else (32, 10)
        model = ResNetCkpt(net) if ckpt else net

        def batch(b, dev):
            return torch.rand(b, 3, side, side, device=dev), torch.randint(0, classes, (b,), device=dev)

        return model, batch, 1
    if name in ("gpt2", "gpt-nano"):
        L, H, C, T, V = (12, 12, 768, 1024, 50257) if name == "gpt2" else (4, 4, 128, 128, 256)
        model = GPT(L, H, C, T, V)
        model.ckpt = ckpt

        def batch(b, dev):
            ids = torch.randint(0, V, (b, T), device=dev)
            return ids, torch.randint(0, V, (b, T), device=dev)

        return model, batch, T
    sys.exit(f"torch_side.py: unknown model {name} (resnet50, resnet-tiny, gpt2, gpt-nano)")


class Stepper:
    """SGD momentum steps of a model in a mode: f32, amp, amp_ckpt."""

    def __init__(self, name, mode, dev):
        self.model, self.batch, self.per = build(name, ckpt=mode == "amp_ckpt")
        self.model.to(dev).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.amp, self.dev = mode != "f32", dev

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16, enabled=self.amp):
            logits = self.model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        self.opt.step()
        return loss


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def is_oom(e):
    return isinstance(e, RuntimeError) and "out of memory" in str(e)


# ---- ways ------------------------------------------------------------------------

_dry_steppers = {}


def try_batch(name, mode, b, dev, dry):
    """(fits, peak bytes) for two steps at batch b"""
    if dry and b > DRY_CAP[mode]:
        return False, 0
    st = None
    try:
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        if dry:
            st = _dry_steppers.setdefault(mode, Stepper(name, mode, dev))
        else:
            st = Stepper(name, mode, dev)
        x, y = st.batch(b, dev)
        for _ in range(2):
            st.step(x, y)
        sync(dev)
        return True, torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    except RuntimeError as e:
        if not is_oom(e):
            raise
        return False, 0
    finally:
        del st
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def largest(name, mode, dev, dry, limit=4096):
    t0, trials, good, peak, bad = time.time(), 0, 0, 0, None
    b = 2  # batch norm needs two values per channel in training
    while b <= limit:  # doubling
        trials += 1
        ok, p = try_batch(name, mode, b, dev, dry)
        if not ok:
            bad = b
            break
        good, peak, b = b, p, b * 2
    hi = bad if bad else limit + 1
    while hi - good > 1:  # bisection
        mid = (good + hi) // 2
        trials += 1
        ok, p = try_batch(name, mode, mid, dev, dry)
        if ok:
            good, peak = mid, p
        else:
            hi = mid
    return good, peak, trials, time.time() - t0


def cmd_ways(a):
    dev = torch.device(a.device)
    name = "resnet-tiny" if a.dry_run else a.model
    if dev.type == "cuda":
        # the cap takes a device index: "cuda" alone has none (the H200 run of 2026-11-26 failed on it)
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(idx).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total), idx)
    for mode in ("f32", "amp", "amp_ckpt"):
        b, peak, trials, secs = largest(name, mode, dev, a.dry_run)
        out(side="pytorch", phase="ways", model=name, mode=mode, cap_gib=a.cap_gib, batch=b, peak_bytes=peak,
            trials=trials, seconds=round(secs, 2), torch=torch.__version__,
            note="dry run: CPU, simulated cap" if a.dry_run else "")


# ---- speed --------------------------------------------------------------------------

def cmd_speed(a):
    dev = torch.device(a.device)
    st = Stepper(a.model, "amp" if a.precision == "bf16" else "f32", dev)
    x, y = st.batch(a.batch, dev)
    try:
        for _ in range(3):
            st.step(x, y)
        sync(dev)
        times = []
        for _ in range(a.steps):
            t0 = time.time()
            st.step(x, y)
            sync(dev)
            times.append(time.time() - t0)
    except RuntimeError as e:
        if not is_oom(e):
            raise
        out(side="pytorch", phase="speed", model=a.model, precision=a.precision, batch=a.batch, ok=False,
            error="out of memory")
        return
    med = statistics.median(times)
    out(side="pytorch", phase="speed", model=a.model, precision=a.precision, batch=a.batch, ok=True, steps=a.steps,
        median_step_s=med, samples_per_s=a.batch / med, tokens_per_s=a.batch * st.per / med, torch=torch.__version__)


# ---- finders ------------------------------------------------------------------------------

def finder_accelerate(a, dev, name):
    try:
        from accelerate.utils import find_executable_batch_size
    except ImportError:
        out(side="pytorch", phase="finders", finder="accelerate", skipped="accelerate is not installed")
        return
    trials = []

    @find_executable_batch_size(starting_batch_size=a.start)
    def run(batch_size):
        trials.append(batch_size)
        if a.dry_run and batch_size > DRY_CAP["f32"]:
            raise RuntimeError("CUDA out of memory (dry run: simulated)")
        st = Stepper(name, "f32", dev)
        x, y = st.batch(batch_size, dev)
        for _ in range(2):
            st.step(x, y)
        sync(dev)
        return batch_size

    t0 = time.time()
    b = run()
    out(side="pytorch", phase="finders", finder="accelerate find_executable_batch_size", batch=b,
        trials=len(trials), steps=2 * len(trials), seconds=round(time.time() - t0, 2))


def finder_lightning(a, dev, name):
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.tuner import Tuner
    except ImportError:
        try:
            import pytorch_lightning as pl
            from pytorch_lightning.tuner import Tuner
        except ImportError:
            out(side="pytorch", phase="finders", finder="lightning", skipped="lightning is not installed")
            return
    model, make, _ = build(name)
    steps = {"n": 0}

    class Synthetic(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 16

        def __getitem__(self, i):
            x, y = make(1, torch.device("cpu"))
            return x[0], y[0]

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net, self.batch_size = model, a.start

        def training_step(self, batch, i):
            steps["n"] += 1
            x, y = batch
            logits = self.net(x)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Synthetic(), batch_size=self.batch_size)

    trainer = pl.Trainer(accelerator="gpu" if dev.type == "cuda" else "cpu", devices=1, max_steps=3, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)
    t0 = time.time()
    b = Tuner(trainer).scale_batch_size(Module(), mode="binsearch", init_val=a.start, max_trials=25)
    out(side="pytorch", phase="finders", finder="lightning scale_batch_size (binsearch)", batch=b, steps=steps["n"],
        seconds=round(time.time() - t0, 2))


def cmd_finders(a):
    dev = torch.device(a.device)
    name = "resnet-tiny" if a.dry_run else a.model
    finder_accelerate(a, dev, name)
    finder_lightning(a, dev, name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cmd", choices=["ways", "speed", "finders"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--cap-gib", type=float, default=9.21)
    p.add_argument("--start", type=int, default=1024)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args()
    torch.manual_seed(1)
    # f32 as batchfit computes it, IEEE: PyTorch lets cuDNN's convolutions use
    # TF32 by default (the first H100 run compared resnet50 f32 against that)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    {"ways": cmd_ways, "speed": cmd_speed, "finders": cmd_finders}[a.cmd](a)


if __name__ == "__main__":
    main()
