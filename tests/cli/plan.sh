#!/usr/bin/env bash
# plan.sh BATCHFIT SOURCE_DIR - `batchfit plan` end to end: exit codes (0 ok,
# 1 does not fit / cannot load, 2 usage) and the exact messages, the table and
# the JSON, and the solver's answer checked against the CLI itself (the
# largest batch it reports runs, one more does not). Numbers that depend on
# oneDNN's scratchpads (the CPU's ISA) are not hard-coded; parameter bytes are.
set -u
bin=$1
src=$2
fails=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# run CODE ARGS...: run `batchfit plan ARGS`, check the exit code
run() {
    local want=$1
    shift
    "$bin" plan --threads 2 "$@" >"$out" 2>"$err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: plan $*: exit $got, want $want"
        sed 's/^/  stderr: /' "$err"
        fails=$((fails + 1))
        return 1
    fi
    return 0
}

# has FILE REGEX: FILE (out or err) matches the extended regex
has() {
    if ! grep -Eq -- "$2" "$1"; then
        echo "FAIL: expected /$2/ in $( [ "$1" = "$out" ] && echo stdout || echo stderr ) of the last run"
        sed 's/^/  | /' "$1" | head -20
        fails=$((fails + 1))
    fi
}

# ---- success -----------------------------------------------------------------
run 0 --help && has "$out" "^Usage: batchfit plan --model PRESET\|FILE" && has "$out" "--margin F"
run 0 --model resnet50 --memory 11GiB --optimizer sgd --batch 1,32,64 &&
    has "$out" "^batchfit plan: resnet50 \(preset\), input 3x224x224, 1000 classes, 25,557,032 parameters$" &&
    has "$out" "^device (cpu, since .+|cuda:0, the first GPU, runs every op of the model in f32)$" &&
    has "$out" "^category +fixed +per sample +m=1 +m=32 +m=64$" &&
    has "$out" "^params +97\.70 MiB +- +97\.70 MiB +97\.70 MiB +97\.70 MiB$" &&
    has "$out" "^grads +97\.49 MiB " && has "$out" "^optimizer +97\.49 MiB " &&
    has "$out" "^activations +- " && has "$out" "^act_grads +- " && has "$out" "^workspace +- " &&
    has "$out" "^input +- +588\.00 KiB +588\.06 KiB +18\.38 MiB +36\.75 MiB$" &&
    has "$out" "^peak +292\.68 MiB " && has "$out" "^reuse saves " && has "$out" "^fits " &&
    has "$out" "^per sample: measured between m=32 and m=64" &&
    has "$out" "^largest batch: [0-9]+ within the budget 9\.90 GiB \(memory less the 10% margin\), [0-9]+ in all 11\.00 GiB$"
[ -s "$err" ] && { echo "FAIL: stderr not empty for a plan that fits"; cat "$err"; fails=$((fails + 1)); }

run 0 --model vgg16 --memory 11GiB && has "$out" "138,357,544 parameters" && has "$out" "^params +527\.79 MiB"
run 0 --model "$src/models/cnn.cfg" --memory 1GiB --optimizer adamw &&
    has "$out" "cnn\.cfg \(spec file\), input 1x28x28, 10 classes, 421,642 parameters" &&
    has "$out" "optimizer adamw: 2 state tensors per parameter"
run 0 --model mlp --memory 1GiB --momentum 0 --batch 64 &&
    has "$out" "sgd without momentum: no optimizer state" && has "$out" "^optimizer +0 B " &&
    has "$out" "measured between m=64 and m=65"
run 0 --model resnet18 --memory 4GiB --eval --batch 8 &&
    has "$out" "^inference step \(--eval\)" && has "$out" "^grads +0 B " && has "$out" "^act_grads +- +0 B +0 B$"

