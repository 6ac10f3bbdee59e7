#!/usr/bin/python3
"""time_to_acc.py - time to a target test accuracy, batchfit against PyTorch,
in one run (issue 16's measurement).

    bench/time_to_acc.py [--model models/cnn.cfg] [--batches 32,64,128,256,512]
                         [--target 0.91] [--threads 2] [--sides torch,fixed,auto]
                         [--bfit-tta PATH] [key=value ...]

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


def cell(r):
    if r is None:
        return "-"
    t = float(r["time_s"])
    return f"{t:.1f} s" if r["reached"] == "1" else f"not reached ({t:.1f} s, {float(r['acc']) * 100:.2f}%)"


def best(rs):
    """The fastest side that reached the target, as (time, batch) or None."""
    ok = [(float(r["time_s"]), r["batch"]) for r in rs if r and r["reached"] == "1"]
    return min(ok) if ok else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/cnn.cfg")
    ap.add_argument("--batches", default="32,64,128,256,512")
    ap.add_argument("--target", default="0.91")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--sides", default="torch,fixed,auto")
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
    rows = []
    for b in a.batches.split(","):
        t = run(["/usr/bin/python3", os.path.join(HERE, "torch_tta.py"), a.model, b] + keys, tenv, "torch") \
            if "torch" in sides else None
        f = run([a.bfit_tta, a.model, b] + keys, os.environ, "batchfit") if "fixed" in sides else None
        rows.append((b, t, f))
    auto = run([a.bfit_tta, a.model, "auto"] + keys, os.environ, "batchfit") if "auto" in sides else None
    blas = next((r["blas"] for _, r, _ in rows if r), "-")
    print(f"\n| batch | PyTorch ({blas}) | batchfit |")
    print("|---|---:|---:|")
    for b, t, f in rows:
        print(f"| {b} | {cell(t)} | {cell(f)} |")
    if auto:
        print(f"| auto (last E {auto['last_E']}, {auto['changes']} changes) | | {cell(auto)} |")
    bt, bf = best([t for _, t, _ in rows]), best([f for _, _, f in rows])
    if auto and auto["reached"] == "1":
        at = float(auto["time_s"])
        if bt:
            print(f"\nbatchfit auto / PyTorch best (batch {bt[1]}): {at / bt[0]:.2f} of its time "
                  f"({bt[0] / at:.2f}x faster)")
        if bf:
            print(f"batchfit auto / batchfit best fixed (batch {bf[1]}): {at / bf[0]:.2f} of its time")


if __name__ == "__main__":
    main()
