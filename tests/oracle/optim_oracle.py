#!/usr/bin/env python3
"""optim_oracle.py - expected results for tests/test_optim_torch.c from PyTorch.

Usage: optim_oracle.py OUTDIR

Writes, deterministically (torch.manual_seed), into OUTDIR:
  index.txt          what the files hold, one record a line (format below)
  init.f32           initial values of all parameters, concatenated in list order
  grads.f32          STEPS x (all parameters concatenated); zeros for non-trainable
  case_<name>.params.f32  STEPS x all parameters, after each torch.optim step
  case_<name>.state.f32   final optimizer state, per trainable parameter in list
                          order: momentum_buffer, or exp_avg then exp_avg_sq
  clip_<name>.in.f32 / .out.f32  gradients before / after clip_grad_norm_
All .f32 files are raw little-endian float32.

index.txt: the first line is "batchfit-optim-oracle 1"; every other line is a
record type followed by "key value" pairs (no spaces inside values; lists are
comma-separated):
  steps N
  param index I name S numel N trainable 0|1 decay 0|1
  case name S kind sgd|adamw momentum x dampening x nesterov 0|1 weight_decay x
       beta1 x beta2 x eps x lrs l0,l1,...
  sched name S kind constant|step|cosine warmup_steps W warmup_start x step_size N
        gamma x total_steps N min_factor x base_lr x values v0,v1,...
  clip name S max_norm x norm x
Exits 2 with a message when PyTorch is missing.
"""
import math
import os
import struct
import sys
import warnings

try:
    import torch
except ImportError:
    sys.stderr.write("optim_oracle.py: PyTorch is not installed for %s "
                     "(install python3-torch)\n" % sys.executable)
    sys.exit(2)

STEPS = 8

# name, dims, trainable, decay: layer-like parameters; "big" is large enough
# for the C side's parallel path and has an odd size for vector tails.
PARAMS = [
    ("linear.weight", (8, 5), 1, 1),
    ("linear.bias", (8,), 1, 0),
    ("conv.weight", (4, 3, 3, 3), 1, 1),
    ("bn.weight", (4,), 1, 0),
    ("bn.running_mean", (4,), 0, 0),
    ("big.weight", (96, 401), 1, 1),
    ("big.bias", (96,), 1, 0),
]

SGD_CASES = [
    # name, momentum, dampening, nesterov, weight_decay, base lr
    ("sgd_plain", 0.0, 0.0, False, 0.0, 0.1),
    ("sgd_plain_wd", 0.0, 0.0, False, 0.1, 0.1),
    ("sgd_momentum", 0.9, 0.0, False, 0.0, 0.05),
    ("sgd_momentum_wd", 0.9, 0.0, False, 0.05, 0.05),
    ("sgd_nesterov_wd", 0.9, 0.0, True, 0.01, 0.05),
    ("sgd_dampening_wd", 0.8, 0.3, False, 0.02, 0.05),
]

ADAMW_CASES = [
    # name, beta1, beta2, eps, weight_decay, base lr
    ("adamw", 0.9, 0.999, 1e-8, 0.0, 0.01),
    ("adamw_default_wd", 0.9, 0.999, 1e-8, 0.01, 0.01),
    ("adamw_wd", 0.8, 0.99, 1e-6, 0.1, 0.02),
]


def write_f32(path, tensors):
    with open(path, "wb") as f:
        for t in tensors:
            flat = t.detach().to(torch.float32).contiguous().view(-1).tolist()
            f.write(struct.pack("<%df" % len(flat), *flat))


def fmt_list(xs):
    return ",".join(repr(float(x)) for x in xs)


def make_params():
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(dims, generator=g) * 0.5 for (_, dims, _, _) in PARAMS]


def make_grads():
    # Magnitudes vary by step so Adam's second moment is not a constant.
    g = torch.Generator().manual_seed(5678)
    out = []
    for s in range(STEPS):
        row = []
        for (_, dims, trainable, _) in PARAMS:
            if trainable:
                row.append(torch.randn(dims, generator=g) * (0.2 + 0.3 * (s % 3)))
            else:
                row.append(torch.zeros(dims))
        out.append(row)
    return out


def lrs_for(base):
    # A different lr each step checks that the C step uses the one it is given.
    return [base * (1.0 - 0.07 * s) for s in range(STEPS)]


def run_case(init, grads, make_opt, base_lr):
    ps = [torch.nn.Parameter(t.clone()) for t in init]
    train = [p for p, d in zip(ps, PARAMS) if d[2]]
    decay = [p for p, d in zip(ps, PARAMS) if d[2] and d[3]]
    nodecay = [p for p, d in zip(ps, PARAMS) if d[2] and not d[3]]
    opt = make_opt(decay, nodecay)
    lrs = lrs_for(base_lr)
    history = []
    for s in range(STEPS):
        for p, gr, d in zip(ps, grads[s], PARAMS):
            if d[2]:
                p.grad = gr.clone()
        for grp in opt.param_groups:
            grp["lr"] = lrs[s]
        opt.step()
        history.extend(p.detach().clone() for p in ps)
    state = []
    for p in train:
        st = opt.state[p]
        for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
            if st.get(key) is not None:  # plain SGD keeps momentum_buffer None
                state.append(st[key])
        if "step" in st:
            assert int(st["step"]) == STEPS
    return history, state, lrs


