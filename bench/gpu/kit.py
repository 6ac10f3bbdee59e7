#!/usr/bin/python3
"""kit.py - the proof kit's bookkeeping (bench/gpu/run.sh calls it): reading
what a phase produced, judging it, and the summary table.

    kit.py row OUT PHASE CHECK RESULT [FIGURES]     append a row by hand
    kit.py plan OUT                                 plan = measured rows from plan/plan.jsonl
    kit.py cotenant OUT EXPECTED_SAMPLES            rows from cotenant/train.jsonl and cotenant.jsonl
    kit.py ways OUT                                 the Deelvin table from ways/*.json*
    kit.py speed OUT                                samples/s ratios from speed/*.jsonl
    kit.py finders OUT                              steps and seconds from finders/*
    kit.py summary OUT                              OUT/summary.md from every phase's rows

A phase's rows are OUT/PHASE/rows.jsonl: {"phase", "check", "result",
"figures"}; result is ok, FAIL, skipped or dry-run (the logic ran on the
CPU: its figures say nothing about a GPU). Tables of figures go to
OUT/PHASE/table.md and into the summary after the rows.
"""
import glob
import json
import os
import sys

GIB = 2**30


def rows_path(out, phase):
    os.makedirs(os.path.join(out, phase), exist_ok=True)
    return os.path.join(out, phase, "rows.jsonl")


def add_row(out, phase, check, result, figures=""):
    with open(rows_path(out, phase), "a") as f:
        f.write(json.dumps({"phase": phase, "check": check, "result": result, "figures": figures}) + "\n")


