#!/usr/bin/env python3
"""docs_check.py BATCHFIT SRC - the commands whose output README.md and
docs/*.md show and that print no measurement are run, and their output must
be the lines the doc shows under them, exactly ("..." in the doc stands for
any lines, "[...]" in a line for any text), with the exit status a following `$ echo $?` or an
"(exit status N)" line shows (else 0 for a plan, non-zero for an error):
every `$ batchfit plan ...` (a plan is computed, not measured) and every
command whose output is an error (`batchfit: error: ...` first), where the
files it names are here. What these docs show cannot drift without this
failing; the docs' measured output (training, find) is re-run by hand when
it changes.

The docs' output comes from a CPU with AVX-512, whose oneDNN kernels (and
so workspaces, and so plans) differ from an AVX2 CPU's. Elsewhere (or under
ONEDNN_MAX_CPU_ISA) every figure, a number with its unit, is compared as
"a figure" and runs of spaces as one: the lines, their words and the exit
status must still be the doc's. A block whose fence is preceded by the line
"<!-- docs_check: figures vary by CPU -->" has its figures compared as
figures on every CPU: its output came from another CPU than the docs'
(its text says which), so the figures cannot be the doc's there."""
import glob
import os
import re
import shlex
import subprocess
import sys


def checked(cmd, shown):
    """A plan, or a command that fails at once (its output starts with an error)."""
    return cmd.startswith("batchfit plan") or (shown and shown[0].startswith("batchfit: error:"))


LOOSE = "<!-- docs_check: figures vary by CPU -->"


def loose_block(lines, i):
    """Whether the command at line i sits in a fenced block marked LOOSE."""
    j = i
    while j > 0 and not lines[j].startswith("```"):
        j -= 1
    return j > 0 and lines[j - 1].strip() == LOOSE


def blocks(path):
    """(line number, command, shown lines, shown status, loose) for each command checked."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ batchfit "):
            i += 1
            continue
        loose = loose_block(lines, i)
        start, cmd, shown = i + 1, lines[i][2:], []
        i += 1
        while i < len(lines) and not lines[i].startswith("```") and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        status = None
        if shown and re.fullmatch(r"\(exit status \d+\)", shown[-1]):
            status = int(shown.pop()[13:-1])
        elif i + 1 < len(lines) and lines[i] == "$ echo $?":
            status = int(lines[i + 1])
        if not cmd.endswith("\\") and checked(cmd, shown):
            out.append((start, cmd, shown, status, loose))
    return out


def files_here(args, src):
    """Whether every file the command names (weights, data, specs, ONNX
    models, logs, token files) is in src: the weights files a doc's earlier run made (or
    the ONNX file its export wrote) are not."""
    for i, a in enumerate(args):
        named = re.search(r"\.(safetensors|csv|cfg|jsonl|onnx|bin)$", a) or (i and args[i - 1] == "--resume")
        if named and not os.path.exists(os.path.join(src, a)):
            return False
    return True


def status_ok(rc, status, shown):
    """rc is the status shown; with none shown, non-zero exactly for an error."""
    if status is not None:
        return rc == status
    return (rc != 0) == bool(shown and shown[0].startswith("batchfit: error:"))


def docs_cpu():
    """Whether this CPU runs the oneDNN kernels the docs' output came from
    (avx512_core: F, BW, VL, DQ) with nothing capping them."""
    if os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA"):
        return False
    try:
        flags = [l for l in open("/proc/cpuinfo") if l.startswith("flags")][0].split()
    except (OSError, IndexError):
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?(?: ?(?:B|KiB|MiB|GiB|TiB|KB|MB|GB)\b)?")


def masked(line):
    """line with each figure a '#' and runs of spaces one space."""
    return re.sub(r" +", " ", FIGURE.sub("#", line))


def line_pattern(s):
    """One shown line: "..." alone stands for any lines, "[...]" in a line for
    any text (what depends on the build or the machine: the device's why)."""
    if s == "...":
        return r"(?:.*\n)*?"
    return ".*".join(re.escape(part) for part in s.split("[...]")) + r"\n"


def matches(shown, got, exact):
    """shown against got, line by line (figures masked unless exact)."""
    if not exact:
        shown, got = [masked(s) for s in shown], [masked(g) for g in got]
    pat = "".join(line_pattern(s) for s in shown)
    return re.fullmatch(pat, "".join(g + "\n" for g in got)) is not None


def main():
    bf, src = sys.argv[1], sys.argv[2]
    docs = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    fails = count = 0
    exact = docs_cpu()
    if not exact:
        print("this CPU is not the docs' (AVX-512): figures compared as figures, the rest exactly")
    for doc in docs:
        for line, cmd, shown, status, loose in blocks(doc):
            args = shlex.split(cmd)
            if not files_here(args, src):
                continue
            p = subprocess.run([bf] + args[1:], cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=600)
            got = p.stdout.rstrip("\n").split("\n")
            count += 1
            where = "%s:%d: %s" % (os.path.relpath(doc, src), line, cmd)
            if not status_ok(p.returncode, status, shown):
                print("FAIL %s: exit %d, not what the doc shows (%s)" % (where, p.returncode,
                                                                       "no status" if status is None else status))
                fails += 1
            elif not matches(shown, got, exact and not loose):
                print("FAIL %s: the output differs from the doc's; it is:" % where)
                print("\n".join("  | " + g for g in got))
                fails += 1
    if count == 0:
        print("FAIL: no command to check found in the docs")
        fails += 1
    if fails:
        print("%d of %d commands in the docs differ from their output" % (fails, count))
        return 1
    print("all %d commands checked in the docs print what the docs show%s" % (count, "" if exact else
                                                                          " (figures masked)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