def optim_cases(out, idx, init, grads):
    for (name, mom, damp, nest, wd, lr) in SGD_CASES:
        def mk(decay, nodecay):
            return torch.optim.SGD([{"params": decay, "weight_decay": wd},
                                    {"params": nodecay, "weight_decay": 0.0}],
                                   lr=lr, momentum=mom, dampening=damp, nesterov=nest,
                                   foreach=False)
        hist, state, lrs = run_case(init, grads, mk, lr)
        write_f32(os.path.join(out, "case_%s.params.f32" % name), hist)
        write_f32(os.path.join(out, "case_%s.state.f32" % name), state)
        idx.append("case name %s kind sgd momentum %r dampening %r nesterov %d weight_decay %r "
                   "beta1 0 beta2 0 eps 0 lrs %s" % (name, mom, damp, int(nest), wd, fmt_list(lrs)))
    for (name, b1, b2, eps, wd, lr) in ADAMW_CASES:
        def mk(decay, nodecay):
            return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                      {"params": nodecay, "weight_decay": 0.0}],
                                     lr=lr, betas=(b1, b2), eps=eps, foreach=False)
        hist, state, lrs = run_case(init, grads, mk, lr)
        write_f32(os.path.join(out, "case_%s.params.f32" % name), hist)
        write_f32(os.path.join(out, "case_%s.state.f32" % name), state)
        idx.append("case name %s kind adamw momentum 0 dampening 0 nesterov 0 weight_decay %r "
                   "beta1 %r beta2 %r eps %r lrs %s" % (name, wd, b1, b2, eps, fmt_list(lrs)))


def sched_values(make, base_lr, n):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sch = make(opt)
    vals = []
    for _ in range(n):
        vals.append(opt.param_groups[0]["lr"])  # the lr this optimizer step uses
        opt.step()
        sch.step()
    return vals


def sched_cases(idx):
    S = torch.optim.lr_scheduler
    base = 0.5
    cases = [
        # name, kind, warmup, start, step_size, gamma, total, min_factor, steps, scheduler
        ("warmup_constant", "constant", 5, 0.25, 0, 0.1, 0, 0.0, 12,
         lambda o: S.LinearLR(o, start_factor=0.25, total_iters=5)),
        # start factor 0 breaks LinearLR's recursive form, so LambdaLR states it
        ("warmup0_constant", "constant", 4, 0.0, 0, 0.1, 0, 0.0, 10,
         lambda o: S.LambdaLR(o, lambda s: s / 4 if s < 4 else 1.0)),
        ("step", "step", 0, 0.0, 3, 0.5, 0, 0.0, 14,
         lambda o: S.StepLR(o, step_size=3, gamma=0.5)),
        ("warmup_step", "step", 4, 0.1, 3, 0.5, 0, 0.0, 16,
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=4),
                                      S.StepLR(o, step_size=3, gamma=0.5)], milestones=[4])),
        ("cosine", "cosine", 0, 0.0, 0, 0.1, 20, 0.1, 21,
         lambda o: S.CosineAnnealingLR(o, T_max=20, eta_min=base * 0.1)),
        ("warmup_cosine", "cosine", 5, 0.1, 0, 0.1, 25, 0.0, 26,
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
                                      S.CosineAnnealingLR(o, T_max=20, eta_min=0.0)],
                                  milestones=[5])),
        # Hugging Face's cosine-with-warmup from 0, with a floor
        ("warmup0_cosine", "cosine", 3, 0.0, 0, 0.1, 13, 0.2, 13,
         lambda o: S.LambdaLR(o, lambda s: s / 3 if s < 3 else
                              0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * (s - 3) / 10)))),
    ]
    for (name, kind, w, start, ss, gamma, total, minf, n, make) in cases:
        vals = sched_values(make, base, n)
        idx.append("sched name %s kind %s warmup_steps %d warmup_start %r step_size %d gamma %r "
                   "total_steps %d min_factor %r base_lr %r values %s"
                   % (name, kind, w, start, ss, gamma, total, minf, base, fmt_list(vals)))


def clip_cases(out, idx, grads):
    for (name, frac) in (("clipped", 0.3), ("unclipped", 2.0)):
        gs = [g.clone() for g in grads[1]]
        ps = []
        for g, d in zip(gs, PARAMS):
            if d[2]:
                p = torch.nn.Parameter(torch.zeros(g.shape))
                p.grad = g.clone()
                ps.append(p)
        norm = float(torch.norm(torch.stack([torch.norm(p.grad) for p in ps])))
        max_norm = norm * frac
        total = float(torch.nn.utils.clip_grad_norm_(ps, max_norm))
        it = iter(ps)
        after = [next(it).grad if d[2] else g for g, d in zip(gs, PARAMS)]
        write_f32(os.path.join(out, "clip_%s.in.f32" % name), gs)
        write_f32(os.path.join(out, "clip_%s.out.f32" % name), after)
        idx.append("clip name %s max_norm %r norm %r" % (name, max_norm, total))


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: optim_oracle.py OUTDIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # SequentialLR calls step(0) on the next scheduler, which warns in 1.13.
    warnings.filterwarnings("ignore", category=UserWarning)
    init = make_params()
    grads = make_grads()
    idx = ["batchfit-optim-oracle 1", "steps %d" % STEPS]
    for i, (name, dims, trainable, decay) in enumerate(PARAMS):
        idx.append("param index %d name %s numel %d trainable %d decay %d"
                   % (i, name, math.prod(dims), trainable, decay))
    write_f32(os.path.join(out, "init.f32"), init)
    write_f32(os.path.join(out, "grads.f32"), [g for row in grads for g in row])
    optim_cases(out, idx, init, grads)
    sched_cases(idx)
    clip_cases(out, idx, grads)
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("\n".join(idx) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
