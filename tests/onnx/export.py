#!/usr/bin/env python3
"""export.py OUTDIR NAME...: torchvision's models exported to ONNX with
Debian's PyTorch (opset 17, training mode, a dynamic batch) and, for each,
what PyTorch computes on them: the oracle of tests/test_onnx_torch.c.

For each NAME (the CNNs resnet18, mobilenet_v2, mobilenet_v3_small,
efficientnet_b0 (stochastic depth off), densenet121, googlenet (no auxiliary heads), regnet_y_400mf,
squeezenet1_1 and mnasnet0_5 at 64x64, and inception_v3 (no auxiliary head) at 128x128; the
transformers vit_b_16 and vit_small and act_cnn, a small CNN with SiLU, Sigmoid
and Tanh, param_act_cnn, a small CNN with LeakyReLU, ELU, Softplus (beta 1
and 2), SELU and CELU(0.5), prelu_cnn, a small CNN with nn.PReLU(C) and nn.PReLU() (on images, and
per feature between Linear layers), and pad_cnn, a small CNN whose zero padding is nn.ZeroPad2d, F.pad
and an AvgPool2d's (each a Pad in the file), at 32x32, build() says which; 10
classes; pad_cnn_op9 is pad_cnn exported at opset 9, where Pad's pads are an
attribute; ceil_cnn, max pools with ceil_mode=True, at 48x48; convnext_mini, torchvision's ConvNeXt
with two stages of width 16 and 32 at 32x32: its blocks' permutes to channels-last and back, layer norms
over channels, Linear layers on [N,H,W,C] and layer scales; shufflenet_v2_x0_5 at 64x64: channel chunks
and shuffles; layerscale_mini at 32x32: learned scales [C] on channels-last tokens (the original ConvNeXt's
gamma), on a ViT block's tokens (timm's LayerScale) and on a vector; mhsa_mini, hand-written self-attention
(timm's, minGPT's, PyTorch 2's export) at 32x32; gn_cnn, GroupNorm and InstanceNorm2d at 32x32; and the
token model gpt_mini, a nanoGPT of 2 blocks (vocabulary 64, context 16, width 32, 4 heads; token and
position embeddings, causal attention by a registered tril buffer and masked_fill, LayerNorm, the exact GELU
and minGPT's NewGELU,
lm_head tied to the token table), and tgpt_mini, a GPT of nn.TransformerEncoderLayer blocks (pre-norm with a
float causal mask, post-norm with a boolean one) and a learned position tensor, and gpt_nobias, gpt_mini with
nanoGPT's bias=False: no bias in its Linear layers and LayerNorms, and llama_mini, LLaMA's RMSNorm and SwiGLU
feed-forward around nanoGPT's causal attention, without position embeddings; tut_mini, the PyTorch Transformer
tutorial's language model batch first (embeddings times sqrt(C), a sinusoidal position buffer, post-norm
nn.TransformerEncoder layers under a causal mask), tut_halves, the same with the sinusoids in halves and no
scale, and tut_learned, minGPT's learned position parameter cut to the sequence) it writes NAME.onnx and
NAME_ref.safetensors holding:
  x [4,3,64,64] F32, y [4] I32      the samples and labels (a token model: x [4,16] I32 token ids, exported
                                    as int64, y [4,16] I32 next-token labels, every 7th -1: padding)
  loss64, loss32                    the mean cross-entropy (F64 scalars; a token model's over its real labels)
  g64.P (F64), g32.P (F32)          the gradient of every parameter P (state_dict
                                    names), in float64 and in float32
  after64.P (F32)                   P after one SGD step (lr 0.1, momentum 0.9), computed
                                    in float64
  run64.B.running_mean/var (F64),   batch norms' running statistics after the step's
  run32.B.running_mean/var (F32)    forward, in float64 and in float32 (and a sinusoidal buffer
                                    P.pe, which the step leaves as it was)
with BatchNorm in training mode and dropout off (p = 0; the file keeps the
model's ratio). Batch-norm weights, biases and running statistics are
drawn away from torchvision's 1/0/0/1 so that they matter, and the biases
then shifted so that no activation sits on a kink of ReLU or ReLU6
(away_from_kinks says why; not for a token model, whose GELU is smooth).
A tied parameter is written once, by the name named_parameters() gives it
(gpt_mini's 'wte.weight', the file's initializer). resnet18 and vit_small also
write NAME_fixed.onnx (exported without dynamic_axes, batch 2). NAME
resnet50_224 is resnet50.onnx at 224x224 with 1000 classes (the preset's
twin, for the plan), without an oracle, and so is gpt_long, a GPT of
GPT-2's 1024 tokens and 12 blocks (width 16), each with its mask buffer. vit_b_16 (86M parameters) writes
x, y, loss64 and loss32 only: the gradients of its structure are checked on
vit_small.

The exports are cached: OUTDIR/NAME.stamp holds a hash of this script and
the torch version, and a second run with the same stamp does nothing (before
torch is even loaded). Exit
77 (skipped) without torch or torchvision."""
import hashlib, json, math, os, struct, sys

OUT = sys.argv[1] if __name__ == "__main__" else None


def torch_version():
    """torch's version as its package says it, without importing torch (1.5 s of each run's time)"""
    try:
        from importlib.metadata import version
        return version("torch")
    except Exception:
        return None


def stamp_of(version):
    return hashlib.sha256(open(__file__, "rb").read() + version.encode()).hexdigest()


def up_to_date(name, stamp):
    sp = os.path.join(OUT, name + ".stamp")
    return os.path.exists(sp) and open(sp).read() == stamp


# every name up to date (a second build's tests given the first's directory, scripts/test.sh): done
# before torch loads
if __name__ == "__main__" and len(sys.argv) > 2 and torch_version():
    _stamp = stamp_of(torch_version())
    if all(up_to_date(n, _stamp) for n in sys.argv[2:]):
        for n in sys.argv[2:]:
            print(f"export.py: {n}: up to date in {OUT}")
        sys.exit(0)
M, SIZE, CLASSES = 4, 64, 10
TOKEN_MODELS = {"gpt_mini", "tgpt_mini", "gpt_bench", "gpt_nobias", "llama_mini", "llama_bench", "tut_mini",
                "tut_halves", "tut_learned", "tut_bench", "tut_bench0", "hfgpt2_mini", "tut_seqfirst",
                "hfgpt2_mask", "distilbert_mini", "tgpt_kpm", "tenc_kpm",
                "hfbert_mini", "hfbert_bench", "hfbert_vocab_bench", "llama_mask",
                "distilbert_cls", "hfbert_cls", "meanpool_cls", "distilbert_cls_bench", "hfbert_cls_inputs",
                "hfgpt2_pos", "llama_pos", "gpt2_cls", "meanpool_mask", "roberta_cls", "llama_cls", "llama_442", "gemma_mini", "gemma_wide", "qwen2_mini",
                "hfbert_tok"}  # input: int token ids [M, T]; one label per token (a *_cls: per sequence)
LOSS_ONLY = {"vit_b_16"}  # 86M parameters: the loss only (vit_small checks the gradients of the same structure)

try:
    import torch
    import torchvision
    from torch.onnx import TrainingMode
except ImportError as e:
    print(f"export.py: skipped: {e} (scripts/setup.sh installs python3-torchvision)")
    sys.exit(77)


def write_safetensors(path, tensors):
    """tensors: name -> torch tensor (float64, float32 or int32); F64 first so all stay aligned."""
    codes = {torch.float64: "F64", torch.float32: "F32", torch.int32: "I32"}
    items = sorted(tensors.items(), key=lambda kv: -kv[1].element_size())
    header, blobs, off = {}, [], 0
    for name, t in items:
        b = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)


def perturb_bn(model, g):
    """Batch and layer norms' affine parameters (and running statistics) away from 1/0 (and 0/1) so that they
    matter; a ViT's head, which torchvision starts at zero (every gradient below it would be zero), and its class
    token (zero too) drawn at random; PReLU's slopes away from their common 0.25, of both signs."""
    from torchvision.models.vision_transformer import VisionTransformer
    for mod in model.modules():
        if isinstance(mod, torch.nn.PReLU):
            with torch.no_grad():
                mod.weight.copy_(0.6 * torch.rand(mod.weight.shape, generator=g) - 0.2)
        if isinstance(mod, NanoLayerNorm):
            with torch.no_grad():
                mod.weight.copy_(0.5 + torch.rand(mod.weight.shape, generator=g))
        if isinstance(mod, torch.nn.LayerNorm):
            c = mod.normalized_shape[0]
            with torch.no_grad():
                mod.weight.copy_(0.5 + torch.rand(c, generator=g))
                mod.bias.copy_(0.2 * torch.randn(c, generator=g))
        if isinstance(mod, VisionTransformer):
            head = mod.heads.head
            with torch.no_grad():
                head.weight.copy_(torch.randn(head.weight.shape, generator=g) / head.in_features ** 0.5)
                head.bias.copy_(0.1 * torch.randn(head.bias.shape, generator=g))
                mod.class_token.copy_(0.5 * torch.randn(mod.class_token.shape, generator=g))
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            with torch.no_grad():
                mod.weight.copy_(0.5 + torch.rand(c, generator=g))
                mod.bias.copy_(0.2 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(c, generator=g))


KINKED = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.LeakyReLU,
          torch.nn.ELU, torch.nn.SELU, torch.nn.PReLU)  # ELU's gradient jumps at 0 unless alpha is 1, SELU's always
# (CELU's not)
TAU = 2e-5  # how far from a kink at least, relative to the activation's RMS (away_from_kinks says why)
TAU_F32 = 10  # and how many times float32's largest error at that activation input
FUNCTIONAL_RELU_AFTER = {"densenet121": ["features.norm5"]}  # batch norms followed by F.relu, not a module


def f32_errors(model, x):
    """Per module: float32's largest error at a kinked activation's input
    (or a batch norm's output, which a functional relu may take), against
    float64's, over the RMS."""
    import copy
    acts = KINKED

    def record(dtype):
        m, got, hooks = copy.deepcopy(model).to(dtype).train(), {}, []
        for n, mod in m.named_modules():
            if isinstance(mod, acts):
                hooks.append(mod.register_forward_pre_hook(
                    lambda mod, inp, n=n: got.__setitem__(n, inp[0].detach().double().clone())))
            elif isinstance(mod, torch.nn.BatchNorm2d):
                hooks.append(mod.register_forward_hook(
                    lambda mod, inp, out, n=n: got.__setitem__(n, out.detach().double().clone())))
        with torch.no_grad():
            m(x.to(dtype))
        return got
    a64, a32 = record(torch.float64), record(torch.float32)
    return {n: ((a32[n] - a64[n]).abs().max() / a64[n].pow(2).mean().sqrt()).item() for n in a64}