# JSON: one object with the plan per size and the solver's answers
run 0 --model resnet18 --memory 4GiB --batch 2,16 --json &&
    has "$out" '^\{"model":"resnet18","source":"preset","input":"3x224x224","classes":1000,"parameters":11689512,"mode":"training","optimizer":"sgd","momentum":0.9,"state_tensors":1,"threads":2,"memory":4294967296,"margin":0.1,' &&
    has "$out" '"plans":\[\{"m":2,' && has "$out" '\{"m":16,' && has "$out" '"max_batch":\{"with_margin":[0-9]+,"without_margin":[0-9]+,"limit":1048576'
if command -v python3 >/dev/null && [ -s "$out" ]; then
    python3 - "$out" <<'PY' || { echo "FAIL: JSON checks"; fails=$((fails + 1)); }
import json, sys
d = json.load(open(sys.argv[1]))
cats = ["params", "grads", "optimizer", "statistics", "activations", "act_grads", "workspace", "input"]
for p in d["plans"]:
    assert p["peak"] == sum(p[c] for c in cats), p
    assert p["peak"] == p["fixed"] + p["step"], p
    assert p["no_reuse"] - p["peak"] == p["reuse_saves"] > 0, p
    assert p["fixed"] == d["fixed"]["total"], p
assert d["max_batch"]["with_margin"] <= d["max_batch"]["without_margin"]
assert d["per_sample"]["between"] == [2, 16]
PY
fi

# the solver against the CLI: the largest batch it reports fits, one more does not
run 0 --model cnn --memory 64MiB --json
full=$(grep -Eo '"without_margin":[0-9]+' "$out" | grep -Eo '[0-9]+$')
marg=$(grep -Eo '"with_margin":[0-9]+' "$out" | grep -Eo '[0-9]+$')
if [ -n "$full" ] && [ "$full" -gt 1 ]; then
    run 0 --model cnn --memory 64MiB --batch "$full" && has "$out" "^fits +(yes|in margin)$"
    run 0 --model cnn --memory 64MiB --batch "$marg" && has "$out" "^fits +yes$"
    run 1 --model cnn --memory 64MiB --batch "$((full + 1))" &&
        has "$err" "^batchfit: error: batch $((full + 1)) does not fit in 64\.00 MiB: it needs [0-9.]+ [KM]iB, [0-9.]+ [KM]iB more \(give --memory of at least [0-9.]+ MiB, or [0-9.]+ MiB to keep the 10% margin\); the largest batch that fits is $full \([0-9.]+ MiB\), $marg within the margin$" &&
        has "$out" "^fits +NO$"
else
    echo "FAIL: no without_margin in the JSON"
    fails=$((fails + 1))
fi

# a margin that leaves no room for batch 1 while the memory has it: train
# refuses, so plan does too, naming the largest margin that trains; that
# margin plans and trains, one percent more does not
run 1 --model cnn --memory 64MiB --margin 0.97 &&
    has "$err" "^batchfit: error: --margin: with the 97% margin nothing trains: batch 1 needs [0-9.]+ MiB, the margin leaves [0-9.]+ MiB of 64\.00 MiB; a margin of at most 0\.[0-9]+ trains \(or a memory of at least [0-9.]+ MiB\)$" &&
    has "$out" "^largest batch: none fits in the budget"
ok=$(grep -Eo "a margin of at most 0\.[0-9]+" "$err" | grep -Eo "0\.[0-9]+$")
if [ -n "$ok" ]; then
    over=$(awk -v m="$ok" 'BEGIN { printf "%.2f", m + 0.01 }')
    run 0 --model cnn --memory 64MiB --margin "$ok"
    run 1 --model cnn --memory 64MiB --margin "$over"
    tr=("$bin" train --model "$src/models/cnn.cfg" --data synthetic --batch 4 --max-steps 1 --eval-samples 10
        --threads 2 --memory 64MiB --quiet)
    "${tr[@]}" --margin "$ok" >/dev/null 2>"$err" || { echo "FAIL: train --margin $ok: $(cat "$err")"; fails=$((fails + 1)); }
    if "${tr[@]}" --margin "$over" >/dev/null 2>"$err"; then
        echo "FAIL: train --margin $over trained"; fails=$((fails + 1))
    else
        has "$err" "^batchfit: error: --margin: training needs [0-9.]+ MiB even at micro-batch 1, but the 9[0-9]% margin leaves [0-9.]+ [KM]iB of 64\.00 MiB: a margin of at most $ok trains \(or a memory of at least [0-9.]+ MiB\)$"
    fi
