#!/usr/bin/python3
"""time_to_acc.py - time to a target test accuracy, batchfit against PyTorch,
in one run (issue 16's measurement).

    bench/time_to_acc.py [--model models/cnn.cfg] [--batches 32,64,128,256,512]
                         [--target 0.91] [--threads 2] [--sides torch,fixed,auto]
                         [--seeds 1] [--bfit-tta PATH] [key=value ...]

For each batch in --batches: PyTorch (bench/torch_tta.py, on OpenBLAS when it
is installed: LD_LIBRARY_PATH selects it for the peer's process only) and
batchfit with that fixed batch (bfit_tta); then batchfit with `--batch auto`.
Every side uses the same recipe: SGD with momentum 0.9 and weight decay 5e-4,
lr 0.05 for a batch of 128 scaled by the linear rule, no augmentation, the
whole test split evaluated every 6000 training samples (not timed). The time is
that of the training steps alone. key=value pairs go to both sides (see the
two programs' headers). Prints every side's result line, then a markdown table
with the ratios: batchfit auto against PyTorch's best batch and against
batchfit's best fixed batch.

schedule=cosine (over max_epochs) and full=1 (every run trains the whole
max_epochs, so each side's final accuracy compares on the same budget; the
time to the target is still where it first reached it) go to both sides;
with full=1 a second table gives the final test accuracies.

--seeds 1,2,3 runs every side once per seed (the seed draws the initial
weights and the sample order), in the order seed-major, so that slow
minutes of the machine spread over all sides. A time to the target moves by
a third from seed to seed (the test accuracy crosses 91% on a plateau), so
one seed's best fixed batch is partly that seed's luck; with several seeds
each cell is the median over the seeds, a run that never reaches the target
counting as slower than every run that does.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread"


def parse_result(out, side):
    """The key=value pairs of a side's result line, or None if it printed none."""
    for line in out.splitlines():
        if line.startswith(f"side={side} "):
            return dict(kv.split("=", 1) for kv in line.split())
    return None


def run(cmd, env, side):
    sys.stdout.write("# " + " ".join(cmd) + "\n")
    sys.stdout.flush()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        sys.exit(f"time_to_acc.py: {cmd[0]} exited {p.returncode}")
    r = parse_result(p.stdout, side)
    if r is None:
        sys.exit(f"time_to_acc.py: no side={side} line from {cmd[0]}")
    return r