def away_from_kinks(model, name, x):
    """Move the test point off the kinks of ReLU, ReLU6, Hardswish and
    Hardsigmoid, where the gradient jumps: a float32 evaluation (PyTorch's or
    batchfit's) whose error takes an input across 0 (or 6, or +-3) gets a
    whole term of the gradient wrong or right. Every activation input of the
    float64 forward pass ends at least TAU x its RMS away from a kink, by
    shifting the bias of
    the batch (group, instance) norm that feeds it (the channel's values move
    together; running statistics do not depend on the bias), or of the convolution
    (a squeeze-and-excitation block's, with a bias and no batch norm). One
    forward pass, nudging as it goes; the model keeps the new biases.
    The distance is TAU of the RMS, or TAU_F32 times float32's largest
    error at that input (a float32 forward against float64's, before any
    shift), the larger: float32's error grows with depth, to 1.1e-4 of the
    RMS at MobileNetV2's last blocks (2x2 maps: 16 values per batch norm
    channel), where TAU alone let a float32 run with its sums in another
    order cross 0 (its last batch norm gave one value -6.4e-5 in nchw and
    +1.6e-6 in nChw8c, and a whole term of the gradient below came and
    went). A fixed 20 times that everywhere cannot be had: on 32x32 maps a
    channel's 4,096 values almost always hold one that near a kink."""
    import copy
    err = f32_errors(model, x)
    m = copy.deepcopy(model).double().train()
    last, hooks, g = {}, [], torch.Generator().manual_seed(7)
    names = {mod: n for n, mod in m.named_modules()}

    def fix(t, kinks, bn, where):
        rms = t.pow(2).mean().sqrt().item()
        tau = max(TAU, TAU_F32 * err.get(where, 0.0))
        for _ in range(100):
            near = torch.zeros(t.shape[1], dtype=torch.bool)
            for k in kinks:
                near |= ((t - k).abs() < tau * rms).transpose(0, 1).reshape(t.shape[1], -1).any(1)
            if not near.any():
                return t
            width = (bn.num_features if isinstance(bn, (torch.nn.BatchNorm2d, torch.nn.InstanceNorm2d)) else
                     bn.num_channels if isinstance(bn, torch.nn.GroupNorm) else
                     bn.out_features if isinstance(bn, torch.nn.Linear) else bn.out_channels if bn else 0)
            assert width == t.shape[1], "no batch norm or biased convolution to shift before a kink"
            sign = torch.where(torch.rand(t.shape[1], generator=g) < 0.5, -1.0, 1.0).double()
            d = near.double() * sign * (4 + 4 * torch.rand(t.shape[1], generator=g).double()) * tau * rms
            with torch.no_grad():
                bn.bias += d
            t = t + d.reshape(1, -1, *([1] * (t.dim() - 2)))
        raise RuntimeError("could not move the activations off their kinks")

    def bn_hook(mod, inp, out):
        last[out.shape[1]] = mod
        if names[mod] in FUNCTIONAL_RELU_AFTER.get(name, []):
            return fix(out, [0.0], mod, names[mod])
        return None

    def conv_hook(mod, inp, out):
        last[out.shape[1]] = mod

    def act_pre(mod, inp):
        kinks = ([0.0, 6.0] if isinstance(mod, torch.nn.ReLU6) else
                 [-3.0, 3.0] if isinstance(mod, (torch.nn.Hardswish, torch.nn.Hardsigmoid)) else [0.0])
        return (fix(inp[0].clone(), kinks, last.get(inp[0].shape[1]), names[mod]),)

    for mod in m.modules():
        if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.GroupNorm, torch.nn.InstanceNorm2d)):
            hooks.append(mod.register_forward_hook(bn_hook))
        elif isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)) and mod.bias is not None:
            hooks.append(mod.register_forward_hook(conv_hook))  # a Linear's: a PReLU per feature after it
        elif isinstance(mod, KINKED):
            hooks.append(mod.register_forward_pre_hook(act_pre))
    with torch.no_grad():
        m(x.double())
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for (n, p), (_, q) in zip(model.named_parameters(), m.named_parameters()):
            p.copy_(q.float())


OPSET = {"pad_cnn_op9": 9}  # the rest at 17


def export(model, path, x, dynamic, opset=17, seq_first=False):
    """Export a copy (tracing in training mode moves its batch norms' running statistics); seq_first: token ids
    [T, batch] in (x as given, [batch, T], transposed), scores [T, batch, V] out. A model with mask_input takes
    a second input, attention_mask [batch, T] (int64, all ones here), as transformers' exports do; one with
    more_inputs those after it, by name, as forward takes them: token_type_ids (zeros), position_ids (0 .. T-1)."""
    import copy
    m = copy.deepcopy(model)
    m.train()
    b = 1 if seq_first else 0
    axes = {"input": {b: "batch"}, "logits": {b: "batch"}} if dynamic else None
    x = x.t() if seq_first else x
    names = ["input"]
    if getattr(model, "mask_input", False):
        more = getattr(model, "more_inputs", ())
        x, names = (x, torch.ones_like(x), {n: implied(n, x) for n in more}), names + ["attention_mask", *more]
        if axes:
            axes.update({n: {0: "batch"} for n in names[1:]})
    torch.onnx.export(m, x, path, opset_version=opset, training=TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=names, output_names=["logits"], dynamic_axes=axes)


def padding_mask(y):
    """The attention_mask of ids whose labels y end in -1s (padding): 1 up to a sequence's last label that is not
    padding, 0 after it, as batchfit takes each sequence's length from its labels."""
    n = torch.arange(y.shape[1]).expand_as(y)
    last = torch.where(y != -1, n, torch.full_like(n, -1)).max(dim=1, keepdim=True).values  # -2: real, unscored
    return (n <= last).long()


def implied(name, ids):
    """What transformers' forward makes of token_type_ids and position_ids when not given, [batch, T]: one
    segment (zeros) and the positions 0 .. T-1 from each sequence's start (padding after the tokens)."""
    if name == "token_type_ids":
        return torch.zeros_like(ids, dtype=torch.long)
    return torch.arange(ids.shape[1]).expand(ids.shape[0], -1).contiguous()


def ids_mask(x, pad=0):
    """A classifier's ids as batchfit takes them (-1 after a sequence's last token) as transformers takes them:
    the ids (padding id pad) and the attention_mask (1 a token, 0 padding)."""
    return torch.where(x >= 0, x, pad).long(), (x >= 0).long()


def from_file(model, path):
    """The model with the file's initializers (state_dict names): the oracle starts where batchfit does. A tied
    parameter (gpt_mini's lm_head.weight, wte.weight's Parameter) is in the file once, by the other name."""
    import onnx
    from onnx import numpy_helper
    init = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(path).graph.initializer}
    state = model.state_dict(keep_vars=True)
    alias = {k: a for k, v in state.items() if k not in init for a in init if a in state and state[a] is v}
    missing = [k for k in state if k not in init and k not in alias and not k.endswith("num_batches_tracked")]
    assert not missing, f"{path}: initializers missing for {missing[:5]}"
    sd = model.state_dict()  # its _metadata too: MNASNet's loading reads its version there
    for k, v in sd.items():
        sd[k] = init.get(alias.get(k, k), v)
    model.load_state_dict(sd)


def step(model, x, y, dtype):
    """One training step of a copy of model in dtype: loss, gradients, weights after SGD, running stats."""
    import copy
    m = copy.deepcopy(model).to(dtype)
    m.train()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0  # the comparison runs without dropout
        if isinstance(mod, torch.nn.MultiheadAttention):
            mod.dropout = 0.0  # on its weights too
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    if x.dtype in (torch.int32, torch.int64) and getattr(m, "seq_classes", False):  # padding: -1 ids
        ids, mask = ids_mask(x, getattr(m, "pad_id", 0))
        loss = torch.nn.functional.cross_entropy(m(ids, mask, **{n: implied(n, ids) for n in getattr(m, "more_inputs", ())}),
                                                 y.long())
    elif x.dtype in (torch.int32, torch.int64):  # token ids stay integers; the mean over the real (not -1) labels
        if getattr(m, "mask_input", False):
            logits = m(x.long(), padding_mask(y), **{n: implied(n, x) for n in getattr(m, "more_inputs", ())})
        else:
            logits = m(x.long().t()).transpose(0, 1) if getattr(m, "seq_first", False) else m(x.long())
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1).long().clamp(min=-1), ignore_index=-1)
    else:
        loss = torch.nn.functional.cross_entropy(m(x.to(dtype)), y.long())
    opt.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    opt.step()
    return loss.detach(), grads, m.state_dict()


class FPad(torch.nn.Module):
    """F.pad(x, pads) written in forward, as a hand-written module pads."""

    def __init__(self, pads):
        super().__init__()
        self.pads = pads

    def forward(self, x):
        return torch.nn.functional.pad(x, self.pads)


