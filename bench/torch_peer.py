#!/usr/bin/python3
"""torch_peer.py - the PyTorch side of bench/run.sh.

Builds the nn.Sequential equivalent of a batchfit model spec (the subset the
shipped models use: input, conv, relu (sigmoid, silu, tanh), maxpool, avgpool, flatten, linear,
dropout; and for token models such as models/gpt-nano.cfg: input tokens=T,
embed, residual blocks, layernorm, attention, gelu, a tied linear head), or
for onnx:NAME torchvision's NAME (or a GPT: gpt_bench) as tests/onnx/export.py builds and exports
it for batchfit's side (64x64, 10 classes), trains it on synthetic data (random ids for a token model, the loss per
token) with SGD momentum 0.9 and cross-entropy, and prints one key=value
line like bench_step.c:

    torch_peer.py MODEL.cfg|onnx:NAME BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]

A step is zero_grad, forward, loss, backward, optimizer step. WARMUP steps
(default 3) are not timed; the last of them sets how many steps a timed rep
runs (about REP_SECONDS, default 0.5, at least 2); samples/s is the median
over REPS (default 5). Peak resident memory is ru_maxrss of this process.

BFIT_BENCH_MASK=0.15 (bench_step.c's too) scores that share of a token model's
labels, the rest -100, its head at every token as transformers' BertForMaskedLM
computes it; with BFIT_BENCH_PEER_GATHER=1 as well, export.py's HFBert runs its
head on the scored rows only (NVIDIA's BERT: the arithmetic batchfit does).

Debian's PyTorch does its dense products (linear layers; convolutions go
through oneDNN) through whatever libblas.so.3 the process loads, so the line
also says which BLAS that was (blas=, from /proc/self/maps): compare.py
selects it per process with LD_LIBRARY_PATH.
"""
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn


def opts(words):
    kv = {}
    pos = []
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            kv[k] = v
        else:
            pos.append(w)
    return pos, kv


class Residual(nn.Module):
    """y = x + body(x): a spec's `residual { ... }` without a shortcut."""

    def __init__(self, body):
        super().__init__()
        self.body = nn.Sequential(*body)

    def forward(self, x):
        return x + self.body(x)


