#!/usr/bin/env python3
"""dist_bench.py - data-parallel scaling on this machine: training samples/s
with 1 process and with N processes under mpirun (one thread each), the
scaling efficiency, and the time per step in the gradient sum (allreduce)
and in the ranks' exchanges. Medians of --runs runs, alternating the
configurations so that a change of the machine's load hits both alike.

  bench/dist_bench.py --batchfit build/batchfit [--model mlp] [--batch 128]
                      [--samples 8192] [--ranks 2] [--runs 5] [--mpirun-args ARGS] [--json out.json]

samples/s is rank 0's: every sample of every step over the steps' wall time
(evaluation excluded: --eval-samples 100). The figures in
docs/distributed.md came from this script."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def one_run(args, ranks, tmp, i):
    log = os.path.join(tmp, "r%d-%d.jsonl" % (ranks, i))
    cmd = [args.batchfit, "train", "--model", args.model, "--batch", str(args.batch), "--epoch-samples",
           str(args.samples), "--eval-samples", "100", "--threads", "1", "--quiet", "--json", "--log", log]
    if ranks > 1:
        cmd = [shutil.which("mpirun"), "--oversubscribe", "-np", str(ranks)] + args.mpirun_args.split() + cmd
        if os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    steps = [json.loads(line) for line in open(log) if '"event":"step"' in line]
    steps = steps[2:]  # the first steps set the sizes up
    row = {"samples_per_s": res["samples"] / res["train_seconds"], "steps": res["steps"]}
    if ranks > 1:
        row["allreduce_ms"] = 1000 * statistics.median(s["allreduce_seconds"] for s in steps)
        # the collective's own cost: a step where neither rank was descheduled
        row["allreduce_min_ms"] = 1000 * min(s["allreduce_seconds"] for s in steps)
        row["comm_ms"] = 1000 * statistics.median(s["comm_seconds"] for s in steps)
        # the slower rank's own compute (its micro-steps) in a step
        row["rank_compute_ms"] = 1000 * statistics.median(max(q["seconds"] for q in s["ranks"]) for s in steps)
        row["step_ms"] = 1000 * statistics.median(s["seconds"] for s in steps)
        row["shares"] = steps[-1]["ranks"]
    else:
        row["step_ms"] = 1000 * statistics.median(s["seconds"] for s in steps)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batchfit", required=True)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mpirun-args", default="", help="more mpirun options, e.g. '--mca mpi_yield_when_idle 1'")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        sys.exit("dist_bench: mpirun not found (apt-get install openmpi-bin)")
    tmp = tempfile.mkdtemp(prefix="bfit-dist-bench-")
    rows = {1: [], args.ranks: []}
    try:
        for i in range(args.runs):
            for n in rows:
                rows[n].append(one_run(args, n, tmp, i))
                print("run %d, %d rank(s): %.0f samples/s" % (i + 1, n, rows[n][-1]["samples_per_s"]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda n, k: statistics.median(r[k] for r in rows[n])
    one, many = med(1, "samples_per_s"), med(args.ranks, "samples_per_s")
    summary = {
        "model": args.model, "batch": args.batch, "samples": args.samples, "runs": args.runs, "ranks": args.ranks,
        "samples_per_s_1": one, "samples_per_s_n": many, "speedup": many / one,
        "efficiency": many / (args.ranks * one), "step_ms_1": med(1, "step_ms"),
        "step_ms_n": med(args.ranks, "step_ms"), "allreduce_ms": med(args.ranks, "allreduce_ms"),
        "comm_ms": med(args.ranks, "comm_ms"), "allreduce_min_ms": med(args.ranks, "allreduce_min_ms"),
        "rank_compute_ms": med(args.ranks, "rank_compute_ms"),
        "mpirun_args": args.mpirun_args,
        "load_average": os.getloadavg(), "all_runs": {str(k): v for k, v in rows.items()},
    }
    print("\n| ranks | samples/s (median of %d) | step ms | slower rank's compute ms | allreduce ms/step | "
          "exchanges+allreduce ms/step |" % args.runs)
    print("|---|---|---|---|---|---|")
    print("| 1 | %.0f | %.1f | %.1f | - | - |" % (one, summary["step_ms_1"], summary["step_ms_1"]))
    print("| %d | %.0f | %.1f | %.1f | %.2f | %.2f |" % (args.ranks, many, summary["step_ms_n"],
                                                        summary["rank_compute_ms"], summary["allreduce_ms"],
                                                        summary["comm_ms"]))
    print("\nspeed-up %.2f, scaling efficiency %.0f%%; the fastest allreduce of a run (median over runs) %.2f ms; "
          "load average %.1f" % (summary["speedup"], 100 * summary["efficiency"], summary["allreduce_min_ms"],
                                 summary["load_average"][0]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