class CeilCnn(torch.nn.Module):
    """Max pools with ceil_mode=True where ceil and floor differ (GoogLeNet's and SqueezeNet's): 3x3/2 48 -> 24
    (floor 23), 2x2/2 23 -> 12 (11), 3x3/2 padded by 1 12 -> 7 (6), and a 16x16/10 one (256 positions: oneDNN's
    rather than our loops) 48 -> 5 (4) beside them; an AvgPool2d with ceil_mode=True where the sizes agree."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.a = nn.Sequential(nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(8, 16, 2, bias=False),
                               nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
                               nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), nn.AvgPool2d(3, 1))
        self.b = nn.MaxPool2d(16, 10, ceil_mode=True)
        self.head = nn.Sequential(nn.AvgPool2d(3, 2, ceil_mode=True), nn.Flatten(), nn.Linear(24 * 2 * 2, CLASSES))

    def forward(self, x):
        x = self.stem(x)
        return self.head(torch.cat([self.a(x), self.b(x)], 1))


class OrigCNBlock(torch.nn.Module):
    """The original ConvNeXt's block (facebookresearch/ConvNeXt, not torchvision's): the layer scale gamma [C]
    multiplies channels-last tokens [N,H,W,C], before the permute back."""

    def __init__(self, dim):
        super().__init__()
        nn = torch.nn
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))  # away from its 1e-6: the block matters

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class LayerScaleMini(torch.nn.Module):
    """Learned per-feature scales where images, tokens and vectors meet them: an OrigCNBlock; torchvision's
    ViT encoder block with timm's LayerScale (ls1, ls2: x * gamma [C]) on its attention's and MLP's outputs,
    over the 16 tokens of a 4x4 map (ViT's reshape and permute), the attention's branch also times one learned
    number (ReZero's alpha); a vector's scale before the head."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        from torchvision.models.vision_transformer import EncoderBlock
        self.stem = nn.Conv2d(3, 16, 8, stride=8)  # 32x32 -> 4x4
        self.cn = OrigCNBlock(16)
        self.enc = EncoderBlock(num_heads=2, hidden_dim=16, mlp_dim=32, dropout=0.0, attention_dropout=0.0)
        self.ls1 = nn.Parameter(torch.empty(16).uniform_(0.5, 1.5))
        self.ls2 = nn.Parameter(torch.empty(16).uniform_(0.5, 1.5))
        self.ln = nn.LayerNorm(16)
        self.ls_head = nn.Parameter(torch.empty(16).uniform_(0.5, 1.5))
        self.rezero = nn.Parameter(torch.tensor(0.7))  # one learned number (ReZero's alpha), a 0-d parameter
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        x = self.cn(self.stem(x))
        n, c, h, w = x.shape
        x = x.reshape(n, c, h * w).permute(0, 2, 1)  # tokens [N, 16, C], as ViT's _process_input
        e = self.enc
        y = e.ln_1(x)
        a, _ = e.self_attention(y, y, y, need_weights=False)
        x = x + self.rezero * (self.ls1 * a)
        x = x + self.ls2 * e.mlp(e.ln_2(x))
        return self.head(self.ls_head * self.ln(x)[:, 0])


class TimmAttention(torch.nn.Module):
    """timm's Attention written out: one qkv Linear reshaped to [B, T, 3, H, d] and permuted; q, k, v by
    unbind (a Split and Squeezes) or by index (Gathers); the scale on q (index) or on the scores (unbind);
    attn_drop and proj_drop at timm's p = 0."""

    def __init__(self, dim, heads, unbind):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.attn_drop, self.proj_drop = torch.nn.Dropout(0.0), torch.nn.Dropout(0.0)  # timm's defaults
        self.heads, self.scale, self.unbind = heads, (dim // heads) ** -0.5, unbind

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if self.unbind:
            q, k, v = qkv.unbind(0)
            attn = (q @ k.transpose(-2, -1)) * self.scale
        else:
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q * self.scale) @ k.transpose(-2, -1)
        x = (self.attn_drop(attn.softmax(dim=-1)) @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj_drop(self.proj(x))


class GptAttention(torch.nn.Module):
    """minGPT's self-attention without its causal mask: c_attn split into q, k, v along the features, each
    viewed as heads and transposed; the scores divided by sqrt(d)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.c_attn, self.c_proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Sdpa2Attention(TimmAttention):
    """timm's form scaled as PyTorch 2 exports F.scaled_dot_product_attention: q and k^T each times
    sqrt(1/sqrt(d)) before their MatMul (there a Sqrt of the scale computed from the shape; here constants)."""

    def __init__(self, dim, heads):
        super().__init__(dim, heads, True)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        r = self.scale ** 0.5
        attn = (q * r) @ (k.transpose(-2, -1) * r)
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MhsaMini(torch.nn.Module):
    """Hand-written self-attention in four pre-norm blocks over the 16 tokens of a 4x4 map of width 32:
    timm's (unbind, then by index), minGPT's and PyTorch 2's scaled_dot_product_attention's export, 4, 2, 8
    and 4 heads; a GELU MLP after the last; the head reads the tokens' mean."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 32, 8, stride=8)
        self.attn = nn.ModuleList([TimmAttention(32, 4, True), TimmAttention(32, 2, False), GptAttention(32, 8),
                                   Sdpa2Attention(32, 4)])
        self.norms = nn.ModuleList([nn.LayerNorm(32) for _ in range(4)])
        self.mlp = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        x = self.stem(x)
        n, c, h, w = x.shape
        x = x.reshape(n, c, h * w).permute(0, 2, 1)
        for a, ln in zip(self.attn, self.norms):
            x = x + a(ln(x))
        x = x + self.mlp(x)
        return self.head(x.mean(dim=1))  # the tokens' average (timm's global_pool="avg")


class GnCnn(torch.nn.Module):
    """Group and instance normalisation as users put them in a CNN: GroupNorm(4, 16) after the stem, a
    residual block with GroupNorm(8, 16) and GroupNorm(16, 16) (instance norm as groups of one),
    InstanceNorm2d(16, affine=True); their weights and biases drawn away from 1 and 0 so that they matter.
    (GroupNorm of a vector [N, C] does not export from PyTorch 1.13: its symbolic unsqueezes the weight along
    no axes.)"""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.GroupNorm(4, 16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.GroupNorm(8, 16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.GroupNorm(16, 16))
        self.inorm = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.InstanceNorm2d(16, affine=True),
                                   nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))
        self.act = nn.ReLU()
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.stem(x)
        x = self.act(x + self.block(x))
        return self.head(self.inorm(x))


class CausalSelfAttention(torch.nn.Module):
    """nanoGPT's causal self-attention without flash attention: the mask a registered tril buffer [1,1,T,T]
    cut to the sequence and applied by masked_fill(-inf); q, k, v by nanoGPT's split along the features
    (split) or by timm's reshape, permute and unbind; dropouts at p = 0."""

    def __init__(self, C, H, T, split=True, bias=True):
        super().__init__()
        nn = torch.nn
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C, bias=bias), nn.Linear(C, C, bias=bias)
        self.attn_dropout, self.resid_dropout = nn.Dropout(0.0), nn.Dropout(0.0)
        self.n_head, self.n_embd, self.split = H, C, split
        self.fill = float("-inf")  # what the mask puts in (token_models.py's gpt_fill0 puts 0, which is refused)
        self.tril_in_forward = False  # the mask made in forward, torch.tril(torch.ones(T, T)) (gpt_trilu)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        import math
        B, T, C = x.size()
        if self.split:
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        else:
            qkv = self.c_attn(x).reshape(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T) if self.tril_in_forward else \
            self.bias[:, :, :T, :T]
        att = att.masked_fill(mask == 0, self.fill)
        att = torch.nn.functional.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class NewGELU(torch.nn.Module):
    """minGPT's (and Hugging Face's gelu_new): GELU's tanh approximation written out, torch.pow and all."""

    def forward(self, x):
        import math
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class NanoLayerNorm(torch.nn.Module):
    """nanoGPT's LayerNorm with bias=False: a scale alone, F.layer_norm(x, shape, weight, None)."""

    def __init__(self, ndim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(ndim))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


def layer_norm(C, bias):
    return torch.nn.LayerNorm(C) if bias else NanoLayerNorm(C)


class GptBlock(torch.nn.Module):
    """nanoGPT's pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x)) (Linear, GELU, Linear): nanoGPT's
    exact GELU in the split-form blocks, minGPT's NewGELU (the tanh approximation) in the others."""

    def __init__(self, C, H, T, split, bias=True):
        super().__init__()
        nn = torch.nn
        self.ln_1, self.attn = layer_norm(C, bias), CausalSelfAttention(C, H, T, split, bias)
        self.ln_2 = layer_norm(C, bias)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C, bias=bias), nn.GELU() if split else NewGELU(),
                                 nn.Linear(4 * C, C, bias=bias), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(torch.nn.Module):
    """nanoGPT in small: token table wte [V, C] plus position table wpe [T, C] (positions by torch.arange),
    L blocks (the even ones' attention in nanoGPT's split form, the odd ones' in timm's unbind form), a final
    LayerNorm and lm_head tied to wte (one Parameter: state_dict has both names, named_parameters() one).
    bias=False: nanoGPT's option, no bias in its Linear layers and LayerNorms (a scale alone)."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, bias=True):
        super().__init__()
        nn = torch.nn
        self.wte, self.wpe, self.drop = nn.Embedding(V, C), nn.Embedding(T, C), nn.Dropout(0.0)
        self.h = nn.ModuleList([GptBlock(C, H, T, i % 2 == 0, bias) for i in range(L)])
        self.ln_f, self.lm_head = layer_norm(C, bias), nn.Linear(C, V, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(torch.nn.Module):
    """LLaMA's RMSNorm as its reference code writes it (torch 1.13 has no nn.RMSNorm): the norm in float,
    cast back with type_as, times the weight, which starts in [0.5, 1.5) here so that it matters."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class FeedForward(torch.nn.Module):
    """LLaMA's SwiGLU feed-forward: w2(silu(w1(x)) * w3(x)), no biases."""

    def __init__(self, C, hidden):
        super().__init__()
        nn = torch.nn
        self.w1, self.w2, self.w3 = nn.Linear(C, hidden, bias=False), nn.Linear(hidden, C, bias=False), \
            nn.Linear(C, hidden, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class Rotary(torch.nn.Module):
    """Rotary embeddings' tables as Hugging Face's LlamaRotaryEmbedding makes them: cos and sin of
    t * inv_freq for t < T, the frequencies twice over (torch.cat((freqs, freqs))), cached as buffers
    [T, d], cut to the sequence (lit-gpt's build_rope_cache keeps them so)."""

    def __init__(self, d, T, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.einsum("i,j->ij", torch.arange(T).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, T):
        return self.cos_cached[:T], self.sin_cached[:T]


class HFRotary(torch.nn.Module):
    """Hugging Face's LlamaRotaryEmbedding since transformers 4.38: the tables made in forward from inv_freq
    and the positions (inv_freq[None, :, None] @ position_ids[:, None, :], then cos and sin), [1, T, d]."""

    def __init__(self, d, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, d, 2).float() / d)), persistent=False)

    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def repeat_kv(x, n_rep):
    """Hugging Face's: grouped-query attention's key and value heads [B, Hkv, T, d], each repeated n_rep times."""
    b, hkv, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, hkv, n_rep, t, d).reshape(b, hkv * n_rep, t, d)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """Hugging Face's q cos + rotate_half(q) sin, the tables [T, d] broadcast over the batch and heads.
    (Hugging Face's own squeezes and gathers the tables by position ids: torch 1.13 exports the squeezes
    as If nodes, which batchfit does not read.)"""
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class LlamaAttention(torch.nn.Module):
    """LLaMA's Attention as Hugging Face's LlamaAttention writes it, without the cache: q, k and v from
    separate projections wq, wk, wv (no biases), each .view(B, T, H, d).transpose(1, 2), q and k turned by
    rotary embeddings (rope: Rotary, apply_rotary_pos_emb), the scores divided by sqrt(d), the additive
    causal mask the model makes in forward, the softmax in float and cast back (type_as), wo."""

    def __init__(self, C, H, T=None, rope=False, kv_heads=None, head_dim=None, qkv_bias=False):
        super().__init__()
        nn = torch.nn
        d, b = head_dim or C // H, qkv_bias  # Gemma 7B's: 16 heads of 256 on a width of 3072; Qwen2's biases
        self.n_heads, self.head_dim, self.n_kv = H, d, kv_heads or H
        self.wq, self.wk = nn.Linear(C, H * d, bias=b), nn.Linear(C, self.n_kv * d, bias=b)
        self.wv, self.wo = nn.Linear(C, self.n_kv * d, bias=b), nn.Linear(H * d, C, bias=False)
        self.rotary = (HFRotary(d) if rope == "hf" else Rotary(d, T)) if rope else None

    def forward(self, x, mask, position_ids=None):
        import math
        B, T, _ = x.shape
        xq = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        keys = self.wk(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        values = self.wv(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        if isinstance(self.rotary, HFRotary):  # the tables [1, T, d] unsqueezed over the heads, as HF does
            pos = torch.arange(T, device=x.device).unsqueeze(0) if position_ids is None else position_ids
            cos, sin = self.rotary(x, pos)
            xq, keys = apply_rotary_pos_emb(xq, keys, cos.unsqueeze(1), sin.unsqueeze(1))
        elif self.rotary is not None:
            cos, sin = self.rotary(T)
            xq, keys = apply_rotary_pos_emb(xq, keys, cos, sin)
        keys, values = repeat_kv(keys, self.n_heads // self.n_kv), repeat_kv(values, self.n_heads // self.n_kv)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = torch.nn.functional.softmax((scores + mask).float(), dim=-1).type_as(xq)
        out = torch.matmul(scores, values).transpose(1, 2).contiguous().view(B, T, -1)
        return self.wo(out)


class Llama(torch.nn.Module):
    """A LLaMA-style language model: a token table, blocks of x + attention(RMSNorm(x)) and x +
    SwiGLU(RMSNorm(x)), a final RMSNorm and an untied output head. The even blocks' attention is nanoGPT's
    (one projection c_attn, no biases, no position information but its mask), the odd ones' LLaMA's own
    (wq, wk, wv, rotary embeddings with rope, kv_heads key and value heads (grouped-query attention,
    Hugging Face's repeat_kv) when given, biases on q, k and v with qkv_bias (Qwen2's), the mask made in
    forward as LLaMA's Transformer makes it: torch.full of -inf, torch.triu)."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, hidden=48, rope=True, kv_heads=None, qkv_bias=False):
        super().__init__()
        nn = torch.nn
        self.wte = nn.Embedding(V, C)
        self.norms = nn.ModuleList([RMSNorm(C) for _ in range(2 * L)])
        self.attn = nn.ModuleList([CausalSelfAttention(C, H, T, True, bias=False) if i % 2 == 0 else
                                   LlamaAttention(C, H, T, rope, kv_heads, qkv_bias=qkv_bias) for i in range(L)])
        self.ffn = nn.ModuleList([FeedForward(C, hidden) for _ in range(L)])
        self.norm, self.output = RMSNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf"), device=idx.device), diagonal=1)
        return self.blocks(self.wte(idx), mask)

    def blocks(self, x, mask, position_ids=None):
        """The blocks (LLaMA's attention given mask and the positions), the final norm, the head."""
        for i, (a, f) in enumerate(zip(self.attn, self.ffn)):
            h = self.norms[2 * i](x)
            x = x + (a(h, mask, position_ids) if isinstance(a, LlamaAttention) else a(h))
            x = x + f(self.norms[2 * i + 1](x))
        return self.output(self.norm(x))


class HFLlamaMask(Llama):
    """export.py's Llama with its mask made as transformers (4.36, 4.37) makes LLaMA's 4-d mask: the causal one
    by _make_causal_mask (torch.full of the lowest number, masked_fill_ where arange < arange + 1 viewed [T, 1],
    [None, None] expanded over the batch), and with an attention_mask (1 a token, 0 padding) that mask
    masked_fill'ed where _expand_mask's is not 0 (AttentionMaskConverter.to_4d). mask_input: forward takes
    attention_mask."""

    def __init__(self, *a, mask_input=True, **kw):
        super().__init__(*a, **kw)
        self.mask_input = mask_input

    def forward(self, idx, attention_mask=None, position_ids=None):
        bsz, T = idx.shape
        dtype = self.wte.weight.dtype
        causal = torch.full((T, T), torch.finfo(dtype).min, device=idx.device, dtype=dtype)
        cond = torch.arange(causal.size(-1), device=idx.device)
        causal.masked_fill_(cond < (cond + 1).view(causal.size(-1), 1), 0)
        causal = causal.to(dtype)[None, None, :, :].expand(bsz, 1, T, T)
        mask = causal if attention_mask is None else \
            causal.masked_fill(expand_mask(attention_mask, dtype).bool(), torch.finfo(dtype).min)
        return self.blocks(self.wte(idx), mask, position_ids)


class HFLlamaMask442(Llama):
    """export.py's Llama with its mask made as transformers 4.42 to 4.44 make LLaMA's (LlamaModel.
    _update_causal_mask, eager attention, no cache): torch.full((T, target), lowest), torch.triu(.., 1), times
    arange(target) > cache_position.reshape(-1, 1), [None, None].expand(B, 1, -1, -1), cut to the keys where
    the attention reads it; target is T + 1 without an attention_mask. mask_input: forward takes
    attention_mask, and the padding is written into a clone by a slice assignment (a ScatterND in the
    export), as transformers does (refused: export from the ids alone)."""

    def __init__(self, *a, mask_input=False, **kw):
        super().__init__(*a, **kw)
        self.mask_input = mask_input

    def forward(self, idx, attention_mask=None):
        x = self.wte(idx)
        T, lowest = idx.shape[1], torch.finfo(x.dtype).min
        cache_position = torch.arange(0, T, device=idx.device)
        target = attention_mask.shape[-1] if attention_mask is not None else T + 1
        causal = torch.triu(torch.full((T, target), lowest, dtype=x.dtype, device=idx.device), diagonal=1)
        causal *= torch.arange(target, device=idx.device) > cache_position.reshape(-1, 1)
        causal = causal[None, None, :, :].expand(x.shape[0], 1, -1, -1)
        if attention_mask is not None:
            causal = causal.clone()
            n = attention_mask.shape[-1]
            padding = (causal[:, :, :, :n] + attention_mask[:, None, None, :]) == 0
            causal[:, :, :, :n] = causal[:, :, :, :n].masked_fill(padding, lowest)
        return self.blocks(x, causal[:, :, :, :x.shape[1]])


class GemmaRMSNorm(torch.nn.Module):
    """transformers' GemmaRMSNorm: the norm in float, times (1.0 + weight.float()), the weight starting at 0."""

    def __init__(self, C, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.zeros(C))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class GemmaMLP(torch.nn.Module):
    """transformers' GemmaMLP: down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)), no biases (GeGLU)."""

    def __init__(self, C, hidden):
        super().__init__()
        nn = torch.nn
        self.gate_proj, self.up_proj = nn.Linear(C, hidden, bias=False), nn.Linear(C, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, C, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class HFGemma(torch.nn.Module):
    """transformers' GemmaForCausalLM in small, after its code (not installed on Debian): the token table
    scaled by sqrt(C) (normalizer, a tensor of the embeddings' dtype), blocks of x + attention(RMSNorm(x)) and
    x + GeGLU(RMSNorm(x)), every norm GemmaRMSNorm (1 + weight), LLaMA's attention (export.py's LlamaAttention
    with transformers 4.38's rotary tables, multi-query: one key and value head as Gemma 2B; head_dim: heads
    of that many columns, H of them wider than C as Gemma 7B's), the causal mask as transformers 4.42 makes it
    from the ids alone, a final norm and the head tied to the table."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, hidden=64, kv_heads=1, head_dim=None):
        super().__init__()
        nn = torch.nn
        self.embed_tokens = nn.Embedding(V, C)
        self.attn = nn.ModuleList([LlamaAttention(C, H, T, "hf", kv_heads, head_dim) for _ in range(L)])
        self.mlp = nn.ModuleList([GemmaMLP(C, hidden) for _ in range(L)])
        self.norms = nn.ModuleList([GemmaRMSNorm(C) for _ in range(2 * L)])
        self.norm = GemmaRMSNorm(C)
        for n in list(self.norms) + [self.norm]:  # away from 0, as a trained model's are
            n.weight.data.uniform_(-0.5, 0.5)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.embed_tokens.weight

    def forward(self, idx):
        x = self.embed_tokens(idx)
        x = x * torch.tensor(x.shape[-1] ** 0.5, dtype=x.dtype)
        T, lowest = idx.shape[1], torch.finfo(x.dtype).min
        causal = torch.triu(torch.full((T, T + 1), lowest, dtype=x.dtype, device=idx.device), diagonal=1)
        causal *= torch.arange(T + 1, device=idx.device) > torch.arange(0, T, device=idx.device).reshape(-1, 1)
        mask = causal[None, None, :, :].expand(x.shape[0], 1, -1, -1)[:, :, :, :T]
        for i, (a, f) in enumerate(zip(self.attn, self.mlp)):
            x = x + a(self.norms[2 * i](x), mask)
            x = x + f(self.norms[2 * i + 1](x))
        return self.lm_head(self.norm(x))


def last_before_pad(logits, input_ids, pad_id):
    """transformers' pick (GPT2ForSequenceClassification's, LLaMA's, up to 4.44) of each sequence's scores at
    its last token before its first pad token: torch.eq(input_ids, pad).int().argmax(-1) - 1 modulo T."""
    sequence_lengths = torch.eq(input_ids, pad_id).int().argmax(-1) - 1
    sequence_lengths = sequence_lengths % input_ids.shape[-1]
    return logits[torch.arange(input_ids.shape[0], device=logits.device), sequence_lengths]


class LlamaClsHead:
    """LlamaForSequenceClassification's head on a LLaMA body class (the mixin first): the body's final norm,
    `score` (a Linear without a bias) on every token, last_before_pad. pad_id: the vocabulary's last token."""

    seq_classes = True

    def __init__(self, classes=CLASSES, **kw):
        super().__init__(**kw)
        self.output = torch.nn.Identity()
        self.score = torch.nn.Linear(self.wte.embedding_dim, classes, bias=False)
        self.pad_id = self.wte.num_embeddings - 1

    def forward(self, input_ids, attention_mask=None, **kw):
        return last_before_pad(self.score(super().forward(input_ids, attention_mask, **kw)), input_ids, self.pad_id)


class HFLlamaCls(LlamaClsHead, HFLlamaMask):
    """transformers' LlamaForSequenceClassification in small (Mistral's and Qwen2's classifiers pick alike) as
    4.36 and 4.37 write it: HFLlamaMask's body, LlamaClsHead."""


class HFLlamaCls442(LlamaClsHead, HFLlamaMask442):
    """The same as transformers 4.42 to 4.44 write it: HFLlamaMask442's body (its attention_mask, when given,
    written into the causal mask by a slice assignment), LlamaClsHead."""


class TGpt(torch.nn.Module):
    """A GPT of PyTorch's own layers: a token table wte, a learned position tensor [1, T, C] added, a pre-norm
    nn.TransformerEncoderLayer (GELU) with a float causal mask (nn.Transformer.generate_square_subsequent_mask)
    and a post-norm one with a boolean mask (True above the diagonal: not attended), a LayerNorm and an untied
    head with a bias. The masks are buffers. mask_input: forward takes attention_mask (1 a token, 0 padding) and
    gives both encoders src_key_padding_mask=(attention_mask == 0); causal=False: no causal masks (bidirectional)."""

    def __init__(self, V=64, T=16, C=32, H=4, mask_input=False, causal=True):
        super().__init__()
        self.mask_input, self.causal = mask_input, causal
        nn = torch.nn
        self.wte, self.pos = nn.Embedding(V, C), nn.Parameter(0.5 * torch.randn(1, T, C))
        self.pre = nn.TransformerEncoder(nn.TransformerEncoderLayer(C, H, 2 * C, dropout=0.0, activation="gelu",
                                                                    batch_first=True, norm_first=True), 1)
        self.post = nn.TransformerEncoder(nn.TransformerEncoderLayer(C, H, 2 * C, dropout=0.0, batch_first=True), 1,
                                          enable_nested_tensor=False)
        self.ln, self.head = nn.LayerNorm(C), nn.Linear(C, V)
        if causal:
            self.register_buffer("fmask", nn.Transformer.generate_square_subsequent_mask(T))
            self.register_buffer("bmask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, idx, attention_mask=None):
        kpm = None if attention_mask is None else attention_mask == 0
        fmask, bmask = (self.fmask, self.bmask) if self.causal else (None, None)  # noqa (buffers if causal)
        x = self.pre(self.wte(idx) + self.pos, mask=fmask, src_key_padding_mask=kpm)
        return self.head(self.ln(self.post(x, mask=bmask, src_key_padding_mask=kpm)))


class TutorialSeqFirst(torch.nn.Module):
    """The PyTorch Transformer tutorial's model as published: batch_first=False, src [T, batch], pe a buffer
    [max_len, 1, C] sliced pe[:x.size(0)], embeddings times sqrt(C), nn.TransformerEncoder (post-norm, dropout
    0.2 everywhere) under generate_square_subsequent_mask, a Linear to the vocabulary; scores [T, batch, V].
    seq_first tells export() and step() the layout."""
    seq_first = True

    def __init__(self, V=64, T=16, C=32, H=4, L=2, dropout=0.2):
        super().__init__()
        import math
        nn = torch.nn
        pos = torch.arange(4 * T).unsqueeze(1)
        div = torch.exp(torch.arange(0, C, 2) * (-math.log(10000.0) / C))
        pe = torch.zeros(4 * T, 1, C)
        pe[:, 0, 0::2], pe[:, 0, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.embedding, self.C, self.drop = nn.Embedding(V, C), C, nn.Dropout(dropout)
        self.transformer_encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(C, H, 2 * C, dropout), L,
                                                         enable_nested_tensor=False)
        self.linear = nn.Linear(C, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, src):
        import math
        x = self.drop(self.embedding(src) * math.sqrt(self.C) + self.pe[:src.size(0)])
        return self.linear(self.transformer_encoder(x, self.mask))


class PositionalEncoding(torch.nn.Module):
    """The PyTorch Transformer tutorial's sinusoidal positions (batch first): a buffer pe [1, max_len, C] of
    sin at the even columns and cos at the odd ones (halves: sin in the first C/2 columns, cos in the others,
    as tensor2tensor and fairseq lay them out; then a buffer [max_len, C]), x + pe[:, :T], then dropout."""

    def __init__(self, C, max_len=64, halves=False, p=0.2):  # the tutorial's dropout
        super().__init__()
        import math
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, C, 2) * (-math.log(10000.0) / C))
        pe = torch.zeros(max_len, C)
        if halves:
            pe[:, :C // 2], pe[:, C // 2:] = torch.sin(pos * div), torch.cos(pos * div)
        else:
            pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.halves = halves
        self.register_buffer("pe", pe if halves else pe.unsqueeze(0))
        self.dropout = torch.nn.Dropout(p)

    def forward(self, x):
        return self.dropout(x + (self.pe[:x.size(1)] if self.halves else self.pe[:, :x.size(1)]))


class TutorialLM(torch.nn.Module):
    """The PyTorch Transformer tutorial's language model, batch first and causal: nn.Embedding scaled by
    sqrt(C), PositionalEncoding's sinusoids, nn.TransformerEncoder (post-norm layers; dropout: the tutorial's
    0.2, on the attention weights too) under a float causal mask, a Linear to the vocabulary. pos="learned":
    minGPT's position parameter pos_emb [1, max_len, C] cut to the sequence (x + pos_emb[:, :T]) instead."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, pos="sin", scale=True, dropout=0.0):
        super().__init__()
        nn = torch.nn
        self.embedding, self.C, self.scale = nn.Embedding(V, C), C, scale
        if pos == "learned":
            self.pos_emb = nn.Parameter(0.5 * torch.randn(1, 2 * T, C))
        else:
            self.pos_encoder = PositionalEncoding(C, 4 * T, halves=pos == "halves")
        layer = nn.TransformerEncoderLayer(C, H, 2 * C, dropout=dropout, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.linear = nn.Linear(C, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, src):
        import math
        x = self.embedding(src)
        if self.scale:
            x = x * math.sqrt(self.C)
        x = x + self.pos_emb[:, :src.size(1)] if hasattr(self, "pos_emb") else self.pos_encoder(x)
        return self.linear(self.transformer_encoder(x, self.mask))


class Conv1D(torch.nn.Module):
    """transformers' Conv1D (GPT-2's linear layers): a weight [in, out] (Linear's transposed) and a bias, the
    tokens flattened into rows for torch.addmm and viewed back."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(0.02 * torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(0.02 * torch.randn(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class HFGPT2Attention(torch.nn.Module):
    """GPT-2's attention as transformers writes it (GPT2Attention, eager, no cache): c_attn a Conv1D to 3C split
    into q, k, v, heads by view and permute, the scores divided by torch.full([], sqrt(d)), the causal mask a bool
    tril buffer [1, 1, P, P] cut to [key_length - query_length : key_length, :key_length] and applied by
    torch.where with float32's lowest number, softmax, .type(value.dtype), attn_dropout, the heads merged back
    by permute and view, c_proj and resid_dropout."""

    def __init__(self, C, H, P, p=0.0):
        super().__init__()
        self.H, self.d = H, C // H
        self.register_buffer("bias", torch.tril(torch.ones((P, P), dtype=torch.bool)).view(1, 1, P, P),
                             persistent=False)
        self.c_attn, self.c_proj = Conv1D(3 * C, C), Conv1D(C, C)
        self.attn_dropout, self.resid_dropout = torch.nn.Dropout(p), torch.nn.Dropout(p)

    def _split_heads(self, t):
        return t.view(t.size()[:-1] + (self.H, self.d)).permute(0, 2, 1, 3)

    def _merge_heads(self, t):
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (self.H * self.d,))

    def forward(self, x, attention_mask=None):
        q, k, v = self.c_attn(x).split(self.H * self.d, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        ql, kl = q.size(-2), k.size(-2)
        causal_mask = self.bias[:, :, kl - ql:kl, :kl]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal_mask, w.to(w.dtype), mask_value)
        if attention_mask is not None:  # the padding's keys: GPT2Model made it additive
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1).type(v.dtype)
        y = torch.matmul(self.attn_dropout(w), v)
        return self.resid_dropout(self.c_proj(self._merge_heads(y)))


class HFGPT2Block(torch.nn.Module):
    """transformers' GPT2Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), the MLP Conv1D c_fc (4C), gelu_new (as
    NewGELU), Conv1D c_proj, dropout."""

    def __init__(self, C, H, P, p=0.0):
        super().__init__()
        nn = torch.nn
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), HFGPT2Attention(C, H, P, p), nn.LayerNorm(C)
        self.mlp = nn.ModuleDict({"c_fc": Conv1D(4 * C, C), "c_proj": Conv1D(C, 4 * C)})
        self.act, self.drop = NewGELU(), nn.Dropout(p)

    def forward(self, x, attention_mask=None):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.drop(self.mlp["c_proj"](self.act(self.mlp["c_fc"](self.ln_2(x)))))


class HFGPT2(torch.nn.Module):
    """transformers' GPT2LMHeadModel in small (GPT2Model's forward without cache or masks): the ids viewed
    [-1, T], position ids torch.arange(0, T).unsqueeze(0), wte + wpe, dropout, the blocks, ln_f, the hidden
    states viewed back, lm_head tied to wte. Written here after transformers' code (not installed on Debian),
    state_dict names as GPT2LMHeadModel's (transformer.h.0.attn.c_attn.weight, ...)."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, p=0.0):
        super().__init__()
        nn = torch.nn
        self.transformer = nn.Module()
        tr = self.transformer
        tr.wte, tr.wpe, tr.drop = nn.Embedding(V, C), nn.Embedding(T, C), nn.Dropout(p)
        tr.h = nn.ModuleList(HFGPT2Block(C, H, T, p) for _ in range(L))
        tr.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = tr.wte.weight

    def body(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        tr = self.transformer
        shape = input_ids.size()
        input_ids = input_ids.view(-1, shape[-1])
        batch_size = input_ids.shape[0]
        if position_ids is not None:  # given: GPT2Model views it as the ids
            position_ids = position_ids.view(-1, shape[-1])
        else:
            position_ids = torch.arange(0, shape[-1], dtype=torch.long, device=input_ids.device).unsqueeze(0)
        if attention_mask is not None:  # GPT2Model's: 1 a token, 0 padding, made additive for every block
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=tr.wte.weight.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(tr.wte.weight.dtype).min
        h = tr.wte(input_ids) + tr.wpe(position_ids)
        if token_type_ids is not None:  # GPT2Model's: the types' rows of wte itself, added
            h = h + tr.wte(token_type_ids.view(-1, shape[-1]))
        h = tr.drop(h)
        for blk in tr.h:
            h = blk(h, attention_mask)
        return tr.ln_f(h).view((-1,) + shape[1:] + (h.size(-1),))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        return self.lm_head(self.body(input_ids, attention_mask, token_type_ids, position_ids))


class HFGPT2Cls(HFGPT2):
    """transformers' GPT2ForSequenceClassification in small, after its code (4.3x; LLaMA's and Mistral's
    classifiers pick their token alike): GPT2Model's hidden states, `score` (a Linear without a bias) on every
    token, then the scores of each sequence's last token before its first pad token, torch.eq(input_ids,
    pad_token_id).int().argmax(-1) - 1 modulo T (no pad token: the last token), logits[torch.arange(batch),
    that]; since_445: as transformers 4.45 on picks it, the last token that is not the pad token,
    (torch.arange(T) * (input_ids != pad_token_id).int()).argmax(-1); no_pad: as it picks it without a pad token
    (GPT-2's config has none; transformers then takes batches of one), logits[torch.arange(batch), -1]. pad_id:
    the pad token's id (the vocabulary's last here; GPT-2's eos in practice)."""

    seq_classes = True

    def __init__(self, classes=CLASSES, pad_id=None, **kw):
        super().__init__(**kw)
        del self.lm_head
        self.score = torch.nn.Linear(self.transformer.wte.embedding_dim, classes, bias=False)
        self.pad_id = self.transformer.wte.num_embeddings - 1 if pad_id is None else pad_id
        self.mask_input = True

    def forward(self, input_ids, attention_mask=None):
        logits = self.score(self.body(input_ids, attention_mask))
        batch_size = input_ids.shape[0]
        if getattr(self, "no_pad", False):  # config.pad_token_id None (GPT-2's own): the last token, batch 1
            return logits[torch.arange(batch_size, device=logits.device), -1]
        if getattr(self, "batch_tokens", False):  # a mistake: the batch's numbers as the tokens picked
            return logits[:, torch.arange(batch_size, device=logits.device)][:, -1]
        if getattr(self, "since_445", False):  # transformers 4.45 on: the last token that is not the pad token
            non_pad_mask = (input_ids != self.pad_id).to(logits.device, torch.int32)
            token_indices = torch.arange(input_ids.shape[-1], device=logits.device, dtype=torch.int32)
            sequence_lengths = (token_indices * non_pad_mask).argmax(-1)
        else:  # last_before_pad's lines, here in forward: the committed gpt2_cls.onnx keeps its node names
            sequence_lengths = torch.eq(input_ids, self.pad_id).int().argmax(-1) - 1
            sequence_lengths = sequence_lengths % input_ids.shape[-1]
        return logits[torch.arange(batch_size, device=logits.device), sequence_lengths]


def expand_mask(mask, dtype):
    """transformers' _expand_mask (BART's encoder, CLIP's; LLaMA's before 4.35): [B, T] to an additive
    [B, 1, T, T], 0 at a token and float32's lowest number at padding."""
    bsz, src_len = mask.size()
    expanded = mask[:, None, None, :].expand(bsz, 1, src_len, src_len).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class DistilBertAttention(torch.nn.Module):
    """transformers' DistilBERT MultiHeadSelfAttention: q_lin, k_lin, v_lin, each viewed (bs, -1, H, d) and
    transposed, q divided by sqrt(d), the padding's keys filled with float32's lowest number by
    (mask == 0).view(bs, 1, 1, k_length).expand_as(scores) and masked_fill, softmax, dropout, out_lin."""

    def __init__(self, C, H, p=0.0):
        super().__init__()
        nn = torch.nn
        self.H, self.C = H, C
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(C, C) for _ in range(4))
        self.dropout = nn.Dropout(p)
        self.fill = None  # masked_fill's value: float32's lowest number (DistilBERT's), or another (a refusal)

    def forward(self, x, mask):
        bs, q_length, dim = x.size()
        k_length = x.size(1)
        dph = self.C // self.H
        mask_reshp = (bs, 1, 1, k_length)

        def shape(t):
            return t.view(bs, -1, self.H, dph).transpose(1, 2)

        def unshape(t):
            return t.transpose(1, 2).contiguous().view(bs, -1, self.H * dph)

        q, k, v = shape(self.q_lin(x)), shape(self.k_lin(x)), shape(self.v_lin(x))
        q = q / math.sqrt(dph)
        scores = torch.matmul(q, k.transpose(2, 3))
        if mask is not None and mask.dtype.is_floating_point:  # already additive (expand_mask's)
            scores = scores + mask
        elif mask is not None:
            mask = (mask == 0).view(mask_reshp).expand_as(scores)
            fill = torch.finfo(scores.dtype).min if self.fill is None else self.fill
            scores = scores.masked_fill(mask, torch.tensor(fill))
        weights = self.dropout(torch.nn.functional.softmax(scores, dim=-1))
        return self.out_lin(unshape(torch.matmul(weights, v)))


