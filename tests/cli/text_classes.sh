#!/usr/bin/env bash
# text_classes.sh BATCHFIT SRC - a classifier of token ids trained on a
# folder of class folders of texts: it learns (the held-out part's accuracy),
# saves its classes, evaluates on a test folder of some of them; what is
# refused (--seq-max, a test class it never learned, token data for a
# classifier) and what a language model still reads there (one text).
set -u
bf=$1
src=$2
. "$(dirname "$0")/lib.sh"

# texts/: 'animals' and 'tools', 400 texts each of 1 to 12 words drawn from
# their own words (a text's class is in any of its words; lengths from 3 to
# 100 bytes, so most sequences are padded to the model's 64)
python3 - "$tmp" <<'PY'
import os, random, sys
r = random.Random(7)
words = {"animals": "cat dog horse otter badger heron newt lynx mole wren".split(),
         "tools": "saw drill hammer chisel wrench plane rasp vise awl file".split()}
for c, ws in words.items():
    for i in range(400):
        d = os.path.join(sys.argv[1], "texts", c, "batch%d" % (i % 3))
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "%03d.txt" % i), "w").write(" ".join(r.choice(ws) for _ in range(r.randint(1, 12))) + "\n")
os.makedirs(os.path.join(sys.argv[1], "only_tools", "tools"))
for i in range(30):
    open(os.path.join(sys.argv[1], "only_tools", "tools", "%d.txt" % i), "w").write(
        " ".join(r.choice(words["tools"]) for _ in range(r.randint(1, 12))) + "\n")
os.makedirs(os.path.join(sys.argv[1], "other", "plants"))
open(os.path.join(sys.argv[1], "other", "plants", "1.txt"), "w").write("fern moss\n")
PY
cat >"$tmp/cls.cfg" <<'EOF'
input tokens=64
embed 32 vocab=256 positions=64
residual {
  layernorm
  linear 96
  attention 2 causal=0
  linear 32
}
residual {
  layernorm
  linear 64
  gelu
  linear 32
}
layernorm
select 0
linear 2
EOF

# trains: each class's every 20th text held out (40), accuracy on them
expect 0 "test accuracy (9[0-9]|100)\.[0-9]+% \(40 samples\)" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts" --epochs 4 --batch 16 --lr 3e-3 --optimizer adamw \
  --threads 2 --seed 1 --save "$tmp/w.st"
grep -q '"classes":"\[\\"animals\\",\\"tools\\"\]"' "$tmp/w.st" && pass || fail "w.st: classes not saved: $(head -c 400 "$tmp/w.st" | strings | head -3)"
# each micro-batch runs at its longest text, rounded to 16, not at the model's 64: the texts are 3 to 100
# bytes (cut to 64), 35.5 on average, so fewer than 48 positions a sequence are computed (64 before 2026-12-05)
"$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts" --epochs 1 --batch 16 --lr 3e-3 --optimizer adamw \
  --threads 2 --seed 1 --json >"$tmp/trim.json" 2>/dev/null
python3 - "$tmp/trim.json" <<'PY' && pass || fail "positions computed a sequence: $(cat "$tmp/trim.json")"
import json, sys
r = json.load(open(sys.argv[1]))
per = r["tokens_computed"] / r["samples"]
print(f"  {per:.1f} token positions computed a sequence of at most 64")
sys.exit(0 if 16 <= per < 48 else 1)
PY
# where memory bounds the micro-batch (11 sequences of 64 tokens in 2500 KiB), the step's sequences sorted by
# length fill micro-batches of more at their shorter lengths (since 2026-12-05): fewer micro-steps than
# ceil(E / 11) a step (57 of 72 when written)
"$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts" --memory 2500KiB --epochs 1 --batch 32 --lr 3e-3 \
  --optimizer adamw --threads 2 --seed 1 --log "$tmp/fit.jsonl" >/dev/null 2>&1