def table(out, phase, title, head, body):
    with open(os.path.join(out, phase, "table.md"), "a") as f:
        f.write(f"\n#### {title}\n\n| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        for r in body:
            f.write("| " + " | ".join(str(c) for c in r) + " |\n")


def lines(path):
    """JSON objects of a JSON-lines file (other lines skipped); [] if absent"""
    objs = []
    if os.path.exists(path):
        for ln in open(path):
            ln = ln.strip()
            if ln.startswith("{"):
                try:
                    objs.append(json.loads(ln))
                except ValueError:
                    pass
    return objs


def dry(out):
    return os.path.exists(os.path.join(out, "DRY_RUN"))


def verdict(out, good):
    return "dry-run" if dry(out) and good else "ok" if good else "FAIL"


def gib(b):
    return f"{b / GIB:.2f} GiB"


# ---- phases ------------------------------------------------------------------------

def do_plan(out):
    res = lines(os.path.join(out, "plan", "plan.jsonl"))
    ran = [r for r in res if r.get("ok")]
    equal = [r for r in ran if r.get("equal")]
    oom = [r for r in res if not r.get("ok") and r.get("out_of_memory")]
    err = [r for r in res if not r.get("ok") and not r.get("out_of_memory")]
    add_row(out, "plan", "planned peak = measured peak, to the byte", verdict(out, ran and len(equal) == len(ran)
                                                                          and not err),
            f"{len(equal)} of {len(ran)} equal; {len(oom)} refused as out of memory; {len(err)} errors")
    table(out, "plan", "Plan against the arena's measured peak", ["model", "precision", "m", "planned", "measured",
                                                                  "equal", "differ"],
          [[r["model"], r["precision"], r["m"], r.get("planned", "-"), r.get("measured", "-"),
            "yes" if r.get("equal") else "NO" if r.get("ok") else "-",
            json.dumps(r.get("differ", {})) if r.get("ok") else r.get("error", "")[:80]] for r in res])


def do_cotenant(out, expected):
    log = lines(os.path.join(out, "cotenant", "train.jsonl"))
    cot = lines(os.path.join(out, "cotenant", "cotenant.jsonl"))
    end = next((e for e in log if e.get("event") == "end"), None)
    err = next((e for e in log if e.get("event") == "error"), None)
    mem = [e for e in log if e.get("event") == "memory"]
    caps = [e["capacity"] for e in mem]
    down = sum(1 for a, b in zip(caps, caps[1:]) if b < a) + (1 if caps else 0)
    changes = [e for e in log if e.get("event") == "batch_change"]
    shrink = [e for e in changes if e.get("m", 0) < e.get("prev_m", e.get("m", 0))]
    grow = [e for e in changes if e.get("m", 0) > e.get("prev_m", e.get("m", 0))]
    steps = [e for e in log if e.get("event") == "step"]
    ms = [e["m"] for e in steps]
    mon = [e for e in log if e.get("event") == "monitor"]
    others = max([e.get("others_bytes", 0) for e in mon] or [0])
    ooms = end.get("ooms", 0) if end else 0
    samples = end.get("samples", 0) if end else 0
    add_row(out, "cotenant", "the run finished with every sample", verdict(out, end is not None and samples == expected),
            f"{samples} of {expected} samples" + (f"; failed: {err.get('message', '')[:120]}" if err else ""))
    add_row(out, "cotenant", "memory changes seen and followed", verdict(out, len(mem) > 0),
            f"{len(mem)} memory events ({down} down); micro-batch {min(ms) if ms else '-'}..{max(ms) if ms else '-'}, "
            f"{len(shrink)} shrinks, {len(grow)} grows; {ooms} out-of-memory recovered")
    add_row(out, "cotenant", "the co-tenant seen by the monitor", verdict(out, others > 0 or dry(out)),
            f"others' memory up to {gib(others)} in {len(mon)} monitor events; co-tenant actions {len(cot)}")
    table(out, "cotenant", "Co-tenant and run, in time order", ["what", "at", "detail"],
          [["co-tenant", f"{c.get('t')} s", f"{c.get('action')}: holds {gib(c.get('held', 0))}, "
                                               f"free {gib(c.get('free', 0))}"] for c in cot] +
          [[e["event"], f"step {e.get('step')}", (f"m {e.get('prev_m')} -> {e.get('m')} ({e.get('reason', '')})"
                                                  if e["event"] == "batch_change" else
                                                  f"capacity {gib(e.get('capacity', 0))}")]
           for e in log if e.get("event") in ("batch_change", "memory", "oom")])


def named(way, row):
    """The way's name, with the convolution algorithms where plan chose them per row."""
    algo = (row or {}).get("conv_algo")
    return f"{way} ({algo} conv)" if algo else way


def do_ways(out):
    bf = {}
    try:
        for w in json.load(open(os.path.join(out, "ways", "batchfit.json")))["ways"]:
            bf[w["way"]] = w
    except (OSError, ValueError, KeyError):
        pass
    pt = {r["mode"]: r for r in lines(os.path.join(out, "ways", "torch.jsonl")) if r.get("phase") == "ways"}
    runs = {r["way"]: r for r in lines(os.path.join(out, "ways", "runs.jsonl"))}
    pairs = [("f32", "f32", "PyTorch f32"), ("amp", "bf16", "PyTorch AMP (bf16)"),
             ("amp_ckpt", "bf16 + recompute blocks", "PyTorch AMP + checkpointing")]
    body = []
    for mode, way, label in pairs:
        p, b = pt.get(mode), bf.get(way)
        pb, bb = (p or {}).get("batch", 0), (b or {}).get("micro_batch", 0)
        run = runs.get(way, {})
        body.append([label, pb or "-", gib(p["peak_bytes"]) if p and p.get("peak_bytes") else "-", named(way, b), bb or "-",
                     f"{bb / pb:.2f}" if pb and bb else "-", run.get("result", "not run")])
    for extra in ("lean f32", "bf16 + recompute auto"):
        if extra in bf:
            body.append(["", "", "", named(extra, bf[extra]), bf[extra]["micro_batch"], "",
                         runs.get(extra, {}).get("result", "not run")])
    good = bool(bf) and all(r.get("result") == "ran" for r in runs.values()) and bool(runs)
    add_row(out, "ways", "batchfit's largest batches run at the cap; PyTorch's found",
            verdict(out, good and len(pt) == 3),
            "; ".join(f"{r[0] or r[3]}: PyTorch {r[1]}, batchfit {r[4]}" for r in body[:3]))
    table(out, "ways", "Largest batch within the cap (Deelvin's table on one GPU)",
          ["PyTorch", "batch", "max_memory_allocated", "batchfit way", "micro-batch", "batchfit / PyTorch",
           "batchfit step at that size"], body)


def do_speed(out):
    bf = lines(os.path.join(out, "speed", "batchfit.jsonl"))
    pt = lines(os.path.join(out, "speed", "torch.jsonl"))
    body, ratios = [], []
    for b in bf:
        p = next((q for q in pt if q.get("model") == b.get("pt_model", b["model"]) and
                  q.get("precision") == b["precision"].lower() and q.get("batch") == b["m"]), None)
        r = b.get("samples_per_s", 0) / p["samples_per_s"] if p and p.get("ok") and b.get("ok") else None
        if r:
            ratios.append(r)
        body.append([b["model"], b["precision"], b["m"], f"{b.get('samples_per_s', 0):.1f}" if b.get("ok") else
                     b.get("error", "")[:60], f"{p['samples_per_s']:.1f}" if p and p.get("ok") else "-",
                     f"{r:.2f}" if r else "-"])
    add_row(out, "speed", "samples/s against PyTorch eager, same batch and precision",
            verdict(out, bool(ratios)), ", ".join(f"{x[0]} {x[1]}: {x[5]}" for x in body))
    table(out, "speed", "Training samples/s (median step)", ["model", "precision", "batch", "batchfit",
                                                              "PyTorch eager", "batchfit / PyTorch"], body)


def do_finders(out):
    rows = lines(os.path.join(out, "finders", "torch.jsonl"))
    try:
        bf = json.load(open(os.path.join(out, "finders", "batchfit.json")))
        secs = float(open(os.path.join(out, "finders", "batchfit.seconds")).read())
        rows.insert(0, {"finder": "batchfit find --largest-only", "batch": bf["largest"]["batch"],
                        "steps": bf["steps"]["total"], "seconds": round(secs, 2)})
    except (OSError, ValueError, KeyError) as e:
        rows.insert(0, {"finder": "batchfit find", "skipped": f"no result ({e})"})
    ran = [r for r in rows if "skipped" not in r]
    add_row(out, "finders", "largest batch: batchfit find against the PyTorch finders", verdict(out, bool(ran)),
            "; ".join(f"{r['finder']}: " + (f"{r['batch']} in {r['steps']} steps, {r['seconds']} s" if "skipped"
                                               not in r else r["skipped"]) for r in rows))
    table(out, "finders", "Finding the largest batch", ["finder", "batch", "training steps", "seconds"],
          [[r["finder"], r.get("batch", "-"), r.get("steps", "-"), r.get("seconds", r.get("skipped", ""))]
           for r in rows])


def do_summary(out):
    phases = ["build", "test", "plan", "cotenant", "ways", "speed", "finders"]
    md = ["# GPU proof kit: summary", ""]
    if dry(out):
        md += ["**Dry run on the CPU device**: every phase's logic ran, with tiny sizes; no figure here says "
               "anything about a GPU.", ""]
    md += ["| phase | check | result | figures |", "|---|---|---|---|"]
    for ph in phases:
        for r in lines(rows_path(out, ph)):
            md.append(f"| {r['phase']} | {r['check']} | {r['result']} | {r['figures']} |")
    for ph in phases:
        t = os.path.join(out, ph, "table.md")
        if os.path.exists(t):
            md += ["", f"### {ph}", open(t).read().rstrip()]
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    bad = [r for ph in phases for r in lines(rows_path(out, ph)) if r["result"] == "FAIL"]
    return 1 if bad else 0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == "row":
        add_row(out, *sys.argv[3:7])
    elif cmd == "plan":
        do_plan(out)
    elif cmd == "cotenant":
        do_cotenant(out, int(sys.argv[3]))
    elif cmd == "ways":
        do_ways(out)
    elif cmd == "speed":
        do_speed(out)
    elif cmd == "finders":
        do_finders(out)
    elif cmd == "summary":
        sys.exit(do_summary(out))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