class DistilBertBlock(torch.nn.Module):
    """transformers' DistilBERT TransformerBlock (post-norm): sa_layer_norm(attention(x) + x), then
    output_layer_norm(ffn(h) + h), the FFN lin1, exact GELU, lin2, dropout."""

    def __init__(self, C, H, hidden, p=0.0):
        super().__init__()
        nn = torch.nn
        self.attention, self.sa_layer_norm = DistilBertAttention(C, H, p), nn.LayerNorm(C, eps=1e-12)
        self.ffn = nn.ModuleDict({"lin1": nn.Linear(C, hidden), "lin2": nn.Linear(hidden, C)})
        self.drop, self.output_layer_norm = nn.Dropout(p), nn.LayerNorm(C, eps=1e-12)

    def forward(self, x, mask):
        h = self.sa_layer_norm(self.attention(x, mask) + x)
        f = self.drop(self.ffn["lin2"](torch.nn.functional.gelu(self.ffn["lin1"](h))))
        return self.output_layer_norm(f + h)


class DistilBert(torch.nn.Module):
    """transformers' DistilBertForMaskedLM in small, written after its code (not installed on Debian): word and
    position embeddings (position_ids a buffer cut to the sequence), LayerNorm, dropout, bidirectional blocks
    that mask the padding's keys by the attention_mask input (1 a token, 0 padding), vocab_transform, GELU,
    vocab_layer_norm, vocab_projector tied to the word embeddings; state_dict names as the module's
    (distilbert.transformer.layer.0.attention.q_lin.weight, ...)."""

    mask_input = True

    def __init__(self, V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.0, expand_mask=False):
        super().__init__()
        self.expand_mask = expand_mask  # the mask made additive first, as BART's _expand_mask makes it
        nn = torch.nn
        self.distilbert = nn.Module()
        db = self.distilbert
        db.embeddings = nn.Module()
        emb = db.embeddings
        emb.word_embeddings, emb.position_embeddings = nn.Embedding(V, C), nn.Embedding(T, C)
        emb.LayerNorm, emb.dropout = nn.LayerNorm(C, eps=1e-12), nn.Dropout(p)
        emb.register_buffer("position_ids", torch.arange(T).expand((1, -1)), persistent=False)
        db.transformer = nn.Module()
        db.transformer.layer = nn.ModuleList(DistilBertBlock(C, H, hidden, p) for _ in range(L))
        self.vocab_transform, self.vocab_layer_norm = nn.Linear(C, C), nn.LayerNorm(C, eps=1e-12)
        self.vocab_projector = nn.Linear(C, V)
        self.vocab_projector.weight = emb.word_embeddings.weight

    def body(self, input_ids, attention_mask=None):
        emb = self.distilbert.embeddings
        x = emb.word_embeddings(input_ids)
        if attention_mask is not None and self.expand_mask:
            attention_mask = expand_mask(attention_mask, x.dtype)
        position_ids = emb.position_ids[:, :x.size(1)]
        h = emb.dropout(emb.LayerNorm(x + emb.position_embeddings(position_ids)))
        for blk in self.distilbert.transformer.layer:
            h = blk(h, attention_mask)
        return h

    def forward(self, input_ids, attention_mask=None):
        h = self.body(input_ids, attention_mask)
        h = self.vocab_layer_norm(torch.nn.functional.gelu(self.vocab_transform(h)))
        return self.vocab_projector(h)