class Attention(nn.Module):
    """Multi-head self-attention on [B, T, 3C] (q | k | v) -> [B, T, C], the
    attention matrix materialised as batchfit's stored variant does (torch
    1.13 has no fused attention)."""

    def __init__(self, heads, causal):
        super().__init__()
        self.h, self.causal = heads, causal

    def forward(self, x):
        B, T, C3 = x.shape
        C = C3 // 3
        hs = C // self.h
        q, k, v = (t.reshape(B, T, self.h, hs).transpose(1, 2) for t in x.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return y.transpose(1, 2).reshape(B, T, C)


class Embed(nn.Module):
    def __init__(self, vocab, width, positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(positions, width) if positions else None
        for t in (self.wte, self.wpe):  # GPT-2's init, as batchfit's embed (N(0,1) would blow up the tied logits)
            if t is not None:
                nn.init.normal_(t.weight, std=0.02)

    def forward(self, ids):
        y = self.wte(ids)
        if self.wpe is not None:
            y = y + self.wpe(torch.arange(ids.shape[1]))
        return y


def build_tokens(lines, T):
    """A token model (input tokens=T): embed, residual blocks of layernorm,
    linear, attention, gelu; a head tied to the embedding. Returns the model,
    the input (T,) and the vocabulary."""
    stack, cur, width, embed, vocab = [], [], 0, None, 0
    for name, pos, kv in lines:
        if name == "residual":
            stack.append(cur)
            cur = []
        elif name == "}":
            body, cur = cur, stack.pop()
            cur.append(Residual(body))
        elif name == "embed":
            width, vocab = int(pos[0]), int(kv["vocab"])
            embed = Embed(vocab, width, int(kv.get("positions", 0)))
            cur.append(embed)
        elif name == "layernorm":
            cur.append(nn.LayerNorm(width, eps=float(kv.get("eps", 1e-5))))
        elif name == "linear":
            n = int(pos[0])
            lin = nn.Linear(width, n, bias=kv.get("bias", "1") == "1")
            if kv.get("tie") == "1":
                lin.weight = embed.wte.weight
            elif "std" in kv:  # GPT-2's init, as batchfit's std=
                nn.init.normal_(lin.weight, std=float(kv["std"]))
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
            cur.append(lin)
            width = n
        elif name == "attention":
            cur.append(Attention(int(pos[0]), kv.get("causal", "1") == "1"))
            width //= 3
        elif name == "gelu":
            cur.append(nn.GELU())
        else:
            sys.exit(f"torch_peer.py: layer '{name}' is not supported in a token model here")
    return nn.Sequential(*cur), (T,), vocab


def spec_lines(path):
    out = []
    for raw in open(path):
        line = raw.split("#", 1)[0].replace("{", " { ").replace("}", " } ").split()
        if line:
            out.append((line[0], *opts([w for w in line[1:] if w != "{"])))
    return out


def build(path):
    """The spec's layers as nn.Sequential, and the input shape (C, H, W)
    (or (T,) for a token model, whose classes are its vocabulary)."""
    lines = spec_lines(path)
    if lines and lines[0][0] == "input" and "tokens" in lines[0][2]:
        return build_tokens(lines[1:], int(lines[0][2]["tokens"]))
    layers, shape = [], None
    for raw in open(path):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        name, (pos, kv) = line[0], opts(line[1:])
        if name == "input":
            dims = [int(d) for d in pos[0].split("x")]
            shape = tuple(dims) if len(dims) == 3 else (dims[0], 1, 1)
            c, h, w = shape
            flat = len(dims) == 1
            continue
        if name == "linear":
            n = int(pos[0])
            layers.append(nn.Linear(c * h * w, n, bias=kv.get("bias", "1") == "1"))
            c, h, w = n, 1, 1
        elif name == "conv":
            n, k = int(pos[0]), int(kv.get("k", 1))
            s, p = int(kv.get("stride", 1)), int(kv.get("pad", 0))
            layers.append(nn.Conv2d(c, n, k, stride=s, padding=p, bias=kv.get("bias", "1") == "1"))
            c, h, w = n, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif name in ("maxpool", "avgpool"):
            k = int(pos[0]) if pos else int(kv["k"])
            s, p = int(kv.get("stride", k)), int(kv.get("pad", 0))
            pool = nn.MaxPool2d if name == "maxpool" else nn.AvgPool2d
            layers.append(pool(k, stride=s, padding=p))
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif name == "relu":
            layers.append(nn.ReLU())
        elif name in ("sigmoid", "silu", "tanh"):
            layers.append({"sigmoid": nn.Sigmoid, "silu": nn.SiLU, "tanh": nn.Tanh}[name]())
        elif name == "flatten":
            layers.append(nn.Flatten())
            c, h, w = c * h * w, 1, 1
        elif name == "dropout":
            layers.append(nn.Dropout(float(pos[0]) if pos else float(kv.get("p", 0.5))))
        else:
            sys.exit(f"torch_peer.py: {path}: layer '{name}' is not supported here")
    if flat:
        layers.insert(0, nn.Flatten())
    return nn.Sequential(*layers), shape, c


def build_onnx_twin(name):
    """torchvision's NAME as tests/onnx/export.py builds (and exports) it for
    batchfit's side: the module itself, its input shape and classes."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "onnx"))
    import export
    model, size = export.build(name)
    if getattr(model, "seq_classes", False):  # a classifier of token ids: T ids in, class scores out
        return model.train(), (size,), model.classifier.out_features
    if name in export.TOKEN_MODELS:  # a language model: T token ids in, a vocabulary's scores per token out
        emb = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))  # the token table
        return model.train(), (size,), emb.num_embeddings
    return model.train(), (3, size, size), export.CLASSES


MASK = float(os.environ.get("BFIT_BENCH_MASK") or 0)  # bench_step.c's: a masked LM's share of scored tokens
# with MASK, the head at the scored tokens only, as NVIDIA's BERT (and batchfit) run it: export.py's HFBert
GATHER = os.environ.get("BFIT_BENCH_PEER_GATHER") == "1"


def gathered_loss(model, x, y, lossf):
    """HFBert's head at the rows whose label counts (y != -100), gathered after its body."""
    h = model.body(x)
    keep = y != -100
    pr = model.cls.predictions
    h = pr.transform.LayerNorm(torch.nn.functional.gelu(pr.transform.dense(h.reshape(-1, h.shape[-1])[keep])))
    return lossf(pr.decoder(h), y[keep])


def loaded_blas():
    """The BLAS (and LAPACK) library files mapped into this process."""
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if ("blas" in name or "lapack" in name) and path not in found:
                found.append(path)
    blas = [p for p in found if "blas" in os.path.basename(p)]
    return ",".join(blas) or "none", ",".join(p for p in found if p not in blas) or "none"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: torch_peer.py MODEL.cfg|onnx:NAME BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]")
    a = sys.argv + [None] * 6
    path, batch = a[1], int(a[2])
    reps, warmup = int(a[3] or 5), int(a[4] or 3)
    threads, rep_s = int(a[5] or 2), float(a[6] or 0.5)
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model, shape, classes = build_onnx_twin(path[5:]) if path.startswith("onnx:") else build(path)
    tokens = len(shape) == 1 and not getattr(model, "seq_classes", False)
    if len(shape) == 1 and not tokens:  # a classifier of token ids: ids in, a class a sequence
        emb = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
        x = torch.randint(0, emb.num_embeddings, (batch, *shape))
        y = torch.randint(0, classes, (batch,))
    elif tokens:  # ids in, a label per token
        x = torch.randint(0, classes, (batch, *shape))
        y = torch.randint(0, classes, (batch * shape[0],))
        if MASK > 0:  # a masked LM's: p of them scored, -100 (ignored) elsewhere; the head at every token, as
            y[torch.rand(y.shape) >= MASK] = -100  # transformers' BertForMaskedLM computes it
    else:
        x = torch.rand(batch, *shape)
        y = torch.randint(0, classes, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    rates, cpu_rates, loss, steps, t_step = [], [], None, 2, 0.0
    for r in range(-1, reps):
        n = warmup if r < 0 else steps
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            t_step = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if GATHER and MASK > 0:
                loss = gathered_loss(model, x, y, lossf)
            else:
                out = model(x)
                loss = lossf(out.reshape(-1, classes) if tokens else out, y)
            loss.backward()
            opt.step()
            t_step = time.perf_counter() - t_step
        if r >= 0:
            rates.append(n * batch / (time.perf_counter() - t0))
            cpu_rates.append(n * batch / (time.process_time() - c0))
        elif t_step > 0 and rep_s / t_step > steps:
            steps = int(rep_s / t_step + 0.5)
    blas, lapack = loaded_blas()
    extra = f"tokens_per_s={statistics.median(rates) * shape[0]:.1f} " if tokens else ""
    print(f"side=torch batch={batch} samples_per_s={statistics.median(rates):.1f} {extra}"
          f"maxrss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} reps={reps} steps={steps} "
          f"warmup={warmup} threads={torch.get_num_threads()} loss={loss.item():.4f} torch={torch.__version__} "
          f"blas={blas} lapack={lapack} samples_per_cpu_s={statistics.median(cpu_rates):.1f}")


if __name__ == "__main__":
    main()
