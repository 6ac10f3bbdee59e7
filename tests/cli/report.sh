#!/bin/bash
# report.sh - the run report from the outside and in a real browser:
# `batchfit report` exit codes (0 written, 1 a log it cannot use, 2 usage)
# and messages naming LOG:LINE, no HTML left by bad input; real runs (a fixed
# batch under a memory schedule, an adaptive batch, a run that fails) whose
# reports headless Chromium loads without errors, whose DOM holds the six
# charts with every event of the log marked on each, and whose screenshots
# (desktop and phone widths) are real pictures; the start event's plan is
# the plan `batchfit plan` gives.
# Usage: report.sh BATCHFIT SOURCE_DIR
set -u
BIN=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect RC PATTERN ARGS...: run `batchfit ARGS`, check the exit code and
# that PATTERN (grep -E) occurs in stdout or stderr.
expect() {
    local want=$1 pat=$2 rc
    shift 2
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$*: exit $rc, expected $want"; cat "$TMP/out" "$TMP/err"; return
    fi
    if ! grep -qE -- "$pat" "$TMP/out" "$TMP/err"; then
        fail "$*: no /$pat/ in the output:"; cat "$TMP/out" "$TMP/err"; return
    fi
    echo "ok: $* -> $rc"
}

# ---- the command line ----------------------------------------------------
expect 0 'Usage: batchfit report LOG' report --help
expect 0 'report +write the run report' --help
expect 0 '--report FILE' train --help
expect 2 'the event log is required' report
expect 2 "unknown option '--bogus'" report --bogus x.jsonl
expect 2 'option -o needs a value|option --output needs a value' report x.jsonl -o
expect 2 "unknown option '-x'" report x.jsonl -x
expect 2 "unexpected argument 'y.jsonl'" report x.jsonl y.jsonl
grep -q "Try 'batchfit report --help'" "$TMP/err" || fail "no help hint after a usage error"
expect 1 "$TMP/missing.jsonl: cannot open the log: No such file or directory" report "$TMP/missing.jsonl" -o "$TMP/m.html"
[ -e "$TMP/m.html" ] && fail "a report was written for a missing log"

printf '{"event":"start","time":1,"model":"m"}\n{"event":"step","step":0,"loss":0.5,\n' >"$TMP/cut.jsonl"
echo "old" >"$TMP/keep.html"
expect 1 "$TMP/cut.jsonl:2: not valid JSON \(at column 37\): the line ends early" report "$TMP/cut.jsonl" -o "$TMP/keep.html"
[ "$(cat "$TMP/keep.html")" = "old" ] || fail "bad input changed an existing report"
printf '{"event":"start","time":1}\n{"event":"eval","step":3,"test_acc":0.5}\n' >"$TMP/field.jsonl"
expect 1 "field.jsonl:2: a \"eval\" event without the number \"test_loss\"" report "$TMP/field.jsonl" -o "$TMP/f.html"
: >"$TMP/empty.jsonl"
expect 1 "empty.jsonl: the log is empty: it holds no events" report "$TMP/empty.jsonl" -o "$TMP/e.html"
printf '{"event":"start","time":1}\n' >"$TMP/good.jsonl"
expect 1 "$TMP/no/such/dir/r.html: cannot" report "$TMP/good.jsonl" -o "$TMP/no/such/dir/r.html"
ls "$TMP" | grep -q '\.tmp\.' && fail "a temporary file was left behind"
[ -e "$TMP/f.html" ] || [ -e "$TMP/e.html" ] && fail "a report was written for a bad log"

# ---- real runs -------------------------------------------------------------
MLP="$SRC/models/mlp.cfg"
RUN=(train --model "$MLP" --epoch-samples 3000 --eval-samples 500 --epochs 2 --threads 2 --quiet)
expect 0 'test accuracy' "${RUN[@]}" --memory-schedule "10:28MiB,30:1GiB" --log "$TMP/fixed.jsonl" \
    --report "$TMP/fixed.html"
expect 0 'test accuracy' "${RUN[@]}" --batch adaptive --batch-min 32 --batch-max 1024 --log "$TMP/adaptive.jsonl"
expect 0 "report written to $TMP/adaptive.html" report "$TMP/adaptive.jsonl"
# a failure: the report still comes, from a temporary log that is then removed
# (memory that does not come back stops the run with exit 3)
expect 3 "the report of the stopped run is in $TMP/failed.html" "${RUN[@]}" --memory-schedule "10:1MiB" \
    --report "$TMP/failed.html"
ls "$TMP" | grep -q 'failed.html.log' && fail "the temporary event log was left behind"
grep -q '<strong>Failed</strong> at step 10' "$TMP/failed.html" || fail "failed.html does not say the run failed"

# the start event's plan: every category, adding up to the peak, and what
# `batchfit plan` says for the same micro-batch and threads
"$BIN" plan --model "$MLP" --threads 2 --memory 1GiB --batch \
    "$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["plan"]["m"])' \
    "$TMP/fixed.jsonl")" --json >"$TMP/plan.json" || fail "batchfit plan failed"