class DistilBertCls(DistilBert):
    """transformers' DistilBertForSequenceClassification in small, after its code: DistilBERT's body, the first
    token's hidden state (hidden_state[:, 0]) through pre_classifier, ReLU, dropout (seq_classif_dropout) and
    classifier: class scores per sequence."""

    seq_classes = True

    def __init__(self, classes=CLASSES, **kw):
        super().__init__(**kw)
        nn, C = torch.nn, self.distilbert.embeddings.word_embeddings.embedding_dim
        del self.vocab_transform, self.vocab_layer_norm, self.vocab_projector
        self.pre_classifier, self.classifier = nn.Linear(C, C), nn.Linear(C, classes)
        self.dropout = nn.Dropout(kw.get("p", 0.0))

    def forward(self, input_ids, attention_mask=None):
        pooled = self.body(input_ids, attention_mask)[:, 0]
        return self.classifier(self.dropout(torch.nn.functional.relu(self.pre_classifier(pooled))))


class MeanPoolCls(DistilBert):
    """A sentence classifier as users write one on an encoder (sentence-transformers' pooling): DistilBERT's
    body, the mean of the tokens (under the attention_mask when given, as sentence-transformers' mean_pooling
    writes it, m = mask.unsqueeze(-1).expand(h.size()).float(), torch.sum(h * m, 1) / torch.clamp(m.sum(1),
    min=1e-9), or with simple_pool (h * mask[..., None]).sum(1) / mask[..., None].sum(1); exported from the
    ids alone, h.mean(1)), then a linear classifier."""

    seq_classes = True

    def __init__(self, classes=CLASSES, **kw):
        super().__init__(**kw)
        C = self.distilbert.embeddings.word_embeddings.embedding_dim
        del self.vocab_transform, self.vocab_layer_norm, self.vocab_projector
        self.classifier = torch.nn.Linear(C, classes)

    def forward(self, input_ids, attention_mask=None):
        h = self.body(input_ids, attention_mask)
        if attention_mask is None:
            return self.classifier(h.mean(1))
        if getattr(self, "simple_pool", False):
            m = attention_mask[..., None].to(h.dtype)
            return self.classifier((h * m).sum(1) / m.sum(1))
        m = attention_mask.unsqueeze(-1).expand(h.size()).float()
        return self.classifier(torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9))