def median_run(rs):
    """The median of one side's runs over the seeds (a run that did not reach
    the target sorts after every run that did), or None without runs."""
    if not rs:
        return None
    key = [(r["reached"] != "1", float(r["time_s"])) for r in rs]
    order = sorted(range(len(rs)), key=lambda i: key[i])
    n = len(rs)
    if n % 2:
        return rs[order[n // 2]]
    if rs[order[n // 2]]["reached"] != "1":  # halfway to a run that never got there: not reached
        return rs[order[n // 2]]
    r = dict(rs[order[n // 2]])
    r["time_s"] = str((float(rs[order[n // 2 - 1]]["time_s"]) + float(r["time_s"])) / 2)
    return r


def cell(rs):
    r = median_run(rs)
    if r is None:
        return "-"
    t = float(r["time_s"])
    c = f"{t:.1f} s" if r["reached"] == "1" else f"not reached ({t:.1f} s, {float(r['final_acc']) * 100:.2f}%)"
    if len(rs) > 1:
        c += " (" + " / ".join(f"{float(x['time_s']):.1f}" + ("" if x["reached"] == "1" else "*") for x in rs) + ")"
    return c


def acc_cell(rs):
    """The median final test accuracy over the seeds, with the range."""
    if not rs:
        return "-"
    a = sorted(float(x["final_acc"]) * 100 for x in rs)
    m = a[len(a) // 2] if len(a) % 2 else (a[len(a) // 2 - 1] + a[len(a) // 2]) / 2
    return f"{m:.2f}%" + (f" ({a[0]:.2f}-{a[-1]:.2f})" if len(a) > 1 else "")


def best(rss):
    """The fastest side (by its median) that reached the target, as (time, batch) or None."""
    ok = [(float(m["time_s"]), m["batch"]) for m in map(median_run, rss) if m and m["reached"] == "1"]
    return min(ok) if ok else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/cnn.cfg")
    ap.add_argument("--batches", default="32,64,128,256,512")
    ap.add_argument("--target", default="0.91")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--sides", default="torch,fixed,auto")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds; every side runs once per seed")
    ap.add_argument("--bfit-tta", help="a built bfit_tta (default: build it into $BFIT_BENCH_BUILD or build-bench)")
    ap.add_argument("keys", nargs="*", help="key=value for both sides")
    a = ap.parse_args()
    sides = a.sides.split(",")
    if not a.bfit_tta:
        d = os.environ.get("BFIT_BENCH_BUILD", os.path.join(ROOT, "build-bench"))
        subprocess.run(["cmake", "-S", ROOT, "-B", d, "-DCMAKE_BUILD_TYPE=Release", "-DBFIT_TESTS=OFF"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", d, "--target", "bfit_tta", "-j", str(os.cpu_count())], check=True,
                       stdout=subprocess.DEVNULL)
        a.bfit_tta = os.path.join(d, "bench", "bfit_tta")
    keys = [f"target={a.target}", f"threads={a.threads}"] + a.keys
    tenv = dict(os.environ, OPENBLAS_NUM_THREADS=a.threads)
    if os.path.isdir(OPENBLAS):
        tenv["LD_LIBRARY_PATH"] = OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"]
                                              if os.environ.get("LD_LIBRARY_PATH") else "")
    print(f"# model {a.model}, target {a.target}, {a.threads} threads; peer BLAS: "
          f"{'openblas (LD_LIBRARY_PATH=' + OPENBLAS + ')' if 'LD_LIBRARY_PATH' in tenv else 'system default'}")
    batches = a.batches.split(",")
    rows = {b: ([], []) for b in batches}
    autos = []
    for seed in a.seeds.split(","):
        sk = keys + [f"seed={seed}"]
        for b in batches:
            if "torch" in sides:
                rows[b][0].append(run(["/usr/bin/python3", os.path.join(HERE, "torch_tta.py"), a.model, b] + sk,
                                      tenv, "torch"))
            if "fixed" in sides:
                rows[b][1].append(run([a.bfit_tta, a.model, b] + sk, os.environ, "batchfit"))
        if "auto" in sides:
            autos.append(run([a.bfit_tta, a.model, "auto"] + sk, os.environ, "batchfit"))
    blas = next((t[0]["blas"] for t, _ in rows.values() if t), "-")
    print(f"\n| batch | PyTorch ({blas}) | batchfit |")
    print("|---|---:|---:|")
    for b in batches:
        print(f"| {b} | {cell(rows[b][0])} | {cell(rows[b][1])} |")
    auto = median_run(autos)
    if auto:
        es = ", ".join(f"{x['last_E']}" for x in autos)
        print(f"| auto (last E {es}; changes {', '.join(x['changes'] for x in autos)}) | | {cell(autos)} |")
    if "full=1" in a.keys:
        print(f"\nTest accuracy at the end of the budget (max_epochs), median over the seeds (range):\n")
        print(f"| batch | PyTorch | batchfit |\n|---|---:|---:|")
        for b in batches:
            print(f"| {b} | {acc_cell(rows[b][0])} | {acc_cell(rows[b][1])} |")
        if autos:
            print(f"| auto | | {acc_cell(autos)} |")
    bt, bf = best([t for t, _ in rows.values()]), best([f for _, f in rows.values()])
    if auto and auto["reached"] == "1":
        at = float(auto["time_s"])
        if bt:
            print(f"\nbatchfit auto / PyTorch best (batch {bt[1]}): {at / bt[0]:.2f} of its time "
                  f"({bt[0] / at:.2f}x faster)")
        if bf:
            print(f"batchfit auto / batchfit best fixed (batch {bf[1]}): {at / bf[0]:.2f} of its time")


if __name__ == "__main__":
    main()
