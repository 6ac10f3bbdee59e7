#!/usr/bin/env python3
"""state_dict_check.py NAME WEIGHTS IO: the weights batchfit saved after
training an imported torchvision model load into that model with a strict
load_state_dict (every entry, nothing else; the batch norms fill in the
num_batches_tracked that ONNX files do not carry), and
the module in eval mode gives batchfit's softmax probabilities on IO's "x"
(IO's "probs"). A token model (IO's x is I32 token ids [m, T]) takes them
as int64 and gives probabilities over its last dimension ([m, T, V]).

Strict, with two exceptions that lose nothing, each named in the output:
a tied parameter the file holds once (gpt_mini's lm_head.weight is
wte.weight's Parameter: the file's key loads both), and a registered buffer
that is not a parameter (gpt_mini's causal tril masks, attn.bias) which the
file leaves out only where the ONNX file beside WEIGHTS held it equal,
bit for bit, to the value the module builds itself, so that the module's
own is the one batchfit ran with. Any other key missing, or any key the
module does not have, fails. Exit 0 if the largest difference is at most
1e-4 (both are float32 evaluations of probabilities in [0, 1]), 1
otherwise."""
import collections, json, os, struct, sys

import torch
import torchvision


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    codes = {"F32": torch.float32, "I32": torch.int32, "F64": torch.float64}
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=codes[t["dtype"]]).reshape(t["shape"])
    return out, meta


def onnx_initializers(path):
    """The ONNX file's initializers by name ({} when it or the onnx package is missing)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        return {}
    if not os.path.exists(path):
        return {}
    return {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(path).graph.initializer}


def allowed_missing(name, model, w, weights):
    """The keys of model's state_dict the file w may lack: aliases of a key it has (the same tensor), and
    buffers that are no parameter and that the ONNX file held equal to the module's freshly built value.
    Returns (aliases {key: key in w}, buffers [key], problems [str])."""
    state = model.state_dict(keep_vars=True)
    params = {id(p) for p in model.parameters()}
    buffers = {f"{mn}.{bn}" if mn else bn for mn, mod in model.named_modules() for bn, _ in
               mod.named_buffers(recurse=False)}
    aliases, kept, problems = {}, [], []
    init = None
    for k in state:
        if k in w or k.endswith("num_batches_tracked"):  # BatchNorm's own load fills it in (no version in w)
            continue
        same = [a for a in w if a in state and (state[a] is state[k] or state[a].data_ptr() == state[k].data_ptr())]
        if same:
            aliases[k] = same[0]
            continue
        if k in buffers and id(state[k]) not in params:
            if init is None:
                d = os.path.dirname(os.path.abspath(weights))
                init = onnx_initializers(os.path.join(d, name + ".onnx"))
            if k in init and init[k].shape == state[k].shape and torch.equal(init[k].to(state[k].dtype),
                                                                               state[k].detach()):
                kept.append(k)
                continue
            problems.append(f"buffer {k} is not in the file, and the ONNX file's is "
                            f"{'absent' if k not in init else 'not the module value'}")
            continue
        problems.append(f"{k} is not in the file")
    return aliases, kept, problems


def main():
    name, weights, io = sys.argv[1:4]
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from export import build  # the module export.py exported
    model, _ = build(name)
    w, _ = read_safetensors(weights)
    aliases, kept, problems = allowed_missing(name, model, w, weights)
    if problems:
        print(f"state_dict_check: {name}: missing keys: {'; '.join(problems)}")
        return 1
    w = collections.OrderedDict(w)
    w._metadata = model.state_dict()._metadata  # the modules' versions, as a saved state_dict has (MNASNet's)
    try:
        res = model.load_state_dict(w, strict=False)
    except RuntimeError as e:  # a shape that differs
        print(f"state_dict_check: {name}: {e}")
        return 1
    missing = [k for k in res.missing_keys if k not in aliases and k not in kept
               and not k.endswith("num_batches_tracked")]  # with the versions BatchNorm keeps its own
    if res.unexpected_keys or missing:
        print(f"state_dict_check: {name}: unexpected keys {res.unexpected_keys}, missing keys {missing}")
        return 1
    state = model.state_dict()
    same = all(torch.equal(state[k], v) for k, v in w.items()) and \
        all(torch.equal(state[k], w[a]) for k, a in aliases.items())
    model.eval()
    data, _ = read_safetensors(io)
    x = data["x"]
    with torch.no_grad():
        if x.dtype == torch.int32 and getattr(model, "seq_first", False):  # [T, batch] in and out
            probs = torch.softmax(model(x.long().t()).transpose(0, 1), dim=-1)
        elif x.dtype == torch.int32 and getattr(model, "seq_classes", False):  # class scores per sequence
            from export import ids_mask
            probs = torch.softmax(model(*ids_mask(x, getattr(model, "pad_id", 0))), dim=-1)
        elif x.dtype == torch.int32 and getattr(model, "mask_input", False):  # padded sequences, as batchfit's
            from export import padding_mask
            probs = torch.softmax(model(x.long(), padding_mask(data["y"])), dim=-1)
        elif x.dtype == torch.int32:  # token ids: probabilities per token over the vocabulary
            probs = torch.softmax(model(x.long()), dim=-1)
        else:
            probs = torch.softmax(model(x), dim=1)
    if probs.shape != data["probs"].shape:
        print(f"state_dict_check: {name}: PyTorch's probabilities are {list(probs.shape)}, batchfit's "
              f"{list(data['probs'].shape)}")
        return 1
    gap = (probs - data["probs"]).abs()
    extra = ""
    if getattr(model, "mask_input", False) and not getattr(model, "seq_classes", False):  # the tokens' probabilities: a padding position's have no loss, and
        gap = gap[padding_mask(data["y"]).bool()]  # a causal model's padding sees padding in batchfit, not here
        extra += f"; at the {gap.shape[0]} tokens of the padded sequences"
    diff = gap.max().item()
    if aliases:
        extra += "; tied, loaded through their alias: " + ", ".join(f"{k} = {a}" for k, a in aliases.items())
    if kept:
        extra += ("; buffers not in the file, the module's own (equal to the ONNX file's): " + ", ".join(kept))
    print(f"state_dict_check: {name}: load_state_dict took all {len(w)} tensors (bit-exact: {same}){extra}; "
          f"max |p_torch - p_batchfit| = {diff:.3g} over {gap.numel()} probabilities")
    return 0 if same and diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