class BertSelfAttention(torch.nn.Module):
    """transformers' BertSelfAttention (absolute positions, no cache): query, key, value, each
    transpose_for_scores'd (view to x.size()[:-1] + (H, d), permute(0, 2, 1, 3)), the scores divided by
    sqrt(d), plus the extended attention mask, softmax, dropout, the heads merged by permute and view."""

    def __init__(self, C, H, p):
        super().__init__()
        nn = torch.nn
        self.H, self.d = H, C // H
        self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.dropout = nn.Dropout(p)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.H, self.d)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        mixed_query_layer = self.query(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)
        scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.d)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.dropout(torch.nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.H * self.d,))


class BertLayer(torch.nn.Module):
    """transformers' BertLayer: attention.self, attention.output (dense, dropout, LayerNorm(h + input)),
    intermediate (dense, exact GELU), output (dense, dropout, LayerNorm(h + input)); post-norm, eps 1e-12."""

    def __init__(self, C, H, hidden, p):
        super().__init__()
        nn = torch.nn
        self.attention = nn.Module()
        self.attention.self = BertSelfAttention(C, H, p)
        self.attention.output = nn.Module()
        self.attention.output.dense, self.attention.output.LayerNorm = nn.Linear(C, C), nn.LayerNorm(C, eps=1e-12)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(C, hidden)
        self.output = nn.Module()
        self.output.dense, self.output.LayerNorm = nn.Linear(hidden, C), nn.LayerNorm(C, eps=1e-12)
        self.drop = nn.Dropout(p)

    def forward(self, x, mask):
        a = self.attention.output.LayerNorm(self.drop(self.attention.output.dense(self.attention.self(x, mask))) + x)
        h = torch.nn.functional.gelu(self.intermediate.dense(a))
        return self.output.LayerNorm(self.drop(self.output.dense(h)) + a)


