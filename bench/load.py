#!/usr/bin/python3
"""load.py - a training step's speed on a quiet machine and beside a competing
CPU-bound job, for each OpenMP wait setting (issue 30, "under a loaded
machine").

    bench/load.py [--models gpt-nano:8,cnn:128] [--threads 2] [--hogs 2]
                  [--waits default,passive,spin] [--pairs 3] [--bfit-bench PATH]
    bench/load.py --train "ARGS" [--batchfit PATH] [--waits ...] [--pairs 3] [--control N]

Each (model, wait) runs `bfit_bench step MODEL BATCH 5 3 THREADS` in its own
process, first alone, then while --hogs busy-loop processes (nice 0, one per
core by default) compete for the cores; the settings alternate within a pair
so slow minutes of the machine spread over all of them. A wait setting is the
environment the process starts with:

    default   nothing set: the batchfit CLI and Python package choose (see
              docs/performance.md, "A loaded machine"); bfit_bench is a plain
              C program, so libgomp's own default (a long spin) applies
    passive   OMP_WAIT_POLICY=passive: waiting threads sleep at once
    spin      OMP_WAIT_POLICY=active: waiting threads spin
    spinN     GOMP_SPINCOUNT=N: spin N rounds, then sleep (libgomp's default
              without a policy is 300000)

With --train, each run is `batchfit train ARGS` instead (its wall time and
its CPU time, user + system, are what is compared); there `default` is the
command's own choice.

Prints every run's line, then per model and wait the medians: samples/s alone
and loaded, their ratio, and samples per CPU-second alone and loaded (a
setting that burns CPU while waiting shows there). With H hogs on C cores a
process of T threads that wastes nothing gets about C*T/(T+H) cores: the
ratio to expect is that over min(T, C).
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import bench  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WAITS = {"default": {}, "passive": {"OMP_WAIT_POLICY": "passive"}, "spin": {"OMP_WAIT_POLICY": "active"}}


def hogs_start(n):
    return [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(n)]


def hogs_stop(ps):
    for p in ps:
        p.send_signal(signal.SIGKILL)
        p.wait()


def wait_env(w):
    """The environment of a wait setting, or None if it names none."""
    if w in WAITS:
        return WAITS[w]
    if w.startswith("spin") and w[4:].isdigit():
        return {"GOMP_SPINCOUNT": w[4:]}
    return None


def one(exe, model, batch, threads, wait):
    r, _ = bench(exe, model, batch, threads, wait_env(wait), drop=("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
    return float(r["samples_per_s"]), float(r["samples_per_cpu_s"])


def control_cmd(n):
    """--control: a one-thread job of fixed work that is not batchfit's (a
    shell counting to n), whose loaded / alone is what the kernel gives any
    single thread beside the hogs: the yardstick for 1 thread's figure."""
    return ["/bin/sh", "-c", f"i=0; while [ $i -lt {n} ]; do i=$((i+1)); done"]


