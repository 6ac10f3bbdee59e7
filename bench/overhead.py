#!/usr/bin/python3
"""overhead.py - where a training step's time goes on the CPU, against the
primitives' own times (issue 30, "framework overhead").

    bench/overhead.py [--models cnn:128,cnn:512,mlp:128] [--threads 2] [--pairs 3]
                      [--bfit-bench PATH]

For each model and batch, two processes of `bfit_bench step MODEL BATCH 5 3
THREADS`, alternating, --pairs times:

- BFIT_OPTIME=1: the device times each op, copy and fill (waiting for each);
  op_share is their share of the timed steps, and the table on stderr splits
  the ops' time by kind. The step time is that process's median.
- ONEDNN_VERBOSE=1: oneDNN's own time for every primitive it executes
  (its exec lines' last field, ms), split into reorders (layout conversions)
  and the rest (convolutions, matmuls, ...), per step: the sum over the whole
  process over its steps (warm-up included: 3 of 50-200).

Per step, in ms and as shares of the step:
  onednn   oneDNN's compute primitives (every kind but reorder)
  reorder  oneDNN's reorders (nchw <-> blocked layouts, weights' reorders)
  ours     the ops' time that is not oneDNN's: our own kernels (max pool,
           relu masks, SGD, bf16 transposes) and the glue around oneDNN's
  copy     the device's copies and fills (zeroing the gradients, flatten)
  outside  the step's time outside every op: the graph walk, the arena, the
           trainer's bookkeeping
overhead = (reorder + copy + outside) / (onednn + ours): the time beyond the
primitives that compute, over their time. Medians over the pairs. Verbose
printing runs in the second process only, so it inflates nothing measured in
the first; "ours" is the first's op time less the second's oneDNN time, so it
carries the noise of two processes.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def bench(exe, model, batch, threads, env_add, drop=()):
    """`bfit_bench step` in a process of its own (the environment less drop,
    plus env_add): its result line's pairs, and its output (load.py too)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_add)
    cmd = [exe, "step", os.path.join(ROOT, "models", model + ".cfg"), str(batch), "5", "3", str(threads)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {' '.join(cmd)} exited {p.returncode}: {p.stderr[-400:]}")
    line = next((l for l in p.stdout.splitlines() if l.startswith("side=")), None)
    if line is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: no result line from {' '.join(cmd)}")
    return dict(kv.split("=", 1) for kv in line.split()), p.stderr + p.stdout  # oneDNN's verbose goes to stdout


def optime_run(exe, model, batch, threads):
    """(step ms, op ms per step, copy+fill share of the ops' time)."""
    r, err = bench(exe, model, batch, threads, {"BFIT_OPTIME": "1"})
    step_ms = 1000.0 * batch / float(r["samples_per_s"])
    rows = re.findall(r"^(.+?)\s+(\S+)\s+(\d+)\s+([0-9.]+)\s+[0-9.]+%$", err, re.M)
    total = sum(float(x[3]) for x in rows)
    cf = sum(float(x[3]) for x in rows if x[0].strip() in ("copy", "fill"))
    if total <= 0 or "op_share" not in r:
        sys.exit("overhead.py: no op times (is this bfit_bench from a batchfit with BFIT_OPTIME?)")
    return step_ms, step_ms * float(r["op_share"]), cf / total


def verbose_run(exe, model, batch, threads):
    """(oneDNN compute ms, reorder ms) per step."""
    r, err = bench(exe, model, batch, threads, {"ONEDNN_VERBOSE": "1"})
    steps = int(r["warmup"]) + int(r["reps"]) * int(r["steps"])
    comp = reo = 0.0
    for l in err.splitlines():
        f = l.split(",")
        if len(f) > 4 and f[0] == "onednn_verbose" and f[1] == "exec":
            try:
                ms = float(f[-1])
            except ValueError:
                continue
            if f[3] == "reorder":
                reo += ms
            else:
                comp += ms
    return comp / steps, reo / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="cnn:128,cnn:512,mlp:128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--bfit-bench", default=os.path.join(ROOT, "build", "bench", "bfit_bench"))
    a = ap.parse_args()
    models = [(m.split(":")[0], int(m.split(":")[1])) for m in a.models.split(",")]
    res = {}
    for pair in range(a.pairs):
        for model, batch in models:
            step, ops, cf = optime_run(a.bfit_bench, model, batch, a.threads)
            comp, reo = verbose_run(a.bfit_bench, model, batch, a.threads)
            parts = {"onednn": comp, "reorder": reo, "ours": ops * (1 - cf) - comp - reo, "copy": ops * cf,
                     "outside": step - ops}
            over = (reo + parts["copy"] + parts["outside"]) / (comp + parts["ours"])
            res.setdefault((model, batch), []).append((step, parts, over))
            print(f"pair={pair + 1} model={model} batch={batch} step_ms={step:.2f} " +
                  " ".join(f"{k}_ms={v:.2f}" for k, v in parts.items()) + f" overhead={over:.3f}", flush=True)
    print(f"\n{a.threads} threads, medians of {a.pairs} pairs of processes; shares of the step\n")
    print("| model | batch | step ms | oneDNN compute | reorders | ours | copies, fills | outside ops | overhead |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (model, batch), rs in res.items():
        step = statistics.median(x[0] for x in rs)
        sh = {k: statistics.median(x[1][k] / x[0] for x in rs) for k in rs[0][1]}
        print(f"| {model} | {batch} | {step:.2f} | " + " | ".join(f"{100 * sh[k]:.1f}%" for k in sh) +
              f" | {100 * statistics.median(x[2] for x in rs):.1f}% |")


if __name__ == "__main__":
    main()
