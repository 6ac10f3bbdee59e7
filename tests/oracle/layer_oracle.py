#!/usr/bin/python3
"""layer_oracle.py - PyTorch's answers for every batchfit layer kind.

Usage: /usr/bin/python3 layer_oracle.py OUTDIR

Writes OUTDIR/case_NNN_<label>.safetensors, one per case, holding
  x0 (x1 for add)            the inputs, [m, C, H, W] float32 ([m, T, F] for
                             a token sequence)
  weight, bias, running_*    the layer's parameters under PyTorch's names
  grad_out                   dy (not for the loss)
  labels                     I32 class indices (loss only)
  y, dx0 (dx1), d<param>     expected output and gradients
  new_running_mean/var       batch norm's running statistics after forward
  loss, correct              expected loss, and the samples whose arg-max is
                             the label (loss only)
and the layer config as string metadata (kind, units, kh, kw, sh, sw, ph, pw,
bias, eps, momentum, p, in0, in1, m, training, loss_scale, params), plus
scale_<tensor> where a result is much smaller than the terms summed into it
(cancellation), so the test judges its error against the terms' size.
in0/in1 are "CxHxW" for images and vectors (F as Fx1x1), and "TxF" for a
sequence of T tokens of F features (cases added with seq=1: linear,
layernorm and layerscale, which act on each token).

Inputs and parameters are drawn as float32; torch then computes in float64
from those exact values, so the expected results are the float32 problem's
true answers, rounded once to float32. test_layers_torch compares the C
layers against them.
"""
import math
import json
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the project's setup installs python3-torch
    sys.exit("layer_oracle.py: PyTorch is required (apt-get install python3-torch; "
             "run with /usr/bin/python3, not another python3): %s" % e)

DT = {torch.float32: "F32", torch.int32: "I32"}


def write_safetensors(path, tensors, meta):
    """Plain safetensors writer (json + struct), so the oracle does not depend
    on the safetensors package; tensors are all 4-byte types, so any order
    keeps them aligned."""
    hdr, chunks, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[name] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    js = json.dumps(hdr, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(chunks))
    os.replace(tmp, path)