def one_train(batchfit, args, wait):
    """(wall seconds, CPU seconds) of one `batchfit train ARGS` (ARGS a list:
    the control's command as it is)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(wait_env(wait))
    cmd = args if isinstance(args, list) else [batchfit, "train", *args.split()]
    r0, t0 = os.times(), time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, r1 = time.monotonic() - t0, os.times()
    if p.returncode != 0:
        sys.exit(f"load.py: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return wall, (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)


def train_mode(a, waits):
    """--train: one table row per wait setting, or with --thread-settings per
    --threads setting (the first wait setting for all)."""
    if a.thread_settings:
        kind = "threads"
        rows = [(t, waits[0], f"{a.train} " + " --".join([f"--threads {t.split(':')[0]}"] + t.split(":")[1:]))
                for t in a.thread_settings.split(",")]
    else:
        kind = "wait"
        rows = [(w, w, a.train) for w in waits]
    if a.control:
        rows.append(("control", waits[0], control_cmd(a.control)))
    res = {}
    for pair in range(a.pairs):
        for loaded in (0, 1):
            hogs = hogs_start(a.hogs) if loaded else []
            try:
                for name, w, args in rows:
                    r = one_train(a.batchfit, args, w)
                    res.setdefault((name, loaded), []).append(r)
                    print(f"pair={pair + 1} {kind}={name} loaded={loaded} wall_s={r[0]:.2f} cpu_s={r[1]:.2f}",
                          flush=True)
            finally:
                hogs_stop(hogs)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    best = min(med[(name, 0)][0] for name, _, _ in rows if name != "control")
    print(f"\nbatchfit train {a.train}{' --threads S (wait: ' + waits[0] + ')' if a.thread_settings else ''}\n"
          f"{a.hogs} busy-loop processes beside the loaded runs, {os.cpu_count()} cores; medians of {a.pairs}\n")
    print(f"| {'--threads' if a.thread_settings else 'wait'} | wall alone | wall loaded | loaded / alone | "
          "loaded / best alone | CPU s alone | CPU s loaded |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _, _ in rows:
        (qw, qc), (lw, lc) = med[(name, 0)], med[(name, 1)]
        print(f"| {name} | {qw:.2f} | {lw:.2f} | {lw / qw:.2f} | {lw / best:.2f} | {qc:.2f} | {lc:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt-nano:8,cnn:128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hogs", type=int, default=os.cpu_count())
    ap.add_argument("--waits", default="default,passive,spin")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--bfit-bench", default=os.path.join(ROOT, "build", "bench", "bfit_bench"))
    ap.add_argument("--train", help="time `batchfit train ARGS` instead of bfit_bench's step")
    ap.add_argument("--batchfit", default=os.path.join(ROOT, "build", "batchfit"))
    ap.add_argument("--control", type=int, metavar="N", help="with --train: a row more, a shell loop counting to N "
                    "(one thread of work not ours, timed alone and loaded the same way)")
    ap.add_argument("--thread-settings", help="with --train: each run once per setting, `--threads S` added "
                    "(e.g. 2,1,auto; 2:no-pack adds --no-pack too); the first --waits setting applies")
    a = ap.parse_args()
    models = [(m.split(":")[0], int(m.split(":")[1])) for m in a.models.split(",")]
    waits = a.waits.split(",")
    for w in waits:
        if wait_env(w) is None:
            sys.exit(f"load.py: --waits: unknown setting '{w}' (expected default, passive, spin or spinN)")
    if a.train:
        return train_mode(a, waits)
    res = {}
    for pair in range(a.pairs):
        for loaded in (0, 1):
            hogs = hogs_start(a.hogs) if loaded else []
            try:
                for model, batch in models:
                    for w in waits:
                        r = one(a.bfit_bench, model, batch, a.threads, w)
                        res.setdefault((model, w, loaded), []).append(r)
                        print(f"pair={pair + 1} model={model} batch={batch} wait={w} loaded={loaded} "
                              f"samples_per_s={r[0]:.1f} samples_per_cpu_s={r[1]:.1f}", flush=True)
            finally:
                hogs_stop(hogs)
    print(f"\n{a.threads} threads, {a.hogs} busy-loop processes beside the loaded runs, {os.cpu_count()} cores; "
          f"medians of {a.pairs}\n")
    print("| model | wait | samples/s alone | loaded | loaded / alone | samples/CPU-s alone | loaded |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model, batch in models:
        for w in waits:
            q, l = res[(model, w, 0)], res[(model, w, 1)]
            qs, ls = statistics.median(x[0] for x in q), statistics.median(x[0] for x in l)
            qc, lc = statistics.median(x[1] for x in q), statistics.median(x[1] for x in l)
            print(f"| {model} {batch} | {w} | {qs:.1f} | {ls:.1f} | {ls / qs:.2f} | {qc:.1f} | {lc:.1f} |")


if __name__ == "__main__":
    main()