class HFBert(torch.nn.Module):
    """transformers' BertForMaskedLM in small, written after its code (not installed on Debian): word, token
    type and position embeddings (token_type_ids and position_ids buffers cut to the sequence, the types
    expanded over the batch: all 0), LayerNorm, dropout, post-norm layers whose attention adds the extended
    attention mask ((1.0 - mask[:, None, None, :]) * lowest; an all-ones mask made in forward when none is
    given), the MLM head (transform dense, GELU, LayerNorm; decoder tied to the word embeddings, its bias
    cls.predictions.bias); state_dict names as the module's (bert.encoder.layer.0.attention.self.query.weight)."""

    def __init__(self, V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.0, types=2, mask_input=True):
        super().__init__()
        nn = torch.nn
        self.mask_input = mask_input
        self.bert = nn.Module()
        e = self.bert.embeddings = nn.Module()
        e.word_embeddings, e.position_embeddings = nn.Embedding(V, C), nn.Embedding(T, C)
        e.token_type_embeddings = nn.Embedding(types, C)
        e.LayerNorm, e.dropout = nn.LayerNorm(C, eps=1e-12), nn.Dropout(p)
        e.register_buffer("position_ids", torch.arange(T).expand((1, -1)), persistent=False)
        e.register_buffer("token_type_ids", torch.zeros((1, T), dtype=torch.long), persistent=False)
        self.bert.encoder = nn.Module()
        self.bert.encoder.layer = nn.ModuleList(BertLayer(C, H, hidden, p) for _ in range(L))
        self.cls = nn.Module()
        pr = self.cls.predictions = nn.Module()
        pr.transform = nn.Module()
        pr.transform.dense, pr.transform.LayerNorm = nn.Linear(C, C), nn.LayerNorm(C, eps=1e-12)
        pr.decoder = nn.Linear(C, V, bias=False)
        pr.bias = nn.Parameter(0.02 * torch.randn(V))
        pr.decoder.bias = pr.bias
        pr.decoder.weight = e.word_embeddings.weight

    def body(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        e = self.bert.embeddings
        batch_size, seq_length = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = e.token_type_ids[:, :seq_length].expand(batch_size, seq_length)
        ext = attention_mask[:, None, None, :].to(dtype=e.word_embeddings.weight.dtype)
        ext = (1.0 - ext) * torch.finfo(e.word_embeddings.weight.dtype).min
        if position_ids is None:
            position_ids = e.position_ids[:, 0:seq_length]
        x = e.word_embeddings(input_ids) + e.token_type_embeddings(token_type_ids)
        x = x + e.position_embeddings(position_ids)
        h = e.dropout(e.LayerNorm(x))
        for layer in self.bert.encoder.layer:
            h = layer(h, ext)
        return h

    def forward(self, input_ids, attention_mask=None):
        h = self.body(input_ids, attention_mask)
        pr = self.cls.predictions
        h = pr.transform.LayerNorm(torch.nn.functional.gelu(pr.transform.dense(h)))
        return pr.decoder(h)


class HFBertCls(HFBert):
    """transformers' BertForSequenceClassification in small, after its code: BERT's body, its pooler (dense and
    tanh on the first token's hidden state: bert.pooler.dense), dropout and classifier: class scores per
    sequence."""

    seq_classes = True

    def __init__(self, classes=CLASSES, **kw):
        super().__init__(**kw)
        nn, C = torch.nn, self.bert.embeddings.word_embeddings.embedding_dim
        del self.cls
        self.bert.pooler = nn.Module()
        self.bert.pooler.dense = nn.Linear(C, C)
        self.dropout, self.classifier = nn.Dropout(kw.get("p", 0.0)), nn.Linear(C, classes)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        pooled = torch.tanh(self.bert.pooler.dense(self.body(input_ids, attention_mask, token_type_ids,
                                                             position_ids)[:, 0]))
        return self.classifier(self.dropout(pooled))


class HFBertTok(HFBert):
    """transformers' BertForTokenClassification in small, after its code: BERT's body without a pooler,
    dropout and a classifier on every token's hidden state: class scores per token (named entities)."""

    tok_classes = True

    def __init__(self, classes=CLASSES, **kw):
        super().__init__(**kw)
        nn, C = torch.nn, self.bert.embeddings.word_embeddings.embedding_dim
        del self.cls
        self.dropout, self.classifier = nn.Dropout(kw.get("p", 0.0)), nn.Linear(C, classes)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        return self.classifier(self.dropout(self.body(input_ids, attention_mask, token_type_ids, position_ids)))


class SharedMlp(torch.nn.Module):
    """A module applied twice: one Linear and one LayerNorm used at two places (ALBERT's shared layers in
    small), their gradients the sum of both places'."""

    def __init__(self, size=8):
        super().__init__()
        nn = torch.nn
        self.inp, self.fc, self.norm = nn.Linear(3 * size * size, 32), nn.Linear(32, 32), nn.LayerNorm(32)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        h = torch.relu(self.inp(x.flatten(1)))
        for _ in range(2):
            h = self.norm(h + torch.relu(self.fc(h)))
        return self.head(h)


class HFRobertaCls(HFBert):
    """transformers' RobertaForSequenceClassification in small, after its code: BERT's layers under RoBERTa's
    embeddings (word and position tables with padding_idx, the positions made from the ids by
    create_position_ids_from_input_ids: (torch.cumsum(mask, dim=1) * mask).long() + padding_idx, mask =
    input_ids.ne(padding_idx), so the table has T + padding_idx + 1 rows; one token type), no pooler, and
    RobertaClassificationHead (dropout, dense, tanh, dropout, out_proj on the first token's state)."""

    seq_classes = True

    def __init__(self, classes=CLASSES, pad_id=1, **kw):
        super().__init__(types=1, **kw)
        nn, e = torch.nn, self.bert.embeddings
        V, C, T = e.word_embeddings.num_embeddings, e.word_embeddings.embedding_dim, e.position_embeddings.num_embeddings
        e.word_embeddings = nn.Embedding(V, C, padding_idx=pad_id)
        e.position_embeddings = nn.Embedding(T + pad_id + 1, C, padding_idx=pad_id)
        self.roberta, self.pad_id = self.bert, pad_id
        del self.bert, self.cls
        self.classifier = nn.Module()
        self.classifier.dense, self.classifier.out_proj = nn.Linear(C, C), nn.Linear(C, classes)
        self.classifier.dropout = nn.Dropout(kw.get("p", 0.0))

    def forward(self, input_ids, attention_mask=None):
        e = self.roberta.embeddings
        batch_size, seq_length = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), device=input_ids.device)
        mask = input_ids.ne(self.pad_id).int()
        position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad_id
        token_type_ids = e.token_type_ids[:, :seq_length].expand(batch_size, seq_length)
        ext = attention_mask[:, None, None, :].to(dtype=e.word_embeddings.weight.dtype)
        ext = (1.0 - ext) * torch.finfo(e.word_embeddings.weight.dtype).min
        x = e.word_embeddings(input_ids) + e.token_type_embeddings(token_type_ids)
        h = e.dropout(e.LayerNorm(x + e.position_embeddings(position_ids)))
        for layer in self.roberta.encoder.layer:
            h = layer(h, ext)
        c = self.classifier
        return c.out_proj(c.dropout(torch.tanh(c.dense(c.dropout(h[:, 0])))))