def f32(x):
    """The float32 value of x, as a Python float (exact)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Case:
    def __init__(self, idx, label, kind, shapes, m, training=1, seq=0, **cfg):
        self.idx, self.label, self.kind, self.m, self.training, self.seq = idx, label, kind, m, training, seq
        if seq:  # [T, F] as given
            assert kind in ("linear", "layernorm", "embed", "attention", "xent", "layerscale", "rmsnorm", "mul",
                            "rope", "repeat", "gap", "select") and \
                all(len(s) == 2 for s in shapes)
            self.shapes = [tuple(s) for s in shapes]
        else:
            self.shapes = [tuple(s) + (1,) * (3 - len(s)) for s in shapes]  # CxHxW
        self.cfg = dict(units=0, kh=1, kw=1, sh=1, sw=1, ph=0, pw=0, bias=1, eps=1e-5, momentum=0.1, p=0.5)
        if kind == "conv":
            self.cfg.update(groups=1)
        if kind == "clip":
            self.cfg.update(lo=0.0, hi=6.0)
        if kind == "hardsigmoid":
            self.cfg.update(alpha=f32(1.0 / 6.0), beta=0.5)
        if kind in ("leakyrelu", "elu", "celu"):  # PyTorch's defaults: negative_slope 0.01, alpha 1
            self.cfg.update(alpha=f32(0.01) if kind == "leakyrelu" else 1.0)
        if kind == "softplus":
            self.cfg.update(beta=1.0, threshold=20.0)
        if kind == "prelu":  # nn.PReLU(): one slope (units), starting at 0.25; the case draws them
            self.cfg.update(units=1)
        if kind == "concat":
            self.cfg.update(axis=0)
        if kind in ("embed", "attention"):
            self.cfg.update(vocab=0, positions=0, types=0, causal=1, lean=0)
        if kind == "attention":  # dropout on the weights: none unless a case asks
            self.cfg.update(p=0.0)
        if kind == "embed":  # the token rows' factor (0: 1), the positions a constant
            self.cfg.update(escale=0.0, pos_fixed=0, pos_off=0)
        self.cfg.update(cfg)
        self.lens = self.cfg.pop("lens", None)  # attention's key-padding mask, carried as tensor "lens"
        self.pairs = self.cfg.pop("pairs", 0)  # embed: sentence pairs, each token's type in its id's high bits
        self.g = torch.Generator().manual_seed(7919 * (idx + 1))

    def uniform(self, shape, lo=-1.0, hi=1.0):
        """float32 draws, returned as float64 leaves (exactly the stored values)."""
        t = torch.rand(shape, generator=self.g, dtype=torch.float32) * (hi - lo) + lo
        return t.double()


def leaf(t):
    return t.clone().requires_grad_(True)


SEED = 12345  # the seed test_layers_torch.c gives forward and backward


def mix64(x):
    """src/base/rand.h's bfit_mix64 (splitmix64's finaliser) on 64-bit integers."""
    M = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def attention_keep(m, H, T, p, seed=SEED):
    """The mask batchfit's attention draws for dropout p on its weights [m, H, T, T]: element (lane, i, j),
    lane = b H + h, kept when the high 32 bits of mix64(mix64(seed) + (lane T + i) T + j) are at least
    p 2^32 (cpu_attn.c's drop_rows). Written here from the formula, not taken from batchfit."""
    s, thresh, M = mix64(seed), int(f32(p) * 4294967296.0), (1 << 64) - 1
    keep = [(mix64((s + e) & M) >> 32) >= thresh for e in range(m * H * T * T)]
    return torch.tensor(keep, dtype=torch.bool).reshape(m, H, T, T)


def run_attention(c, x, lens=None):
    """Multi-head self-attention on x [m, T, 3C] (q | k | v), GPT-2's way:
    scores q k^T / sqrt(hs), masked above the diagonal when causal, softmax,
    dropout (p: attention_keep's mask, the kept weights times 1/(1-p)),
    times v; heads side by side in the output [m, T, C]. lens: each
    sequence's real length, the keys after it masked (key_padding_mask;
    a length of 0 keeps one key, as batchfit does, so no row is empty)."""
    m, T, C3 = x.shape
    H = c.cfg["units"]
    C = C3 // 3
    hs = C // H
    q, k, v = (t.reshape(m, T, H, hs).transpose(1, 2) for t in x.split(C, dim=2))
    att = q @ k.transpose(-2, -1) / (hs ** 0.5)
    if c.cfg["causal"]:
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    if lens is not None:
        keep = torch.arange(T)[None, :] < torch.tensor([max(n, 1) for n in lens])[:, None]  # [m, T]
        att = att.masked_fill(~keep[:, None, None, :], float("-inf"))
    att = torch.softmax(att, dim=-1)
    if c.cfg["p"] > 0:
        att = att * attention_keep(m, H, T, c.cfg["p"]) * f32(1.0 / f32(1.0 - f32(c.cfg["p"])))
    return (att @ v).transpose(1, 2).reshape(m, T, C)


def run_embed(c, ids, params):
    """Token + position (+ token type) embeddings of ids [m, T]; the token rows times escale (the Transformer
    tutorial's sqrt(C)), the positions a constant with pos_fixed (a sinusoidal buffer: no gradient); the types
    c.types (sentence pairs: 0 then 1 from a point in each sequence), else 0 at every token."""
    cfg, (T, _) = c.cfg, c.shapes[0]
    params["weight"] = c.uniform((cfg["vocab"], cfg["units"]))
    if cfg["positions"]:
        params["pos_weight"] = c.uniform((cfg["positions"], cfg["units"]))
    if cfg["types"]:
        params["type_weight"] = c.uniform((cfg["types"], cfg["units"]))
    p = {n: leaf(t) for n, t in params.items() if not (n == "pos_weight" and cfg["pos_fixed"])}
    y = F.embedding(ids, p["weight"])
    if cfg["escale"]:
        y = y * cfg["escale"]
    if cfg["positions"]:
        y = y + F.embedding(torch.arange(T) + cfg["pos_off"], p.get("pos_weight", params["pos_weight"]))
    if cfg["types"]:
        types = c.types if c.pairs else torch.zeros(T, dtype=torch.int64)
        y = y + F.embedding(types, p["type_weight"])
    return y, p


def rms_norm(x, w, eps, dims):
    """LLaMA's RMSNorm, as its reference code writes it: x * rsqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * w


def run_seq(c, x, params):
    """linear / layernorm on [m, T, F]: torch's modules, which act on the last
    dimension, so on each token. Returns (y, the module's parameters)."""
    k, cfg, Fdim = c.kind, c.cfg, c.shapes[0][1]
    if k == "attention":
        return run_attention(c, x[0], c.lens), {}
    if k == "gap":  # the mean of each sequence's real tokens (a sentence classifier's pooling): [m, T, C] -> [m, C]
        T = c.shapes[0][0]
        n = torch.tensor(c.lens if c.lens is not None else [T] * x[0].shape[0])
        keep = (torch.arange(T)[None, :] < n[:, None]).double()[..., None]
        return (x[0] * keep).sum(1) / keep.sum(1), {}
    if k == "select":  # token `units` of [m, T, C]; -1: each sequence's last real token (GPT-2's classifier)
        if cfg["units"] >= 0:
            return x[0][:, cfg["units"]], {}
        T = c.shapes[0][0]
        last = [min(max(n, 1), T) - 1 for n in (c.lens if c.lens is not None else [T] * x[0].shape[0])]
        return x[0][torch.arange(x[0].shape[0]), torch.tensor(last)], {}
    if k == "mul":  # SwiGLU's product of two branches
        return x[0] * x[1], {}
    if k == "repeat":  # Hugging Face's repeat_kv: each head of d columns repeated (grouped-query attention)
        T, d, r = c.shapes[0][0], cfg["units"], cfg["groups"]
        hk = x[0].reshape(x[0].shape[0], T, Fdim // d, d).transpose(1, 2)
        b, g = hk.shape[0], hk.shape[1]
        rep = hk[:, :, None, :, :].expand(b, g, r, T, d).reshape(b, g * r, T, d)
        return rep.transpose(1, 2).reshape(b, T, g * r * d), {}
    if k == "rope":  # Hugging Face's LLaMA: q cos + rotate_half(q) sin on each head of d columns
        T, d = c.shapes[0][0], cfg["units"]
        inv = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2).float() / d))
        ang = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos().double(), emb.sin().double()  # float32 tables, as the module's buffers
        q = x[0].reshape(x[0].shape[0], T, Fdim // d, d).transpose(1, 2)
        rot = torch.cat((-q[..., d // 2:], q[..., :d // 2]), dim=-1)
        return (q * cos + rot * sin).transpose(1, 2).reshape(x[0].shape), {}
    if k == "rmsnorm":  # LLaMA's RMSNorm over each token's features; offset: Gemma's, times 1 + w
        off = cfg.get("offset", 0)
        params["weight"] = c.uniform((Fdim,), 0.7 - off, 1.3 - off)
        p = {"weight": leaf(params["weight"])}
        return rms_norm(x[0], off + p["weight"], cfg["eps"], (-1,)), p
    if k == "layerscale":  # timm's LayerScale: x * gamma, gamma [F] along the last dimension (or one number)
        params["weight"] = c.uniform((cfg["units"] or Fdim,), -1.5, 1.5)
        p = {"weight": leaf(params["weight"])}
        return x[0] * p["weight"], p
    if k == "linear" and cfg.get("wt"):  # transformers' Conv1D: weight [in, out], torch.addmm on the rows
        params["weight"] = c.uniform((Fdim, cfg["units"]), -0.5, 0.5)
        params["bias"] = c.uniform((cfg["units"],), -0.5, 0.5)
        p = {n: leaf(t) for n, t in params.items()}
        rows = torch.addmm(p["bias"], x[0].reshape(-1, Fdim), p["weight"])
        return rows.reshape(x[0].shape[:-1] + (cfg["units"],)), p
    if k == "linear":
        mod = torch.nn.Linear(Fdim, cfg["units"], bias=bool(cfg["bias"]), dtype=torch.float64)
        params["weight"] = c.uniform((cfg["units"], Fdim), -0.5, 0.5)
        if cfg["bias"]:
            params["bias"] = c.uniform((cfg["units"],), -0.5, 0.5)
    else:  # bias 0: a scale alone (nanoGPT's LayerNorm(bias=False); PyTorch 2.1's nn.LayerNorm(bias=False))
        mod = torch.nn.LayerNorm(Fdim, eps=cfg["eps"], dtype=torch.float64)
        params["weight"] = c.uniform((Fdim,), 0.7, 1.3)
        params["bias"] = c.uniform((Fdim,), -0.3, 0.3)
        if not cfg["bias"]:
            del mod.bias
            mod.register_parameter("bias", None)
            del params["bias"]
    with torch.no_grad():
        for n, t in mod.named_parameters():
            t.copy_(params[n])
    return mod(x[0]), dict(mod.named_parameters())


def run_case(c, outdir):
    m, cfg, k = c.m, c.cfg, c.kind
    C, H, W = c.shapes[0] if not c.seq else (0, 0, 0)
    xs = [c.uniform((m,) + s) for s in c.shapes]
    params, state = {}, {}
    extra = {}
    meta = {}

    if "x_scale" in cfg:  # clip across both bounds; sigmoid's kin into their tails
        xs[0] = xs[0] * cfg.pop("x_scale")
        xs[0] = xs[0].float().double()
    if k == "maxpool":  # distinct values, so the maximum of every window is unique
        n = m * C * H * W
        xs[0] = (torch.randperm(n, generator=c.g).double() * (2.0 / n) - 1.0).float().double().reshape(m, C, H, W)
    if k == "xent":
        xs[0] = xs[0] * cfg.pop("logit_scale", 1.0)
        xs[0] = xs[0].float().double()
    if k == "embed":  # token ids, repeats included
        xs[0] = torch.randint(0, cfg["vocab"], (m, c.shapes[0][0]), generator=c.g, dtype=torch.int64)
        if c.pairs:  # the second sentence from a point in each sequence on
            T = c.shapes[0][0]
            c.types = (torch.arange(T)[None, :] >= torch.randint(1, T, (m, 1), generator=c.g)).long()
    x = [leaf(t) for t in xs] if k != "embed" else [xs[0]]

    if k == "embed":
        y, p = run_embed(c, x[0], params)
        st = {}
    elif c.seq and k == "xent":
        p, st = {}, {}
        V = c.shapes[0][1]
        labels = torch.randint(0, V, (m, c.shapes[0][0]), generator=c.g, dtype=torch.int64)
        labels[:, 1::3] = -1  # padding tokens
        loss_scale = f32(cfg.pop("loss_scale"))
        loss = F.cross_entropy(x[0].reshape(-1, V), labels.reshape(-1), ignore_index=-1, reduction="sum")
        y = torch.softmax(x[0], dim=-1)
        extra["labels"] = labels.to(torch.int32).reshape(-1)
        extra["loss"] = loss.detach().reshape(1)
        right = ((x[0].detach().argmax(dim=-1) == labels) & (labels >= 0)).sum()
        extra["correct"] = right.double().reshape(1)
        meta["loss_scale"] = repr(loss_scale)
    elif c.seq:
        y, p = run_seq(c, x, params)
        st = {}
    elif k == "linear":
        fan_in = C * H * W
        params["weight"] = c.uniform((cfg["units"], fan_in), -0.5, 0.5)
        if cfg["bias"]:
            params["bias"] = c.uniform((cfg["units"],), -0.5, 0.5)
    elif k == "conv":
        params["weight"] = c.uniform((cfg["units"], C // cfg["groups"], cfg["kh"], cfg["kw"]), -0.5, 0.5)
        if cfg["bias"]:
            params["bias"] = c.uniform((cfg["units"],), -0.5, 0.5)
    elif k == "batchnorm":
        params["weight"] = c.uniform((C,), 0.7, 1.3)
        params["bias"] = c.uniform((C,), -0.3, 0.3)
        state["running_mean"] = c.uniform((C,), -0.5, 0.5)
        state["running_var"] = c.uniform((C,), 0.5, 1.5)
    elif k == "layernorm":
        pshape = (C,) if H == 1 and W == 1 else (C, H, W)
        params["weight"] = c.uniform(pshape, 0.7, 1.3)
        params["bias"] = c.uniform(pshape, -0.3, 0.3)
        if not cfg["bias"]:  # a scale alone
            del params["bias"]
    elif k == "rmsnorm":
        params["weight"] = c.uniform((C,) if H == 1 and W == 1 else (C, H, W), 0.7, 1.3)
    elif k == "prelu":  # slopes of both signs
        params["weight"] = c.uniform((cfg["units"],), -0.5, 0.5)
    elif k == "layerscale":  # scales of both signs, one per channel (feature), or one (units 1)
        params["weight"] = c.uniform((cfg["units"] or C,), -1.5, 1.5)
    elif k == "groupnorm":
        params["weight"] = c.uniform((C,), 0.7, 1.3)
        params["bias"] = c.uniform((C,), -0.3, 0.3)
    if not c.seq:
        p = {n: leaf(t) for n, t in params.items()}
        st = {n: t.clone() for n, t in state.items()}

    if c.seq:
        pass  # y came from run_seq above
    elif k == "linear":
        y = F.linear(x[0].flatten(1), p["weight"], p.get("bias"))
    elif k == "conv":
        y = F.conv2d(x[0], p["weight"], p.get("bias"), stride=(cfg["sh"], cfg["sw"]), padding=(cfg["ph"], cfg["pw"]),
                     groups=cfg["groups"])
    elif k == "maxpool":
        y = F.max_pool2d(x[0], (cfg["kh"], cfg["kw"]), (cfg["sh"], cfg["sw"]), (cfg["ph"], cfg["pw"]))
    elif k == "avgpool":
        y = F.avg_pool2d(x[0], (cfg["kh"], cfg["kw"]), (cfg["sh"], cfg["sw"]), (cfg["ph"], cfg["pw"]),
                         count_include_pad=True)
    elif k == "gap":
        y = F.adaptive_avg_pool2d(x[0], 1).flatten(1)
    elif k == "relu":
        y = F.relu(x[0])
    elif k == "gelu":  # the exact (erf) form, PyTorch's default, or with tanh=1 its tanh approximation
        y = F.gelu(x[0], approximate="tanh" if cfg.get("tanh") else "none")
    elif k == "sigmoid":
        y = torch.sigmoid(x[0])
    elif k == "silu":
        y = F.silu(x[0])
    elif k == "tanh":
        y = torch.tanh(x[0])
    elif k == "hardsigmoid":  # PyTorch's F.hardsigmoid is alpha 1/6, beta 1/2; ONNX's HardSigmoid any
        y = torch.clamp(cfg["alpha"] * x[0] + cfg["beta"], 0.0, 1.0)
    elif k == "hardswish":
        y = F.hardswish(x[0])
    elif k == "leakyrelu":
        y = F.leaky_relu(x[0], cfg["alpha"])
    elif k == "elu":
        y = F.elu(x[0], cfg["alpha"])
    elif k == "selu":
        y = F.selu(x[0])
    elif k == "celu":
        y = F.celu(x[0], cfg["alpha"])
    elif k == "softplus":  # linear where beta x > threshold
        y = F.softplus(x[0], cfg["beta"], cfg["threshold"])
    elif k == "scale":  # [m, C, H, W] by [m, C, 1, 1]: a squeeze-and-excitation gate
        y = x[0] * x[1]
    elif k == "prelu":  # along dimension 1: an image's channels, a vector's (Fx1x1) features
        y = F.prelu(x[0], p["weight"])
    elif k == "layerscale":  # torchvision's ConvNeXt's layer_scale [C, 1, 1]; a vector's as Cx1x1
        y = x[0] * p["weight"].view(-1, 1, 1)
    elif k == "groupnorm":  # nn.GroupNorm(units, C); a vector's as Cx1x1
        y = F.group_norm(x[0], cfg["units"], p["weight"], p["bias"], cfg["eps"])
    elif k == "clip":
        y = F.hardtanh(x[0], cfg["lo"], cfg["hi"])  # ReLU6 at [0, 6]: its gradient only strictly inside
    elif k == "concat":
        y = torch.cat(x, dim=cfg["axis"] + 1)
    elif k == "flatten":
        y = x[0].flatten(1)
    elif k == "dropout":
        assert not c.training or cfg["p"] == 0.0, "dropout masks are random: only eval or p=0"
        y = F.dropout(x[0], cfg["p"], bool(c.training))
    elif k == "batchnorm":
        xin = x[0].reshape(m, C) if H == 1 and W == 1 else x[0]  # BatchNorm1d on vectors
        y = F.batch_norm(xin, st["running_mean"], st["running_var"], p["weight"], p["bias"], bool(c.training),
                         cfg["momentum"], cfg["eps"])
        extra["new_running_mean"] = st["running_mean"]
        extra["new_running_var"] = st["running_var"]
    elif k == "layernorm":
        shp = x[0].shape[1:]
        y = F.layer_norm(x[0], shp, p["weight"].reshape(shp), p["bias"].reshape(shp) if "bias" in p else None,
                         cfg["eps"])
    elif k in ("add", "mul"):
        y = x[0] + x[1] if k == "add" else x[0] * x[1]
    elif k == "rmsnorm":  # over all of a sample's features, as layernorm on an image or a vector
        y = rms_norm(x[0], p["weight"].reshape(x[0].shape[1:]), cfg["eps"], (1, 2, 3))
    elif k == "xent" and not c.seq:
        labels = torch.randint(0, C, (m,), generator=c.g, dtype=torch.int64)
        loss_scale = f32(cfg.pop("loss_scale"))
        loss = F.cross_entropy(x[0].flatten(1), labels, reduction="sum")
        y = torch.softmax(x[0].flatten(1), dim=1)
        extra["labels"] = labels.to(torch.int32)
        extra["loss"] = loss.detach().reshape(1)
        right = (x[0].detach().flatten(1).argmax(dim=1) == labels).sum()
        extra["correct"] = right.double().reshape(1)
        meta["loss_scale"] = repr(loss_scale)
    else:
        raise ValueError("unknown kind " + k)

    out = {}
    for i, t in enumerate(xs):
        out["x%d" % i] = (t | c.types << 24 if c.pairs else t).to(torch.int32) if k == "embed" else t
    out.update(params)
    out.update(state)
    if c.training:
        if k == "xent":
            loss.backward(torch.tensor(loss_scale, dtype=torch.float64))
        else:
            dy = c.uniform(tuple(y.shape))
            y.backward(dy)
            out["grad_out"] = dy
            if k == "batchnorm" and c.training:
                # dx = w/sigma * (dy - mean(dy) - xhat * mean(dy * xhat)) can cancel almost
                # wholly (m=2: xhat = +-1 up to eps), so it is judged by the size of its terms
                dims = [d for d in range(xin.dim()) if d != 1]
                sigma = (xin.detach().var(dim=dims, unbiased=False) + cfg["eps"]).sqrt()
                meta["scale_dx0"] = repr(float((params["weight"].abs() / sigma).max() * dy.pow(2).mean().sqrt()))
        for i, t in enumerate(x):
            if k != "embed":  # ids have no gradient
                out["dx%d" % i] = t.grad
        for n, t in p.items():
            out["d" + n] = t.grad
    out["y"] = y
    if c.lens is not None:
        extra["lens"] = torch.tensor(c.lens, dtype=torch.int32)
    out.update(extra)
    tensors = {n: (t.detach().float() if t.dtype == torch.float64 else t) for n, t in out.items()}

    meta.update({key: repr(float(v)) if isinstance(v, float) else str(v) for key, v in cfg.items()})
    meta.update(kind=k, label=c.label, m=str(m), training=str(c.training),
                params=",".join(list(params) + list(state)))
    for i, s in enumerate(c.shapes):
        meta["in%d" % i] = "x".join(str(d) for d in s)  # CxHxW, or TxF for a sequence
    path = os.path.join(outdir, "case_%03d_%s.safetensors" % (c.idx, c.label))
    write_safetensors(path, tensors, meta)


def cases():
    """(label, kind, input shapes, m, training, config)."""
    L = []

    def add(label, kind, shapes, m, training=1, **cfg):
        L.append((label, kind, shapes, m, training, cfg))

    add("linear_m1_5to3", "linear", [(5,)], 1, units=3)
    add("linear_m7_37to13", "linear", [(37,)], 7, units=13)
    add("linear_m7_300to11_nobias", "linear", [(300,)], 7, units=11, bias=0)
    add("linear_m5_64to1", "linear", [(64,)], 5, units=1)
    add("conv_m1_3x5x7_k3p1", "conv", [(3, 5, 7)], 1, units=4, kh=3, kw=3, ph=1, pw=1)
    add("conv_m7_3x5x7_k3s2p1", "conv", [(3, 5, 7)], 7, units=5, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1)
    add("conv_m2_4x6x6_k1_nobias", "conv", [(4, 6, 6)], 2, units=3, bias=0)
    add("conv_m3_2x9x8_k3s2", "conv", [(2, 9, 8)], 3, units=6, kh=3, kw=3, sh=2, sw=2)
    add("conv_m3_2x7x6_k3x1_s1x2_p1x0", "conv", [(2, 7, 6)], 3, units=4, kh=3, kw=1, sh=1, sw=2, ph=1, pw=0)
    add("conv_m4_16x8x8_k3p1", "conv", [(16, 8, 8)], 4, units=8, kh=3, kw=3, ph=1, pw=1)
    add("maxpool_m1_3x5x7_k2", "maxpool", [(3, 5, 7)], 1, kh=2, kw=2, sh=2, sw=2)
    add("maxpool_m7_2x7x9_k3s2p1", "maxpool", [(2, 7, 9)], 7, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1)
    add("maxpool_m2_4x6x5_k3s1p1", "maxpool", [(4, 6, 5)], 2, kh=3, kw=3, ph=1, pw=1)
    add("avgpool_m1_3x5x7_k2", "avgpool", [(3, 5, 7)], 1, kh=2, kw=2, sh=2, sw=2)
    add("avgpool_m7_2x7x9_k3s2p1", "avgpool", [(2, 7, 9)], 7, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1)
    add("avgpool_m2_3x6x6_k3s1p1", "avgpool", [(3, 6, 6)], 2, kh=3, kw=3, ph=1, pw=1)
    add("gap_m1_3x5x7", "gap", [(3, 5, 7)], 1)
    add("gap_m7_8x4x4", "gap", [(8, 4, 4)], 7)
    add("relu_m1_3x5x7", "relu", [(3, 5, 7)], 1)
    add("relu_m7_37", "relu", [(37,)], 7)
    add("gelu_m1_3x5x7", "gelu", [(3, 5, 7)], 1)
    add("gelu_m7_37", "gelu", [(37,)], 7)
    for k in ("sigmoid", "silu", "tanh"):  # x_scale 4: both tails, where the sigmoid saturates
        add(k + "_m1_3x5x7", k, [(3, 5, 7)], 1, x_scale=4.0)
        add(k + "_m7_37", k, [(37,)], 7)
    # MobileNetV3's and EfficientNet's: x_scale 4 or 5 crosses the kinks at +-3
    add("hardsigmoid_m1_3x5x7", "hardsigmoid", [(3, 5, 7)], 1, x_scale=4.0)
    add("hardsigmoid_m2_37_alpha0.2", "hardsigmoid", [(37,)], 2, x_scale=4.0, alpha=f32(0.2), beta=0.5)
    add("hardswish_m1_3x5x7", "hardswish", [(3, 5, 7)], 1, x_scale=5.0)
    add("hardswish_m7_37", "hardswish", [(37,)], 7, x_scale=4.0)
    # nn.LeakyReLU, nn.ELU, nn.Softplus: defaults, then other parameters (a negative slope and beta;
    # softplus's threshold 1.5 at beta 2 is crossed by x_scale 2, where PyTorch's output jumps to x)
    add("leakyrelu_m1_3x5x7", "leakyrelu", [(3, 5, 7)], 1)
    add("leakyrelu_m7_37_slope0.2", "leakyrelu", [(37,)], 7, alpha=f32(0.2))
    add("leakyrelu_m2_37_slope-0.5", "leakyrelu", [(37,)], 2, alpha=-0.5)
    add("elu_m1_3x5x7", "elu", [(3, 5, 7)], 1, x_scale=4.0)
    add("elu_m7_37_alpha0.5", "elu", [(37,)], 7, x_scale=4.0, alpha=0.5)
    add("softplus_m1_3x5x7", "softplus", [(3, 5, 7)], 1, x_scale=4.0)
    add("softplus_m2_37_beta2_threshold1.5", "softplus", [(37,)], 2, x_scale=2.0, beta=2.0, threshold=1.5)
    add("softplus_m3_37_beta-1.5", "softplus", [(37,)], 3, x_scale=4.0, beta=-1.5)
    # nn.SELU (fixed constants), nn.CELU: its default, another alpha and a negative one
    add("selu_m1_3x5x7", "selu", [(3, 5, 7)], 1, x_scale=4.0)
    add("selu_m7_37", "selu", [(37,)], 7)
    add("celu_m1_3x5x7", "celu", [(3, 5, 7)], 1, x_scale=4.0)
    add("celu_m7_37_alpha0.5", "celu", [(37,)], 7, x_scale=4.0, alpha=0.5)
    add("celu_m2_37_alpha-2", "celu", [(37,)], 2, x_scale=4.0, alpha=-2.0)
    # nn.PReLU() and nn.PReLU(C): one slope, one per channel or feature; the 16x24x24 ones take the
    # parallel loops (rows of 576 x 64 elements)
    add("prelu_m1_3x5x7", "prelu", [(3, 5, 7)], 1)
    add("prelu_m7_3x5x7_channels3", "prelu", [(3, 5, 7)], 7, units=3)
    add("prelu_m3_37", "prelu", [(37,)], 3)
    add("prelu_m2_37_channels37", "prelu", [(37,)], 2, units=37)
    add("prelu_m4_16x24x24_channels16", "prelu", [(16, 24, 24)], 4, units=16)
    add("prelu_m4_16x24x24", "prelu", [(16, 24, 24)], 4)
    # layerscale: one scale per channel of an image, feature of a vector or of a sequence's tokens; the
    # 16x24x24 and T=300 ones take the parallel loops, T=300 x m=2 rows cross the gradient's 256-row parts
    add("layerscale_m3_3x5x7", "layerscale", [(3, 5, 7)], 3)
    add("layerscale_m4_16x24x24", "layerscale", [(16, 24, 24)], 4)
    add("layerscale_m2_37", "layerscale", [(37,)], 2)
    add("layerscale_seq_m3_T5_7", "layerscale", [(5, 7)], 3, seq=1)
    add("layerscale_seq_m2_T300_24", "layerscale", [(300, 24)], 2, seq=1)
    add("layerscale_m3_3x5x7_one", "layerscale", [(3, 5, 7)], 3, units=1)
    add("layerscale_seq_m2_T5_7_one", "layerscale", [(5, 7)], 2, seq=1, units=1)
    # groupnorm: groups of several channels, of one (instance norm), all in one (layer norm); the 32x16x16
    # one takes the parallel loops
    add("groupnorm_m3_4x5x7_g2", "groupnorm", [(4, 5, 7)], 3, units=2)
    add("groupnorm_m2_6x3x3_g6", "groupnorm", [(6, 3, 3)], 2, units=6)
    add("groupnorm_m2_6x3x3_g1_eps1e-3", "groupnorm", [(6, 3, 3)], 2, units=1, eps=1e-3)
    add("groupnorm_m4_12_g3", "groupnorm", [(12,)], 4, units=3)
    add("groupnorm_m4_32x16x16_g8", "groupnorm", [(32, 16, 16)], 4, units=8)
    add("scale_m3_4x5x6_by_4x1x1", "scale", [(4, 5, 6), (4,)], 3)
    add("scale_m1_16x3x3_by_16x1x1", "scale", [(16, 3, 3), (16, 1, 1)], 1)
    add("flatten_m7_3x5x7", "flatten", [(3, 5, 7)], 7)
    add("dropout_eval_m7_37", "dropout", [(37,)], 7, training=0, p=0.5)
    add("dropout_p0_train_m3_3x5x7", "dropout", [(3, 5, 7)], 3, p=0.0)
    add("batchnorm2d_train_m7_3x5x7", "batchnorm", [(3, 5, 7)], 7)
    add("batchnorm2d_train_m1_4x3x5", "batchnorm", [(4, 3, 5)], 1)
    add("batchnorm2d_train_m2_5x4x4_mom0.3_eps1e-3", "batchnorm", [(5, 4, 4)], 2, momentum=0.3, eps=1e-3)
    add("batchnorm1d_train_m7_13", "batchnorm", [(13,)], 7)
    add("batchnorm1d_train_m2_5", "batchnorm", [(5,)], 2)
    add("batchnorm1d_train_m2_33", "batchnorm", [(33,)], 2)  # the smallest micro-batch it trains on
    add("batchnorm2d_eval_m7_3x5x7", "batchnorm", [(3, 5, 7)], 7, training=0)
    add("batchnorm1d_eval_m1_13", "batchnorm", [(13,)], 1, training=0)
    add("layernorm_m1_3x5x7", "layernorm", [(3, 5, 7)], 1)
    add("layernorm_m7_37", "layernorm", [(37,)], 7)
    add("layernorm_m3_300", "layernorm", [(300,)], 3)
    # what ONNX imports need: grouped and depthwise convolutions, ReLU6, concatenations
    add("conv_m3_4x6x6_k3p1_groups2", "conv", [(4, 6, 6)], 3, units=6, kh=3, kw=3, ph=1, pw=1, groups=2)
    add("conv_m2_8x7x7_k3s2p1_depthwise", "conv", [(8, 7, 7)], 2, units=8, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1,
        groups=8, bias=0)
    add("conv_m2_6x5x5_k1_groups3_x2", "conv", [(6, 5, 5)], 2, units=12, groups=3)
    add("clip_relu6_m3_3x5x7", "clip", [(3, 5, 7)], 3, x_scale=8.0)
    add("clip_m2_37_lo-0.5_hi0.25", "clip", [(37,)], 2, lo=-0.5, hi=0.25)
    add("concat_m3_channels_2+3+1x4x5", "concat", [(2, 4, 5), (3, 4, 5), (1, 4, 5)], 3)
    add("concat_m2_height_3x2x4+3x5x4", "concat", [(3, 2, 4), (3, 5, 4)], 2, axis=1)
    add("concat_m4_vectors_7+5", "concat", [(7,), (5,)], 4)
    add("add_m1_3x5x7", "add", [(3, 5, 7), (3, 5, 7)], 1)
    add("add_m7_37", "add", [(37,), (37,)], 7)
    add("xent_m1_10_scale1", "xent", [(10,)], 1, loss_scale=1.0)
    add("xent_m7_10_scale1over7", "xent", [(10,)], 7, loss_scale=1.0 / 7)
    add("xent_m7_3_scale0.25_logits8", "xent", [(3,)], 7, loss_scale=0.25, logit_scale=8.0)
    # token sequences [T, F]: nn.Linear and nn.LayerNorm(F) on [m, T, F]
    add("linear_seq_m1_T1_7to5", "linear", [(1, 7)], 1, seq=1, units=5)
    add("linear_seq_m3_T5_7to4", "linear", [(5, 7)], 3, seq=1, units=4)
    add("linear_seq_m1_T5_3to6", "linear", [(5, 3)], 1, seq=1, units=6)
    add("linear_seq_m3_T1_37to13_nobias", "linear", [(1, 37)], 3, seq=1, units=13, bias=0)
    add("linear_seq_m3_T5_64to9", "linear", [(5, 64)], 3, seq=1, units=9)
    # transformers' Conv1D (GPT-2's layers): the weight [in, out]
    add("linear_seq_m3_T5_7to4_conv1d", "linear", [(5, 7)], 3, seq=1, units=4, wt=1)
    add("linear_seq_m2_T3_37to13_conv1d", "linear", [(3, 37)], 2, seq=1, units=13, wt=1)
    add("layernorm_seq_m1_T1_7", "layernorm", [(1, 7)], 1, seq=1)
    add("layernorm_seq_m3_T5_7", "layernorm", [(5, 7)], 3, seq=1)
    add("layernorm_seq_m1_T5_3", "layernorm", [(5, 3)], 1, seq=1)
    add("layernorm_seq_m3_T1_13", "layernorm", [(1, 13)], 3, seq=1)
    add("layernorm_seq_m3_T5_64_eps1e-3", "layernorm", [(5, 64)], 3, seq=1, eps=1e-3)
    # transformers: embeddings of token ids [T] (in0 "Tx1"), attention on [T, 3C], the per-token loss
    add("embed_m1_T5_C6_V11_P8", "embed", [(5, 1)], 1, seq=1, units=6, vocab=11, positions=8)
    add("embed_m3_T7_C5_V4_nopos", "embed", [(7, 1)], 3, seq=1, units=5, vocab=4)
    add("embed_m2_T5_C4_V9_P9_off2", "embed", [(5, 1)], 2, seq=1, units=4, vocab=9, positions=9, pos_off=2)  # RoBERTa's
    add("embed_m2_T5_C8_V9_P5_types2", "embed", [(5, 1)], 2, seq=1, units=8, vocab=9, positions=5, types=2)
    add("embed_m3_T6_C8_V9_P6_pairs", "embed", [(6, 1)], 3, seq=1, units=8, vocab=9, positions=6, types=2, pairs=1)
    # the Transformer tutorial's: token rows times sqrt(C), a constant position table longer than T
    add("embed_m2_T5_C8_V9_P7_scaled_fixed", "embed", [(5, 1)], 2, seq=1, units=8, vocab=9, positions=7,
        escale=f32(math.sqrt(8)), pos_fixed=1)
    add("embed_m3_T4_C6_V5_P4_scaled", "embed", [(4, 1)], 3, seq=1, units=6, vocab=5, positions=4, escale=2.5)
    for lean in (0, 1):
        tag = "_lean" if lean else ""
        add("attention_m1_T1_H1_hs4_causal" + tag, "attention", [(1, 12)], 1, seq=1, units=1, lean=lean)
        add("attention_m3_T5_H2_hs3_causal" + tag, "attention", [(5, 18)], 3, seq=1, units=2, lean=lean)
        add("attention_m2_T6_H3_hs4_bidir" + tag, "attention", [(6, 36)], 2, seq=1, units=3, causal=0, lean=lean)
        add("attention_m2_T70_H2_hs8_causal" + tag, "attention", [(70, 48)], 2, seq=1, units=2, lean=lean)
        add("attention_m1_T67_H4_hs16_bidir" + tag, "attention", [(67, 192)], 1, seq=1, units=4, causal=0,
            lean=lean)
        # a key-padding mask: each sequence's real length, the padding's keys ignored
        add("attention_m3_T6_H2_hs3_bidir_pad_6_3_1" + tag, "attention", [(6, 18)], 3, seq=1, units=2, causal=0,
            lean=lean, lens=[6, 3, 1])
        add("attention_m2_T70_H2_hs8_bidir_pad_70_37" + tag, "attention", [(70, 48)], 2, seq=1, units=2,
            causal=0, lean=lean, lens=[70, 37])
        add("attention_m2_T5_H1_hs4_causal_pad_0_3" + tag, "attention", [(5, 12)], 2, seq=1, units=1, lean=lean,
            lens=[0, 3])
        # dropout on the weights (nn.MultiheadAttention's dropout): batchfit's mask, written out in Python
        add("attention_m3_T5_H2_hs3_causal_drop0.3" + tag, "attention", [(5, 18)], 3, seq=1, units=2, lean=lean,
            p=0.3)
        add("attention_m2_T70_H2_hs8_bidir_drop0.1_pad_70_37" + tag, "attention", [(70, 48)], 2, seq=1, units=2,
            causal=0, lean=lean, lens=[70, 37], p=0.1)
    # the mean of a sequence's tokens (gap on tokens), its padding left out
    add("gap_seq_m3_T6_5_pad_6_3_1", "gap", [(6, 5)], 3, seq=1, lens=[6, 3, 1])
    add("gap_seq_m2_T4_7", "gap", [(4, 7)], 2, seq=1)
    add("select_last_m3_T6_5_pad_6_3_1", "select", [(6, 5)], 3, seq=1, units=-1, lens=[6, 3, 1])
    add("select_last_m2_T4_7", "select", [(4, 7)], 2, seq=1, units=-1)
    add("select_seq_m2_T5_3_token2", "select", [(5, 3)], 2, seq=1, units=2)
    add("xent_seq_m3_T5_V7_padding_scale0.1", "xent", [(5, 7)], 3, seq=1, loss_scale=0.1)
    add("xent_seq_m1_T4_V300_padding_scale1", "xent", [(4, 300)], 1, seq=1, loss_scale=1.0)
    # layer norms with a scale alone (nanoGPT's LayerNorm(bias=False)): of an image, of each token
    add("layernorm_nobias_m3_2x4x5", "layernorm", [(2, 4, 5)], 3, bias=0)
    add("layernorm_nobias_seq_m2_T5_7", "layernorm", [(5, 7)], 2, seq=1, bias=0)
    # GELU's tanh approximation (nn.GELU(approximate='tanh'), GPT-2's and minGPT's): x_scale 3 crosses the
    # bend where it and the exact form differ most
    add("gelu_tanh_m1_3x5x7", "gelu", [(3, 5, 7)], 1, x_scale=3.0, tanh=1)
    add("gelu_tanh_m7_37", "gelu", [(37,)], 7, x_scale=3.0, tanh=1)
    # LLaMA's RMSNorm (eps 1e-6, as its code; 1e-5 as Llama 2's) and SwiGLU's product of two branches
    add("rmsnorm_seq_m3_T5_7", "rmsnorm", [(5, 7)], 3, seq=1, eps=1e-6)
    add("rmsnorm_seq_m1_T4_64_eps1e-5", "rmsnorm", [(4, 64)], 1, seq=1, eps=1e-5)
    add("rmsnorm_m7_37", "rmsnorm", [(37,)], 7, eps=1e-6)
    add("rmsnorm_m2_3x4x5", "rmsnorm", [(3, 4, 5)], 2, eps=1e-6)
    # Gemma's RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), w about 0
    add("rmsnorm_seq_m3_T5_7_offset", "rmsnorm", [(5, 7)], 3, seq=1, eps=1e-6, offset=1)
    add("mul_seq_m3_T5_7", "mul", [(5, 7), (5, 7)], 3, seq=1)
    add("mul_m2_3x4x5", "mul", [(3, 4, 5), (3, 4, 5)], 2)
    add("mul_m7_37", "mul", [(37,), (37,)], 7)
    # rotary embeddings (LLaMA's q and k): heads of 4 and of 8 columns, LLaMA 1's base and LLaMA 3's
    add("rope_seq_m3_T5_C12_d4", "rope", [(5, 12)], 3, seq=1, units=4, theta=10000.0)
    add("rope_seq_m2_T9_C16_d8_base5e5", "rope", [(9, 16)], 2, seq=1, units=8, theta=500000.0)
    # grouped-query attention's repeated keys and values: 2 heads of 4 repeated 3 times, 1 head of 8 twice
    add("repeat_seq_m3_T5_C8_d4_r3", "repeat", [(5, 8)], 3, seq=1, units=4, groups=3)
    add("repeat_seq_m2_T7_C8_d8_r2", "repeat", [(7, 8)], 2, seq=1, units=8, groups=2)
    return L


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: layer_oracle.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for f in os.listdir(outdir):  # stale cases from an older list must not linger
        if f.startswith("case_") and f.endswith(".safetensors"):
            os.remove(os.path.join(outdir, f))
    torch.set_num_threads(1)
    L = cases()
    for i, (label, kind, shapes, m, training, cfg) in enumerate(L):
        run_case(Case(i, label, kind, shapes, m, training, **cfg), outdir)
    print("layer_oracle.py: %d cases in %s (torch %s)" % (len(L), outdir, torch.__version__))


if __name__ == "__main__":
    main()
