#!/usr/bin/env python3
"""docs_plan.py BATCHFIT SRC - every `$ batchfit plan ...` command that
README.md and docs/*.md show is run, and its output must be the lines the
doc shows under it, exactly ("..." in the doc stands for any lines), with
the exit status a following `$ echo $?` shows (else 0). A plan is computed,
not measured, so what a doc shows of it cannot drift without this failing;
the docs' measured output (training, find) is re-run by hand when it
changes (docs/train.md says how it was made)."""
import glob
import os
import re
import shlex
import subprocess
import sys


def blocks(path):
    """(line number, command, shown lines, shown status) for each plan command."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ batchfit plan"):
            i += 1
            continue
        start, cmd, shown = i + 1, lines[i][2:], []
        i += 1
        while i < len(lines) and not lines[i].startswith("```") and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        status = 0
        if i + 1 < len(lines) and lines[i] == "$ echo $?":
            status = int(lines[i + 1])
        out.append((start, cmd, shown, status))
    return out


def matches(shown, got):
    """shown (with "..." for any run of lines) against got, line by line."""
    pat = "".join(r"(?:.*\n)*?" if s == "..." else re.escape(s) + r"\n" for s in shown)
    return re.fullmatch(pat, "".join(g + "\n" for g in got)) is not None


def main():
    bf, src = sys.argv[1], sys.argv[2]
    docs = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    fails = checked = 0
    for doc in docs:
        for line, cmd, shown, status in blocks(doc):
            args = shlex.split(cmd)
            p = subprocess.run([bf] + args[1:], cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=600)
            got = p.stdout.rstrip("\n").split("\n")
            checked += 1
            where = "%s:%d: %s" % (os.path.relpath(doc, src), line, cmd)
            if p.returncode != status:
                print("FAIL %s: exit %d, the doc shows %d" % (where, p.returncode, status))
                fails += 1
            elif not matches(shown, got):
                print("FAIL %s: the output differs from the doc's; it is:" % where)
                print("\n".join("  | " + g for g in got))
                fails += 1
    if checked == 0:
        print("FAIL: no plan command found in the docs")
        fails += 1
    if fails:
        print("%d of %d plan commands in the docs differ from their output" % (fails, checked))
        return 1
    print("all %d plan commands in the docs print what the docs show" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