python3 - "$tmp/fit.jsonl" <<'PY' && pass || fail "micro-steps of sequences sized by length: $(head -c 300 "$tmp/fit.jsonl")"
import json, math, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
m = next(e["micro_batch"] for e in ev if e["event"] == "start")
st = [e for e in ev if e["event"] == "step"]
k, full = sum(e["k"] for e in st), sum(math.ceil(e["E"] / e["m"]) for e in st)
print(f"  micro-batch {m} at 64 tokens: {k} micro-steps in {len(st)} steps, {full} at 64")
sys.exit(0 if st and m < 32 and k < full else 1)
PY
expect 0 "test accuracy [0-9.]+% after 1 epoch\(s\), [0-9]+ steps, [0-9.]+ s training \([0-9]+ samples/s; [0-9.]+ token positions computed a sequence\)" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts" --epochs 1 --batch 16 --lr 3e-3 --optimizer adamw --threads 2
# evaluated on a folder of one of its classes: 'tools' is the weights' class 1, not the folder's own 0
expect 0 "test accuracy (9[0-9]|100)\.[0-9]+% on 30 samples" \
  "$bf" eval --model "$tmp/cls.cfg" --weights "$tmp/w.st" --test-data "$tmp/only_tools" --threads 2
expect 1 "class plants is not among the 2 classes of .*w.st.*animals, tools" \
  "$bf" eval --model "$tmp/cls.cfg" --weights "$tmp/w.st" --test-data "$tmp/other" --threads 2
# --data is read as train reads it: its test part, every 20th text of each class (1 of 30 here)
expect 0 "test accuracy [0-9.]+% on 1 samples" \
  "$bf" eval --model "$tmp/cls.cfg" --weights "$tmp/w.st" --data "$tmp/only_tools" --threads 2

# the mean of the real tokens (gap on a sequence) instead of the first token's features
sed 's/^select 0$/gap/' "$tmp/cls.cfg" >"$tmp/mean.cfg"
expect 0 "test accuracy (9[0-9]|100)\.[0-9]+% \(40 samples\)" \
  "$bf" train --model "$tmp/mean.cfg" --data "$tmp/texts" --epochs 4 --batch 16 --lr 3e-3 --optimizer adamw \
  --threads 2 --seed 1
expect 1 "data set '$tmp/nope' not found \(No such file or directory\): give a folder of class folders of texts" \
  "$bf" train --model "$tmp/mean.cfg" --data "$tmp/nope" --max-steps 1 --threads 2

# a third folder beside the classes (aclImdb's train/unsup) is a third class: the error names them
mkdir -p "$tmp/texts3/unsup" && cp -r "$tmp/texts/animals" "$tmp/texts/tools" "$tmp/texts3/" &&
  cp "$tmp/only_tools/tools/1.txt" "$tmp/texts3/unsup/"
expect 1 "cls.cfg: the model has 2 class scores but the data set $tmp/texts3 has 3 classes \(animals, tools, unsup\)" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts3" --max-steps 1 --threads 2

# the shipped example (models/text-cls.cfg, 2 classes, 128 tokens) trains on the same folder
expect 0 "test accuracy [0-9.]+% after 1 epoch\(s\), 3 steps" \
  "$bf" train --model "$src/models/text-cls.cfg" --data "$tmp/texts" --max-steps 3 --batch 8 --threads 2

# --seq-max is a language model's lines: refused for a classifier
expect 1 "--seq-max: makes a text's lines a language model's samples, but .*cls.cfg gives one vector of class scores per sequence: a classifier's samples are its texts, each cut to the model's length \\(its \`input tokens=T\`\\); leave --seq-max out" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/texts" --seq-max 32 --max-steps 1 --threads 2
# a classifier on a text: it has no classes, and the error says what to give
printf 'a text, not a folder of classes\n%.0s' $(seq 40) >"$tmp/a.txt"
cp "$tmp/a.txt" "$tmp/a2.txt"
expect 1 "has a label per token .* or give a classifier a folder of class folders of texts" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/a.txt" --test-data "$tmp/a2.txt" --max-steps 1 --threads 2
# a folder of texts without class folders
expect 1 "has no class folders: a classifier of texts reads a folder of one folder per class" \
  "$bf" train --model "$tmp/cls.cfg" --data "$tmp/only_tools/tools" --max-steps 1 --threads 2
# a language model reads the same folder as one text (its next tokens), as before
expect 0 "test loss [0-9.]+ per token" \
  "$bf" train --model gpt-nano --data "$tmp/texts" --test-data "$tmp/a.txt" --max-steps 1 --batch 2 --threads 2
finish