else
    echo "FAIL: plan --margin 0.97 named no margin"; fails=$((fails + 1))
fi

# Slurm: srun's step is a group (rank 2 of 4 leaves plan to rank 0); a batch
# script's own process has the job's SLURM_NTASKS without srun: one process
SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=0 run 0 --model cnn --memory 64MiB && has "$err" "rank 0 of 4 does it"
SLURM_NTASKS=4 SLURM_PROCID=0 run 0 --model cnn --memory 64MiB && ! grep -q "rank 0 of" "$err" ||
    { echo "FAIL: a Slurm batch script without srun was taken for rank 0 of 4"; fails=$((fails + 1)); }

# token models: the sequence length and the attention kind (parameter bytes are exact)
run 0 --model bert-base --seq 128 --memory 12GB --optimizer adamw &&
    has "$out" "^batchfit plan: bert-base \(preset\), input 128 tokens, 30522 classes per token, 109,514,298 parameters$" &&
    has "$out" "^a sample is a sequence of 128 tokens; attention stored" &&
    has "$out" "^params +417\.76 MiB " && has "$out" "^optimizer +835\.53 MiB " &&
    has "$out" "^largest batch: [0-9]+ within the budget 10\.06 GiB \(memory less the 10% margin\), [0-9]+ in all 11\.18 GiB$"
stored=$(sed -n 's/^largest batch: .*, \([0-9]*\) in all.*/\1/p' "$out")
run 0 --model bert-base --seq 512 --memory 12GB --optimizer adamw --attention lean --json &&
    has "$out" '"seq":512,"attention":"lean"'
run 0 --model bert-base --seq 128 --memory 12GB --optimizer adamw --attention lean &&
    has "$out" "attention lean \(a log-sum-exp per row kept"
lean=$(sed -n 's/^largest batch: .*, \([0-9]*\) in all.*/\1/p' "$out")
[ -n "$stored" ] && [ -n "$lean" ] && [ "$lean" -gt "$stored" ] ||
    { echo "FAIL: lean attention fits $lean sequences of 128, stored $stored: lean must fit more"; fails=$((fails + 1)); }
run 0 --model gpt2 --memory 12GB --optimizer adamw && has "$out" "124,439,808 parameters" &&
    has "$out" "input 1024 tokens, 50257 classes per token"
run 2 --model bert-base --seq 600 && has "$err" "^batchfit: error: --seq: must be 1 to 512 \(the model's positions\), got 600$"
run 2 --model resnet50 --seq 60 && has "$err" "^batchfit: error: --seq: applies to token models"
run 2 --model mlp --attention lean && has "$err" "^batchfit: error: --attention: the model has no attention layer$"
run 2 --model gpt2 --attention fast && has "$err" "^batchfit: error: --attention: expected stored or lean, got 'fast'$"

# ---- does not fit: exit 1 ---------------------------------------------------
run 1 --model vgg16 --memory 1GiB &&
    has "$err" "^batchfit: error: vgg16 does not fit in 1\.00 GiB at any batch size: its fixed part alone \(parameters 527\.79 MiB \+ gradients 527\.79 MiB \+ optimizer state 527\.79 MiB \+ statistics 64 B = 1\.55 GiB\) exceeds the memory by 559\.38 MiB; batch 1 needs --memory of at least [0-9.]+ GiB \([0-9.]+ GiB with the 10% margin\); or plan less optimizer state: --optimizer sgd --momentum 0$"
