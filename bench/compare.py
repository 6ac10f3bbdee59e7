#!/usr/bin/python3
"""compare.py - batchfit against PyTorch, side by side in one run (bench/run.sh
builds bfit_bench and calls this).

For each model and batch size it runs the batchfit side (bfit_bench) and the
PyTorch side (torch_peer.py) in separate processes, PAIRS times each,
alternating which goes first so a change in load hits both; each process
reports the median samples/s of its REPS timed reps, and the table shows the
median over the PAIRS processes. It also measures the f32 matmul GFLOP/s
oneDNN reaches here (the practical limit) and the fraction of it each
batchfit run achieves, and each side's peak resident memory (ru_maxrss of
its process; the largest over the PAIRS runs).

Debian's PyTorch does its dense products through whatever libblas.so.3 its
process loads: the reference BLAS unless something else is selected. The
PyTorch side therefore runs once per BLAS of --peer-blas (by default the
reference BLAS and OpenBLAS, each selected for the peer's process only with
LD_LIBRARY_PATH; OPENBLAS_NUM_THREADS is the threads per side), every peer
process says which BLAS it actually loaded (from /proc/self/maps), and the
ratios and targets are against the better peer of each cell.
"""
import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def kv(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def busy_seconds():
    """CPU seconds all processes have used so far (from /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd, env):
    """Run one measurement; also return the share of the machine other
    processes used meanwhile (0: we had it to ourselves)."""
    b0, c0, t0 = busy_seconds(), children_seconds(), time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    b1, c1, t1 = busy_seconds(), children_seconds(), time.monotonic()
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed:\n{p.stderr}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("side=")]
    r = kv(lines[-1])
    r["foreign"] = max(0.0, ((b1 - b0) - (c1 - c0)) / ((t1 - t0) * os.cpu_count()))
    return r


def run(cmd, env, retries=0, max_foreign=1.0):
    """run_once, repeated up to `retries` times while other processes took
    more than max_foreign of the machine; the least disturbed run counts."""
    best = run_once(cmd, env)
    for _ in range(retries):
        if best["foreign"] <= max_foreign:
            break
        time.sleep(2)
        r = run_once(cmd, env)
        if r["foreign"] < best["foreign"]:
            best = r
    return best


def load():
    return os.getloadavg()[0]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def default_peer_blas():
    lib = "/usr/lib/" + (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")
    return f"refblas={lib}/blas:{lib}/lapack,openblas={lib}/openblas-pthread"


def peer_blas(spec):
    """[(name, LD_LIBRARY_PATH dirs)] of --peer-blas that are installed, and
    a note for each that is not."""
    peers, notes = [], []
    known = dict(i.split("=", 1) for i in default_peer_blas().split(","))
    for item in spec.split(","):
        name, sep, dirs = item.partition("=")
        if not sep and name in known:  # a known BLAS by its name alone
            dirs = known[name]
        elif not sep or not name or not dirs:
            sys.exit(f"compare.py: --peer-blas {spec}: '{item}' is not NAME=DIR[:DIR...] or one of "
                     f"{', '.join(known)}")
        if os.path.exists(os.path.join(dirs.split(":")[0], "libblas.so.3")):
            peers.append((name, dirs))
        else:
            notes.append(f"# peer BLAS {name}: no libblas.so.3 in {dirs.split(':')[0]}: not run "
                         "(scripts/setup.sh --bench installs OpenBLAS)")
    if not peers:
        sys.exit(f"compare.py: none of the BLAS of --peer-blas {spec} is installed")
    return peers, notes


def peer_env(env, dirs, threads):
    """The peer's environment: its BLAS first on the library path, and as
    many BLAS threads as the side has (OpenBLAS would take every core)."""
    ld = dirs + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return dict(env, LD_LIBRARY_PATH=ld, OPENBLAS_NUM_THREADS=str(threads))


def check_blas(r, name, dirs):
    """The peer must have loaded the BLAS it was given, or its figures are
    someone else's."""
    loaded = r.get("blas", "none").split(",")
    want = [os.path.realpath(d) for d in dirs.split(":")]
    if not any(os.path.dirname(os.path.realpath(p)) in want for p in loaded):
        sys.exit(f"compare.py: the peer for BLAS {name} loaded {','.join(loaded)}, not the one in {dirs}")
    return loaded[0]


def model_specs(model, a):
    """The model each side runs: a spec in models/ for both, or for
    onnx:NAME torchvision's NAME (tests/onnx/export.py: 64x64, 10 classes),
    exported to ONNX for batchfit (once; the export is cached) and built as
    the module itself for PyTorch."""
    if not model.startswith("onnx:"):
        spec = os.path.join(ROOT, "models", model + ".cfg")
        return spec, spec
    name = model[5:]
    out = a.onnx_dir or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.bench))), "onnx")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "onnx", "export.py"), out, name],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"compare.py: exporting {name} (tests/onnx/export.py) failed:\n{p.stdout}{p.stderr}")
    return os.path.join(out, name + ".onnx"), model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="the bfit_bench program")
    ap.add_argument("--models", default="mlp,cnn",
                    help="specs in models/ (mlp, cnn, gpt-nano, ...) or onnx:NAME, torchvision's NAME exported")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3, help="processes per side and configuration")
    ap.add_argument("--reps", type=int, default=5, help="timed reps per process")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per process")
    ap.add_argument("--rep-seconds", type=float, default=0.5)
    ap.add_argument("--max-foreign", type=float, default=0.10,
                    help="rerun a measurement when other processes used more than this share of the CPUs")
    ap.add_argument("--retries", type=int, default=3, help="reruns allowed per measurement")
    ap.add_argument("--before", help="another bfit_bench (an older build) to run as a further side, "
                    "for before/after numbers taken under the same conditions")
    ap.add_argument("--onnx-dir", help="where onnx:NAME models are exported (default: onnx/ beside the "
                    "bfit_bench's build)")
    ap.add_argument("--peer-blas", default=default_peer_blas(),
                    help="NAME=DIR[:DIR],...: a PyTorch side per BLAS, with DIR first on its LD_LIBRARY_PATH "
                    "(default: the reference BLAS and OpenBLAS)")
    a = ap.parse_args()
    peers, notes = peer_blas(a.peer_blas)

    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    torch_v = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"# bench/run.sh  {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"# cpu: {cpu_name()}, {os.cpu_count()} cores; threads per side: {a.threads} "
          f"(OMP_NUM_THREADS={a.threads}, torch.set_num_threads({a.threads}))")
    print(f"# peer: PyTorch {torch_v} (/usr/bin/python3); f32; SGD momentum 0.9; synthetic data")
    print(f"# peer BLAS: {', '.join(f'{n} (LD_LIBRARY_PATH={d})' for n, d in peers)}; "
          f"OPENBLAS_NUM_THREADS={a.threads}")
    for n in notes:
        print(n)
    print(f"# per cell: {a.pairs} processes per side (alternating), each {a.warmup} warm-up steps then "
          f"the median of {a.reps} reps of ~{a.rep_seconds} s; the cell is the median of the {a.pairs}")
    print(f"# a measurement during which other processes used more than {100 * a.max_foreign:.0f}% of the CPUs "
          f"is rerun (up to {a.retries} times; the least disturbed counts)")
    print(f"# load average at start: {load():.2f}")
    print()

    # the practical limit: oneDNN's f32 matmul on this machine, same threads
    mm = {}
    for shape in ((512, 1024, 1024), (1024, 1024, 1024)):
        g = [float(run([a.bench, "matmul", *map(str, shape), "7", str(a.threads)], env, a.retries,
                       a.max_foreign)["gflops"]) for _ in range(a.pairs)]
        mm[shape] = statistics.median(g)
    limit = max(mm.values())
    for shape, g in mm.items():
        print(f"oneDNN f32 matmul {shape[0]}x{shape[1]}x{shape[2]}: {g:.1f} GFLOP/s")
    print(f"matmul limit (the larger): {limit:.1f} GFLOP/s")
    print()

    rows, blas_seen = [], {}
    torch_sides = ["torch:" + n for n, _ in peers]
    for model in a.models.split(","):
        spec, peer_spec = model_specs(model, a)
        for batch in map(int, a.batches.split(",")):
            common = [str(batch), str(a.reps), str(a.warmup), str(a.threads), str(a.rep_seconds)]
            progs = {"batchfit": ([a.bench, "step", spec, *common], env),
                     "before": ([a.before or "", "step", spec, *common], env)}
            for (name, dirs), side in zip(peers, torch_sides):
                progs[side] = (["/usr/bin/python3", os.path.join(HERE, "torch_peer.py"), peer_spec, *common],
                               peer_env(env, dirs, a.threads))
            sides = ["batchfit", *torch_sides] + (["before"] if a.before else [])
            res = {k: [] for k in sides}
            loads = []
            for p in range(a.pairs):
                loads.append(load())
                order = sides if p % 2 == 0 else sides[::-1]
                for side in order:
                    r = run(*progs[side], a.retries, a.max_foreign)
                    if side in torch_sides:
                        name, dirs = peers[torch_sides.index(side)]
                        blas_seen[name] = check_blas(r, name, dirs)
                    res[side].append(r)
                    print(f"    {model} {batch} {side}: {float(r['samples_per_s']):.0f}/s, "
                          f"other processes {100 * r['foreign']:.0f}%", file=sys.stderr)
            bf = statistics.median(float(r["samples_per_s"]) for r in res["batchfit"])
            pts = {s: statistics.median(float(r["samples_per_s"]) for r in res[s]) for s in torch_sides}
            best = max(torch_sides, key=lambda s: pts[s])
            flops = float(res["batchfit"][0]["flops_per_sample"])
            rows.append(dict(model=model, batch=batch, bf=bf, pts=pts, best=best[6:], pt=pts[best],
                             ratio=bf / pts[best], gflops=bf * flops / 1e9, frac=bf * flops / 1e9 / limit,
                             flops=flops, rss_bf=max(int(r["maxrss_kib"]) for r in res["batchfit"]) / 1024,
                             rss_pt=max(int(r["maxrss_kib"]) for r in res[best]) / 1024,
                             load=statistics.median(loads),
                             foreign=statistics.median(x["foreign"] for k in sides for x in res[k])))
            r = rows[-1]
            if a.before:
                r["before"] = statistics.median(float(x["samples_per_s"]) for x in res["before"])
            print(f"  {model} batch {batch}: batchfit {bf:.0f}/s, "
                  + ", ".join(f"{s} {pts[s]:.0f}/s" for s in torch_sides)
                  + f", ratio {r['ratio']:.2f} (vs {r['best']}), load {r['load']:.2f}", file=sys.stderr)

    names = [n for n, _ in peers]
    print("| model | batch | batchfit samples/s | " + " | ".join(f"PyTorch+{n} samples/s" for n in names)
          + " | ratio (vs the better peer) | batchfit GFLOP/s | of matmul limit | batchfit peak RSS | "
          "better peer's peak RSS | load | other CPU |")
    print("|---|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['bf']:.0f} | "
              + " | ".join(f"{r['pts'][s]:.0f}" for s in torch_sides)
              + f" | {r['ratio']:.2f}x ({r['best']}) | {r['gflops']:.1f} | {100 * r['frac']:.0f}% | "
              f"{r['rss_bf']:.0f} MiB | {r['rss_pt']:.0f} MiB | {r['load']:.2f} | {100 * r['foreign']:.0f}% |")
    print()
    print("the BLAS each peer loaded (its /proc/self/maps):")
    for n, d in peers:
        print(f"  {n}: {blas_seen.get(n, '?')}")
    if len(names) > 1:
        print("ratios against each peer:")
        for r in rows:
            print(f"  {r['model']} batch {r['batch']}: "
                  + ", ".join(f"{r['bf'] / r['pts'][s]:.2f}x vs {s[6:]}" for s in torch_sides))
    print()
    if a.before:
        print(f"before/after (before: {a.before}, run interleaved with the sides above):")
        print("| model | batch | before samples/s | after samples/s | speedup | before GFLOP/s | after GFLOP/s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['model']} | {r['batch']} | {r['before']:.0f} | {r['bf']:.0f} | {r['bf'] / r['before']:.2f}x | "
                  f"{r['before'] * r['flops'] / 1e9:.1f} | {r['gflops']:.1f} |")
        print()
    seen = set()
    for r in rows:
        if r["model"] not in seen:
            seen.add(r["model"])
            print(f"FLOPs counted per sample, {r['model']}: {r['flops'] / 1e6:.2f} M (linear/conv layers: 2 MACs "
                  "forward, 2 weight gradient, 2 input gradient except the first such layer)")
    print()
    print("targets:")
    for r in rows:
        want = 1.0 if r["batch"] <= 32 else 1.5
        ok = r["ratio"] >= want
        print(f"  {r['model']} batch {r['batch']}: ratio {r['ratio']:.2f}x (vs {r['best']}) vs >= {want:.1f}x: "
              + ("met" if ok else f"MISSED by {100 * (1 - r['ratio'] / want):.0f}%"))
        ok = r["rss_bf"] <= r["rss_pt"]
        print(f"  {r['model']} batch {r['batch']}: peak RSS {r['rss_bf']:.0f} vs {r['rss_pt']:.0f} MiB: "
              + ("met" if ok else "MISSED"))
    for r in rows:
        if r["model"] == "mlp" and r["batch"] == 512:
            ok = r["frac"] >= 0.6
            print(f"  mlp batch 512: {100 * r['frac']:.0f}% of the matmul limit vs >= 60%: "
                  + ("met" if ok else f"MISSED by {100 * (0.6 - r['frac']):.0f} points"))
    print(f"# load average at end: {load():.2f}")


if __name__ == "__main__":
    main()
