#!/bin/bash
# find.sh - `batchfit find` from the outside: exit codes (0 found, 1 failed,
# 2 usage) and messages that say what was wrong and what would be right, a
# real run whose largest batch is confirmed with fewer steps than a doubling
# search, and the chart written whole.
# Usage: find.sh BATCHFIT SOURCE_DIR
set -u
BIN=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

# expect RC PATTERN ARGS...: run `batchfit find ARGS`, check the exit code
# and that PATTERN (grep -E) occurs in stdout or stderr.
expect() {
    local want=$1 pat=$2 rc
    shift 2
    "$BIN" find "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: find $*: exit $rc, expected $want"; cat "$TMP/err"; fails=$((fails + 1)); return
    fi
    if ! grep -qE -- "$pat" "$TMP/out" "$TMP/err"; then
        echo "FAIL: find $*: no /$pat/ in the output:"; cat "$TMP/out" "$TMP/err"; fails=$((fails + 1)); return
    fi
    echo "ok: find $* -> $rc"
}

# usage errors: 2
expect 0 'Usage: batchfit find' --help
expect 2 '--model: is required' --memory 64MiB
expect 2 "--margin: 1.5 is out of range: expected 0 to 0.99" --model mlp --margin 1.5
expect 2 "--margin: -0.1 is out of range" --model mlp --margin -0.1
expect 2 "--margin: 'x' is not a number" --model mlp --margin x
expect 2 "--tolerance: 1 is out of range: expected 0 to 0.99" --model mlp --tolerance 1
expect 2 "--repeats: 0 is out of range" --model mlp --repeats 0
expect 2 "--memory: " --model mlp --memory 12XB
expect 2 "unknown preset|not a preset|preset" --model nosuchmodel
expect 2 "drop one of them" --model mlp --largest-only --plot "$TMP/x.svg"
expect 2 "unknown option '--bogus'" --model mlp --bogus
grep -q "Try 'batchfit find --help'" "$TMP/err" || { echo "FAIL: no help hint after a usage error"; fails=$((fails + 1)); }

# nothing fits: 1, with the bytes
expect 1 "does not fit in 1.00 MiB at any batch size.*exceeds the memory by 20.33 MiB" --model mlp --memory 1MiB
expect 1 "fixed part alone .* over" --model mlp --memory 22MiB --threads 1
# the fixed part is 21.33 MiB and a sample's activations and input 18 KiB
# more, whatever the CPU (oneDNN's workspaces differ between AVX2 and
# AVX-512: 21.40 MiB held batch 2 on an AVX2 CPU): 21.34 MiB holds no batch
expect 1 "not even batch 1 fits: it needs 21\.[0-9]+ MiB .* but the memory is 21.34 MiB: [0-9.]+ KiB missing; give --memory of at least 21\.[0-9]+ MiB for batch 1" \
    --model mlp --memory 21.34MiB --margin 0 --threads 1
expect 1 "but the budget is 21.34 MiB \(memory 23.71 MiB less the 10% margin\): [0-9.]+ KiB missing; give --memory of at least 23\.[0-9]+ MiB for batch 1 \(21\.[0-9]+ MiB with --margin 0\)" \
    --model mlp --memory 23.71MiB --threads 1
expect 2 "no such file" --model "$TMP/missing.cfg"
printf 'input 3x8x8\nflatten\nlinear 10\n' >"$TMP/rgb.cfg"
expect 1 "inputs of 3x8x8 but the data set fashion-mnist has samples of 1x28x28" --model "$TMP/rgb.cfg" --memory 64MiB

# a batch the device cannot make (the cpu made to refuse a convolution of
# over 40 samples of cnn's 25088-element tensors, as cuDNN refuses one of
# over 2^31 - 1 elements) bounds the largest batch as memory does
BFIT_TEST_CONV_ELEMS=$((40 * 25088 + 7)) expect 0 "largest batch: 40 .*and 41 cannot be made on this device \(cpu conv: a tensor of over" \
    --model cnn --memory 1GiB --threads 1 --largest-only

# a real run: the largest batch runs, the next is refused, in 2 steps
expect 0 '"plan_agrees":true' --model cnn --memory 64MiB --threads 1 --repeats 1 --json --plot "$TMP/cnn.svg"
python3 - "$TMP/out" <<'PY' || fails=$((fails + 1))
import json, sys
r = json.load(open(sys.argv[1]))
L, S = r["largest"], r["steps"]
assert L["batch"] > 1 and L["next_refused"], L
assert L["measured_peak"] == L["planned_peak"] <= r["budget"] < L["next_planned_peak"], L
assert S["largest"] == 2 and 3 * S["largest"] <= S["search_steps"], S
assert S["search_answer"] == L["batch"], (S, L)
assert r["ladder"][-1]["batch"] == L["batch"] and r["fastest"]["recommended"] <= L["batch"], r
print("ok: json: largest %d (%d steps; the doubling search %d), recommended %d"
      % (L["batch"], S["largest"], S["search_steps"], r["fastest"]["recommended"]))
PY
if head -c 4 "$TMP/cnn.svg" | grep -q '<svg' && tail -c 7 "$TMP/cnn.svg" | grep -q '</svg>'; then
    echo "ok: the chart is a whole SVG"
else
    echo "FAIL: $TMP/cnn.svg is not a whole SVG"; fails=$((fails + 1))
fi
if ls "$TMP" | grep -q '\.tmp\.'; then
    echo "FAIL: a temporary file was left behind"; fails=$((fails + 1))
fi
expect 0 'largest batch: [0-9]+ .*confirmed.*refused' --model "$SRC/models/mlp.cfg" --memory 32MiB --threads 1 \
    --largest-only
expect 0 'a doubling-then-bisecting search with 3 steps per trial needs [0-9]+' --model mlp --memory 32MiB \
    --threads 1 --largest-only
# a token model: a sample has T labels (staged as such: it overflowed its
# buffer), and synthetic data is random ids of its vocabulary
expect 0 'largest batch: [0-9]+ .*confirmed: a real step ran' --model gpt-nano --data synthetic --memory 64MiB \
    --threads 1 --largest-only
expect 0 'fastest batch: [0-9]+' --model gpt-nano --data synthetic --memory 64MiB --threads 1 --limit 4 --repeats 1
expect 1 "--plot: $TMP/no/such/dir/x.svg: cannot write into directory '$TMP/no/such/dir'" --model cnn --memory 16MiB --threads 1 --repeats 1 \
    --plot "$TMP/no/such/dir/x.svg"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all checks passed"