/usr/bin/python3 - "$TMP/fixed.jsonl" "$TMP/plan.json" <<'PY' || fail "the start event's plan"
import json, sys
start = json.loads(open(sys.argv[1]).readline())
plan, ref = start["plan"], json.load(open(sys.argv[2]))["plans"][0]
cats = ["params", "grads", "optimizer", "activations", "act_grads", "workspace", "input", "other"]
assert list(plan["bytes"]) == cats, plan
assert sum(plan["bytes"].values()) == plan["peak"], plan
assert ref["m"] == plan["m"] and ref["peak"] == plan["peak"], (ref, plan)
for c in cats[:-1]:
    assert ref[c] == plan["bytes"][c], (c, ref, plan)
print("ok: the start event's plan at m=%d is batchfit plan's, %d bytes" % (plan["m"], plan["peak"]))
PY

# ---- in a browser ----------------------------------------------------------
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    fail "chromium is not installed (scripts/setup.sh installs it)"
    echo "$fails check(s) failed"; exit 1
fi
# Nothing leaves the machine: the page needs nothing, and the browser's own
# background requests go to a dead proxy on the loopback and resolve nowhere.
chrome() {
    local ud
    ud=$(mktemp -d "$TMP/profile.XXXXXX")
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$ud" \
        --proxy-server=http://127.0.0.1:9 --host-resolver-rules="MAP * ~NOTFOUND" --hide-scrollbars \
        --enable-logging=stderr --v=0 "$@"
}
# errors of the page: console messages (a page without script has none),
# uncaught exceptions, failed loads
page_errors() { grep -E ':CONSOLE|Uncaught|Failed to load|net::ERR_' "$1"; }

# first make sure such errors are seen at all
printf '<!DOCTYPE html><html><body><p>x</p><script>notAFunction();</script></body></html>\n' >"$TMP/broken.html"
chrome --dump-dom "file://$TMP/broken.html" >"$TMP/broken.dom" 2>"$TMP/broken.err"
page_errors "$TMP/broken.err" >/dev/null || fail "a page error is not seen in chromium's log: this check is blind"

for name in fixed adaptive failed; do
    html="$TMP/$name.html"
    log="$TMP/$name.jsonl"
    [ -f "$log" ] || log=""
    # self-contained: nothing to fetch, nothing to run
    if grep -qiE '<script|<link|<img|<iframe|src=|@import|url\(|href="(http|//)' "$html"; then
        fail "$name.html refers to something outside it or holds script"
    fi
    chrome --dump-dom "file://$html" >"$TMP/$name.dom" 2>"$TMP/$name.err" || fail "$name: chromium --dump-dom failed"
    if page_errors "$TMP/$name.err"; then
        fail "$name: the page logged errors"
    fi
    /usr/bin/python3 - "$TMP/$name.dom" "$html" "$log" <<'PY' || fail "$name: the DOM"
import json, re, sys
dom, html, log = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
svgs = re.findall(r"<svg\b.*?</svg>", dom, re.S)
assert len(svgs) == 11, len(svgs)
marks = [len(re.findall(r'<g class="ev ev-', s)) for s in svgs]
listed = len(re.findall(r'<li class="ev-', dom))
if log:
    ev = [json.loads(l)["event"] for l in open(log) if l.strip()]
    want = sum(e in ("batch_change", "batch_hold", "memory", "warning", "error") for e in ev)
    assert want >= 1, ev
    assert marks == [want] * 11 and listed == want, (marks, listed, want)
    steps = ev.count("step")
    n = len(re.search(r'class="line train-loss"[^>]*points="([^"]*)"', dom).group(1).split())
    assert n == steps, (n, steps)
    # the data wait: a point per step (every step logs its share)
    shares = [json.loads(l).get("data_share") for l in open(log) if '"event":"step"' in l]
    assert all(x is not None for x in shares), "a step without data_share"
    n = len(re.search(r'class="line data-share"[^>]*points="([^"]*)"', dom).group(1).split())
    assert n == steps, (n, steps)
else:
    assert marks[0] >= 1 and marks == [marks[0]] * 11 and listed == marks[0], (marks, listed)
assert 'name="viewport"' in dom and "@media print" in dom
print("ok: %s: 11 charts, %d event(s) marked on each and listed" % (sys.argv[2], listed))
PY
    for size in 1280,2200 390,2600; do
        w=${size%,*}
        h=${size#*,}
        png="$TMP/$name-$w.png"
        chrome --window-size="$size" --screenshot="$png" "file://$html" >/dev/null 2>"$TMP/$name-$w.err"
        if [ ! -s "$png" ] || [ "$(stat -c %s "$png")" -lt 20000 ]; then
            fail "$name: no screenshot at width $w, or a tiny one"; continue
        fi
        python3 "$SRC/tests/cli/png_check.py" "$png" "$w" "$h" || fail "$name: the screenshot at width $w"
    done
done

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all checks passed"