run 1 --model vgg16 --memory 1.58GiB &&
    has "$err" "^batchfit: error: vgg16 does not fit in 1\.58 GiB even at batch 1: batch 1 needs [0-9.]+ GiB, [0-9.]+ MiB more than the memory; give --memory of at least [0-9.]+ GiB \([0-9.]+ GiB with the 10% margin\)$"
# a model that names nothing is a bad option (exit 2), as an unknown preset is
run 2 --model "$src/models/nope.cfg" && has "$err" "^batchfit: error: --model: .*/models/nope\.cfg: no such file \(give a preset name, a spec file or an ONNX file\)$"

# ---- usage: exit 2 ------------------------------------------------------------
run 2 --model resnet5 &&
    has "$err" "^batchfit: error: --model: unknown model preset 'resnet5': expected one of mlp, cnn, resnet18, resnet50, vgg16, gpt-nano, gpt2, bert-base, or a spec file path$" &&
    has "$err" "^Try 'batchfit plan --help'\.$"
run 2 --model resnet50 --memory 11Gx && has "$err" "^batchfit: error: --memory: size '11Gx' has unknown unit 'Gx'"
run 2 --model resnet50 --memory 0 && has "$err" "^batchfit: error: --memory: a size of 0 bytes"
run 2 --model mlp --batch 1,,2 && has "$err" "^batchfit: error: --batch: expected a batch size \(128\), auto, adaptive, or for plan a list like 1,32,64; got '1,,2'$"
run 2 --model mlp --batch 1,x && has "$err" "^batchfit: error: --batch: 'x' is not a whole number$"
run 2 --model mlp --batch 0 && has "$err" "^batchfit: error: --batch: 0 is out of range: expected 1 to 16777216$"
run 2 --model mlp --batch 2000000 && has "$err" "^batchfit: error: --batch: 2000000 is out of range: expected 1 to 1048576$"
run 2 --model mlp --margin 1 && has "$err" "^batchfit: error: --margin: 1 is out of range"
run 2 --model mlp --optimizer adam && has "$err" "^batchfit: error: --optimizer: unknown optimizer 'adam'"
run 2 --model mlp --optimizer adamw --momentum 0.5 && has "$err" "^batchfit: error: --momentum: applies to the sgd optimizer"
run 2 --model mlp --eval --momentum 0.5 && has "$err" "^batchfit: error: --momentum: has no effect with eval"
run 2 --model mlp --frob && has "$err" "^batchfit: error: unknown option '--frob'$"
run 2 --model mlp --memory && has "$err" "^batchfit: error: option --memory needs a value$"
run 2 --model mlp extra && has "$err" "^batchfit: error: unexpected argument 'extra'$"
run 2 && has "$err" "^batchfit: error: --model: is required"
# a token model's ways measured: its steps on ids of its vocabulary and a label a token (each row failed on
# labels read past the samples' count before)
run 0 --model gpt-nano --seq 16 --memory 48MiB --ways --measure && has "$out" "^f32 +[0-9]+ +[0-9]+ .*s +[0-9.]+$" &&
    has "$out" "^bf16 \+ recompute auto +[0-9]+ +[0-9]+ .*s +[0-9.]+$" && ! grep -q "failed" "$out" ||
    { echo "FAIL: gpt-nano's ways measured"; fails=$((fails + 1)); }
# ways where no row trains even micro-batch 1: no fit, exit 1 (was 0)
run 1 --model gpt-nano --memory 1KiB --ways && has "$err" "no way trains even micro-batch 1 in 921 B"

# a model error found while the device is chosen is the model's, not the device's
spec=$(mktemp --suffix=.cfg)
printf 'input tokens=32\nlinear 64\nrelu\nlinear 256\n' >"$spec"
run 1 --model "$spec" && has "$err" "^batchfit: error: --model: $spec:2:1: the model input is token ids: the first layer must be \`embed\`"
rm -f "$spec"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all plan CLI checks passed"