def build(name):
    """The module and its image size: torchvision's CNNs at 64x64, its ViT-B/16 at 32x32 (2x2 patches and the
    class token: 5 tokens; the position embedding is made for that size), vit_small, a VisionTransformer of
    the same structure, 2 blocks of width 64 with 4 heads, and act_cnn, a small CNN with the smooth activations
    (SiLU, exported as x * Sigmoid(x); Sigmoid; Tanh) at 32x32; pad_cnn (and pad_cnn_op9), a small CNN at 32x32
    padded by nn.ZeroPad2d(1), an AvgPool2d's padding and F.pad(x, (2, 2, 1, 1)), each exported as a Pad;
    ceil_cnn (CeilCnn) at 48x48; convnext_mini, its layer scales drawn in [0.5, 1.5); layerscale_mini
    (LayerScaleMini) at 32x32; gpt_mini (GPT: vocabulary 64, context 16, width 32, 4 heads, 2 blocks) and
    tgpt_mini (TGpt: the same sizes, nn.TransformerEncoderLayer blocks with causal masks), whose "size" is
    their context."""
    from torchvision.models.vision_transformer import VisionTransformer
    if name == "gpt_mini":
        return GPT(V=64, T=16, C=32, H=4, L=2), 16
    if name == "gpt_nobias":
        return GPT(V=64, T=16, C=32, H=4, L=2, bias=False), 16
    if name == "tgpt_mini":
        return TGpt(V=64, T=16, C=32, H=4), 16
    if name == "tgpt_kpm":  # with src_key_padding_mask from an attention_mask input besides the causal masks
        return TGpt(V=64, T=16, C=32, H=4, mask_input=True), 16
    if name == "tenc_kpm":  # the same bidirectional: src_key_padding_mask only
        return TGpt(V=64, T=16, C=32, H=4, mask_input=True, causal=False), 16
    if name == "tut_mini":  # the Transformer tutorial's: embeddings times sqrt(C), sinusoids, its dropout 0.2
        return TutorialLM(V=64, T=16, C=32, H=4, L=2, dropout=0.2), 16
    if name == "tut_seqfirst":  # the tutorial as published: [T, batch] throughout
        return TutorialSeqFirst(V=64, T=16, C=32, H=4, L=2), 16
    if name == "tut_halves":  # sinusoids in halves, a buffer [max_len, C], no scale
        return TutorialLM(V=64, T=16, C=32, H=4, L=1, pos="halves", scale=False), 16
    if name == "tut_learned":  # minGPT's learned position parameter, longer than the sequence, cut to it
        return TutorialLM(V=64, T=16, C=32, H=4, L=1, pos="learned"), 16
    if name == "llama_mini":  # the second block's attention grouped-query: 4 query heads, 2 key and value heads
        return Llama(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2), 16
    if name == "llama_bench":  # bench/ only: gpt_bench's size (bytes, 128 tokens, 4 x 128), LLaMA's block in all
        model = Llama(V=256, T=128, C=128, H=4, L=4, hidden=352)
        for i in range(0, 4, 2):  # every block LLaMA's attention: wq, wk, wv, rotary embeddings
            model.attn[i] = LlamaAttention(128, 4, 128, True)
        return model, 128
    if name == "hfgpt2_mask":  # the same with GPT2Model's attention_mask input, (1 - mask) * lowest, added
        model = HFGPT2(V=64, T=16, C=32, H=4, L=2, p=0.2)
        model.mask_input = True
        return model, 16
    if name == "hfgpt2_pos":  # the same with position_ids too (optimum's GPT-2 export: ids, mask, positions)
        model = HFGPT2(V=64, T=16, C=32, H=4, L=2, p=0.2)
        model.mask_input, model.more_inputs = True, ("position_ids",)
        return model, 16
    if name == "distilbert_mini":  # transformers' DistilBERT: bidirectional, the padding's keys masked_fill'ed
        return DistilBert(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16  # (its default dropout is 0.1)
    if name == "llama_mask":  # llama_mini's blocks, the mask transformers 4.36 makes from an attention_mask
        return HFLlamaMask(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2), 16
    if name == "gpt2_cls":  # GPT2ForSequenceClassification: the scores of each sequence's last real token
        return HFGPT2Cls(V=64, T=16, C=32, H=4, L=2, p=0.2), 16
    if name == "gemma_mini":  # Gemma's block: (1 + w) RMSNorms, GeGLU, sqrt(C)-scaled tied embeddings, MQA
        return HFGemma(V=64, T=16, C=32, H=4, L=2, hidden=64, kv_heads=1), 16
    if name == "gemma_wide":  # gemma_mini with Gemma 7B's heads: 4 of 8 columns (32) on a width of 24
        return HFGemma(V=64, T=16, C=24, H=4, L=2, hidden=64, kv_heads=2, head_dim=8), 16
    if name == "qwen2_mini":  # llama_442 with Qwen2's biases on q, k and v (not on o)
        return HFLlamaMask442(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2, rope="hf", qkv_bias=True), 16
    if name == "llama_442":  # llama_pos's blocks, the causal mask as transformers 4.42 makes it from the ids alone
        return HFLlamaMask442(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2, rope="hf"), 16
    if name == "llama_cls":  # LlamaForSequenceClassification: llama_mask's body, the last real token's scores
        return HFLlamaCls(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2, rope="hf"), 16
    if name == "llama_pos":  # llama_mask with transformers 4.38's rotary tables made from a position_ids input
        model = HFLlamaMask(V=64, T=16, C=32, H=4, L=2, hidden=48, kv_heads=2, rope="hf")
        model.more_inputs = ("position_ids",)
        return model, 16
    if name == "distilbert_cls":  # DistilBertForSequenceClassification: the first token's state, class scores
        return DistilBertCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16
    if name == "distilbert_cls_bench":  # bench/ only: hfbert_bench's size, DistilBERT's classifier of 2 classes
        model = DistilBertCls(V=256, T=128, C=128, H=4, L=4, hidden=512, p=0.1, classes=2)
        model.mask_input = False
        return model, 128
    if name == "shared_mlp":  # a Linear and a LayerNorm each applied twice: their weights shared
        return SharedMlp(8), 8
    if name == "roberta_cls":  # RobertaForSequenceClassification: positions after padding_idx, made from the ids
        return HFRobertaCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16
    if name == "meanpool_mask":  # the same given the attention_mask: sentence-transformers' mean_pooling by it
        return MeanPoolCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16
    if name == "meanpool_cls":  # the mean of the tokens, exported from the ids alone (x.mean(1)): the real ones
        model = MeanPoolCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2)
        model.mask_input = False
        return model, 16
    if name == "hfbert_cls":  # BertForSequenceClassification: the pooler's tanh on the first token, class scores
        return HFBertCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16
    if name == "hfbert_tok":  # BertForTokenClassification: class scores per token
        return HFBertTok(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2, classes=5), 16
    if name == "hfbert_cls_inputs":  # the same with BertForSequenceClassification's four inputs, as optimum exports it
        model = HFBertCls(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2)
        model.more_inputs = ("token_type_ids", "position_ids")
        return model, 16
    if name == "hfbert_mini":  # transformers' BERT for masked LM: token types, the extended attention mask
        return HFBert(V=64, T=16, C=32, H=4, L=2, hidden=64, p=0.2), 16
    if name == "hfbert_bench":  # bench/ only: BERT at gpt_bench's size (bytes, 128 tokens, 4 x 128), dropout 0.1
        return HFBert(V=256, T=128, C=128, H=4, L=4, hidden=512, p=0.1, mask_input=False), 128
    if name == "hfbert_vocab_bench":  # bench/ only: the same with bert-base-uncased's vocabulary (a masked LM's head)
        return HFBert(V=30522, T=128, C=128, H=4, L=4, hidden=512, p=0.1, mask_input=False), 128
    if name == "hfgpt2_mini":  # transformers' GPT-2 as its code writes it: Conv1D, torch.where, dropout 0.2 (GPT-2's 0.1)
        return HFGPT2(V=64, T=16, C=32, H=4, L=2, p=0.2), 16
    if name in ("tut_bench", "tut_bench0"):  # bench/ only: the tutorial's model at gpt_bench's size, dropout 0.1 or 0
        return TutorialLM(V=256, T=128, C=128, H=4, L=4, dropout=0.1 if name == "tut_bench" else 0.0), 128
    if name == "gpt_bench":  # bench/ only: nanoGPT at models/gpt-nano.cfg's size (bytes, 128 tokens, 4 x 128)
        return GPT(V=256, T=128, C=128, H=4, L=4), 128
    if name == "act_cnn":
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.SiLU(),
                             nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.Sigmoid(),
                             nn.Conv2d(8, 16, 3, padding=1), nn.Tanh(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES)), 32
    if name == "param_act_cnn":  # Softplus(beta=2) exports as Mul, Softplus, Div
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.LeakyReLU(0.1),
                             nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ELU(0.5),
                             nn.Conv2d(8, 16, 3, padding=1), nn.Softplus(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.LeakyReLU(), nn.Softplus(beta=2),
                             nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SELU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.CELU(0.5),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES)), 32
    if name == "prelu_cnn":  # PReLU(C) exports as Unsqueeze of its [C] weight to [C,1,1], then PRelu
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.PReLU(8),
                             nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.PReLU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.PReLU(16),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 32), nn.PReLU(32),
                             nn.Linear(32, 32), nn.PReLU(), nn.Linear(32, CLASSES)), 32
    if name in ("pad_cnn", "pad_cnn_op9"):  # every padding a Pad node before the Conv or AveragePool that takes it
        nn = torch.nn
        return nn.Sequential(nn.ZeroPad2d(1), nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AvgPool2d(2, padding=1),  # 17x17
                             FPad((2, 2, 1, 1)), nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),  # 17x19
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES)), 32
    if name == "ceil_cnn":
        return CeilCnn(), 48
    if name == "gn_cnn":
        return GnCnn(), 32
    if name == "resnet18_gn":  # bench/: ResNet-18 with GroupNorm(32, C) for its batch norms (no onnx_torch test)
        return torchvision.models.resnet18(num_classes=CLASSES, norm_layer=lambda c: torch.nn.GroupNorm(32, c)), SIZE
    if name == "mhsa_mini":
        return MhsaMini(), 32
    if name == "layerscale_mini":
        return LayerScaleMini(), 32
    if name == "convnext_mini":  # torchvision's ConvNeXt, two stages: channels-last blocks, LayerNorm2d, layer scale
        from torchvision.models.convnext import CNBlock, CNBlockConfig, ConvNeXt
        model = ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 1)], num_classes=CLASSES)
        with torch.no_grad():  # the layer scales away from their 1e-6, so that the blocks matter
            for mod in model.modules():
                if isinstance(mod, CNBlock):
                    mod.layer_scale.uniform_(0.5, 1.5)
        return model, 32
    if name in ("efficientnet_b0", "efficientnet_v2_s", "convnext_tiny"):  # stochastic depth off: Bernoulli does
        return getattr(torchvision.models, name)(num_classes=CLASSES, stochastic_depth_prob=0.0), SIZE  # not export
    if name in ("googlenet", "inception_v3"):  # one output: no auxiliary heads (their sum is the user's loss)
        return getattr(torchvision.models, name)(num_classes=CLASSES, aux_logits=False, init_weights=True), \
            (128 if name == "inception_v3" else SIZE)  # Inception-v3 at 128: 2x2 at its last blocks
    if name == "vit_b_16":
        return torchvision.models.vit_b_16(image_size=32, num_classes=CLASSES), 32
    if name == "vit_small":
        return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                                 num_classes=CLASSES), 32
    return getattr(torchvision.models, name)(num_classes=CLASSES), SIZE


def oracle(name):
    import copy
    g = torch.Generator().manual_seed(26)
    torch.manual_seed(26)
    model, size = build(name)
    perturb_bn(model, g)
    if name in TOKEN_MODELS:  # ids [M, T] and next-token labels, every 7th -1 (padding the loss ignores)
        vocab = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding)).num_embeddings
        x = torch.randint(0, vocab, (M, size), generator=g).to(torch.int32)
        y = torch.randint(0, vocab, (M, size), generator=g).to(torch.int32)
        y.view(-1)[6::7] = -1
        if getattr(model, "seq_classes", False):  # a class a sequence; padded ones end in id -1, batchfit's mark
            head = model.score if hasattr(model, "score") else getattr(model.classifier, "out_proj", model.classifier)
            y = torch.randint(0, head.out_features, (M,), generator=g).to(torch.int32)
            if hasattr(model, "pad_id"):  # the pad token only at padding, where PyTorch looks for it
                x[x == model.pad_id] = model.pad_id - 1
            x[1, 11:], x[3, 5:] = -1, -1
        elif getattr(model, "tok_classes", False):  # a class a token, -2 at real tokens not scored (a tail too)
            y = torch.randint(0, model.classifier.out_features, (M, size), generator=g).to(torch.int32)
            y[1, 11:], y[3, 5:] = -1, -1
            y[0, 3::4], y[2, 0] = -2, -2
        elif getattr(model, "mask_input", False):  # padded sequences: their keys masked by attention_mask
            y[1, 11:], y[3, 5:] = -1, -1
        export(model, os.path.join(OUT, name + ".onnx"), x[:2].clamp(min=0).long(), True, OPSET.get(name, 17),
               getattr(model, "seq_first", False))
    else:
        x = torch.randn(M, 3, size, size, generator=g)
        y = torch.randint(0, CLASSES, (M,), generator=g).to(torch.int32)
        away_from_kinks(model, name, x)
        export(model, os.path.join(OUT, name + ".onnx"), x[:2], True, OPSET.get(name, 17))
    if name in ("resnet18", "vit_small"):
        export(model, os.path.join(OUT, name + "_fixed.onnx"), x[:2], False)
    from_file(model, os.path.join(OUT, name + ".onnx"))
    if name in LOSS_ONLY:
        t = {"x": x, "y": y}
        for dtype, key in ((torch.float64, "loss64"), (torch.float32, "loss32")):
            with torch.no_grad():
                m = copy.deepcopy(model).to(dtype).train()
                t[key] = torch.nn.functional.cross_entropy(m(x.to(dtype)), y.long()).double().reshape(())
        write_safetensors(os.path.join(OUT, name + "_ref.safetensors"), t)
        return
    l64, g64, s64 = step(model, x, y, torch.float64)
    l32, g32, s32 = step(model, x, y, torch.float32)
    t = {"x": x, "y": y, "loss64": l64.reshape(()), "loss32": l32.double().reshape(())}
    ps = sorted({float(mod.p if isinstance(mod, torch.nn.Dropout) else mod.dropout) for mod in model.modules()
                 if isinstance(mod, torch.nn.Dropout) and mod.p > 0
                 or isinstance(mod, torch.nn.MultiheadAttention) and mod.dropout > 0})
    if ps:  # the module's dropout ratios (the file must keep them; the comparison runs without)
        t["dropout"] = torch.tensor(ps, dtype=torch.float64)
    for n in g64:
        t["g64." + n] = g64[n]
        t["g32." + n] = g32[n]
        t["after64." + n] = s64[n].float()
    for n, v in s64.items():  # batch norms' statistics; constants (a sinusoidal buffer), which stay as they were
        if n.endswith("running_mean") or n.endswith("running_var") or n == "pe" or n.endswith(".pe"):
            t["run64." + n] = v
            t["run32." + n] = s32[n]
    write_safetensors(os.path.join(OUT, name + "_ref.safetensors"), t)


def main():
    os.makedirs(OUT, exist_ok=True)
    stamp = stamp_of(torch_version() or torch.__version__)
    torch.set_num_threads(2)
    for name in sys.argv[2:]:
        sp = os.path.join(OUT, name + ".stamp")
        if up_to_date(name, stamp):
            print(f"export.py: {name}: up to date in {OUT}")
            continue
        if os.path.exists(sp):
            os.remove(sp)
        if name == "resnet50_224":
            torch.manual_seed(50)
            export(torchvision.models.resnet50(), os.path.join(OUT, "resnet50_224.onnx"), torch.randn(2, 3, 224, 224),
                   True)
        elif name == "gpt_long":  # GPT-2's context: 12 blocks, each with its [1, 1, 1024, 1024] mask buffer
            torch.manual_seed(12)
            export(GPT(V=256, T=1024, C=16, H=2, L=12), os.path.join(OUT, "gpt_long.onnx"),
                   torch.zeros(2, 1024, dtype=torch.long), True)
        else:
            oracle(name)
        with open(sp, "w") as f:
            f.write(stamp)
        print(f"export.py: {name}: exported into {OUT}")
    return 0


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    sys.exit(main())
