#!/usr/bin/env bash
# tokens.sh BATCHFIT SRC - token models on text a user writes: models and
# data that do not match, short texts and texts of blank lines under
# --seq-max, evaluation of saved weights on another text. Tiny runs.
set -u
bf=$1
src=$2
. "$(dirname "$0")/lib.sh"

# a text: 400 lines, non-ASCII, blank lines
for i in $(seq 400); do
  if [ $((i % 7)) -eq 0 ]; then echo; else echo "line $i: naïve café straße 日本語 the quick brown fox"; fi
done >"$tmp/a.txt"

# another text: a test text of its own (a.txt is too short for a test part)
for i in $(seq 60); do echo "another text, line $i, with its own words: ÿ ñ"; done >"$tmp/b.txt"

# a token model whose scores are one vector per sample (flatten) has one
# label per sample; token data has one per token: refused before any step
# (was a heap overflow: T labels per sample written into room for one)
printf 'input tokens=8\nembed 4 vocab=256\nflatten\nlinear 256\n' >"$tmp/flat.cfg"
expect 1 "--data: $tmp/flat.cfg gives one vector of class scores per sample, but the token data $tmp/a.txt has a label per token \(8 per sample" \
  "$bf" train --model "$tmp/flat.cfg" --data "$tmp/a.txt" --test-data "$tmp/b.txt" --max-steps 1 --batch 4 --threads 2
expect 1 "gives one vector of class scores per sample, but the token data" \
  "$bf" find --model "$tmp/flat.cfg" --data "$tmp/a.txt" --largest-only --memory 64MiB --threads 2

# --seq-max: a sample is a line, so a text shorter than the model's T still
# has samples (was refused: "28 tokens make no sample of 128 tokens")
printf 'hello world, this is short.\n' >"$tmp/short.txt"
expect 0 "test loss [0-9.]+ per token .* next-token accuracy [0-9.]+% \(1 sequences\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/short.txt" --seq-max 64 --max-steps 1 --batch 4 \
  --threads 2
expect 0 "after 1 epoch\(s\), 1 steps" \
  "$bf" train --model gpt-nano --data "$tmp/short.txt" --test-data "$tmp/a.txt" --seq-max 64 --max-steps 1 --batch 4 \
  --eval-samples 8 --threads 2
# a test text of blank lines has no sample: refused, naming it (was "test
# loss 0.0000 per token, next-token accuracy 0.00% (0 sequences)", exit 0)
printf '\n%.0s' $(seq 300) >"$tmp/blank.txt"
expect 1 "--test-data: $tmp/blank.txt \(whole, lines\) has no test samples: with --seq-max a sample is a line's tokens that have a next token, and no line has any" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/blank.txt" --seq-max 64 --max-steps 1 --batch 4 \
  --threads 2
# and a text too short for a test part says how to give one
expect 1 "--data: $tmp/short.txt \(test part, lines\) has no test samples: a text's test part is every 20th block of 100 lines; give the test text as --test-data" \
  "$bf" train --model gpt-nano --data "$tmp/short.txt" --seq-max 64 --max-steps 1 --batch 4 --threads 2
# eval of saved weights on another text, read whole as train's --test-data
# reads it (was: no way; --data gave its test part, "0 tokens make no
# sample ... give the test text as --test-data", and eval refused
# --test-data as another command's option)
"$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/b.txt" --max-steps 2 --batch 4 --threads 2 \
  --save "$tmp/a.st" --json --quiet >"$tmp/tr.json" 2>/dev/null
"$bf" eval --model gpt-nano --weights "$tmp/a.st" --test-data "$tmp/b.txt" --json --threads 2 >"$tmp/ev.json" 2>&1
# the same sequences, the same loss: b.txt's windows of 128 and their
# labels, (bytes - 1) / 128 of them
if python3 - "$tmp/tr.json" "$tmp/ev.json" $(( ($(wc -c <"$tmp/b.txt") - 1) / 128 )) <<'PY'
import json, sys
tr, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if ev["samples"] == int(sys.argv[3]) and abs(ev["loss"] - tr["test_loss"]) < 1e-6 else 1)
PY
then pass; else fail "eval --test-data b.txt: $(cat "$tmp/ev.json") against train's $(cat "$tmp/tr.json")"; fi
expect 1 "$tmp/b.txt \(test part\): 0 tokens make no sample of 128 tokens .* give the test text as --test-data" \
  "$bf" eval --model gpt-nano --weights "$tmp/a.st" --data "$tmp/b.txt" --threads 2
# --seq-max reads a text's lines; a token file has none: refused (was
# trained silently on windows of N, the model cut to N tokens)
python3 - "$tmp/a.txt" "$tmp/a.bin" <<'PY'
import struct, sys
ids = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<4i", 20240520, 1, len(ids), 256) + bytes(1008) +
                              b"".join(struct.pack("<H", i) for i in ids))
PY
# a token file too short for a test part (every 20th block of 4096 ids) says
# so, as a short text does; another file as --test-data is read whole (was:
# trained, and tested on its training ids, with a warning)
expect 1 "error: $tmp/a.bin \(test part\): 0 tokens make no sample of 128 tokens and their 128 labels \(at least 129 are needed\): a token file's test part is every 20th block of 4096 ids; give the test token file as --test-data \(read whole\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --max-steps 1 --batch 4 --eval-samples 4 --threads 2
expect 0 "training gpt-nano on $tmp/a.bin: .* 1 epoch\(s\) of $(( ($(wc -c <"$tmp/a.txt") - 1) / 128 )) sequences of 128 tokens" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --test-data "$tmp/a.txt" --max-steps 1 --batch 4 --eval-samples 4 --threads 2
expect 1 "--seq-max: $tmp/a.bin is a token file, which has no lines: --seq-max makes a text's lines the samples; leave it out \(windows of the model's tokens\) or give the text \(a .txt file\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --seq-max 64 --max-steps 1 --batch 4 --threads 2
expect 1 "--seq-max: $tmp/a.bin is a token file, which has no lines" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/a.bin" --seq-max 64 --max-steps 1 --batch 4 --threads 2
# a token model's text must be named .txt; another file is not read as CSV
# for it (was "U.TXT:2: found 1 column, need at least 2 (features and a label)")
cp "$tmp/a.txt" "$tmp/U.TXT"
expect 1 "error: $tmp/U.TXT is not data for a token model: it reads kjv, a token file \(llm.c's format\) or a text whose name ends in .txt \(its bytes as tokens\); rename a text to end in .txt" \
  "$bf" train --model gpt-nano --data "$tmp/U.TXT" --max-steps 1 --batch 4 --threads 2
# images for a token model: said so (was "images of l.txt: the model's input
# has 0 channels; images give 1 (gray) or 3 (RGB)")
{ echo "photo.jpg,1"; cat "$tmp/a.txt"; } >"$tmp/l.txt"
expect 1 "$tmp/l.txt reads as images \(a list whose lines name image files as \`path,label\`\), but a token model reads token ids" \
  "$bf" train --model gpt-nano --data "$tmp/l.txt" --max-steps 1 --batch 4 --threads 2
mkdir -p "$tmp/imgs/a"
expect 1 "$tmp/imgs reads as images \(a folder of class folders\), but a token model reads token ids: give it kjv, a token file or a text" \
  "$bf" train --model gpt-nano --data "$tmp/imgs" --max-steps 1 --batch 4 --threads 2
# find names a token model's input as plan does (was "input 128x1")
expect 0 "batchfit find: gpt-nano \(preset\) on $tmp/a.txt: 842,496 parameters, input 128 tokens, 2 threads" \
  "$bf" find --model gpt-nano --data "$tmp/a.txt" --largest-only --memory 48MiB --threads 2
# --augment on text says what it needs (was "a.txt (train part) is token
# data: no augmentation or normalisation")
expect 1 "augmentation \(crop, flip\) needs images; $tmp/a.txt \(train part\) is token data \(train without --augment\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/b.txt" --augment --max-steps 1 --batch 4 --threads 2
# a missing file names what a token model reads (was "give fashion-mnist,
# an MNIST-format directory, IMAGES,LABELS IDX files, or a CSV file")
expect 1 "data set '$tmp/none.txt' not found \(No such file or directory\): give kjv, a token file or a .txt file \(a token model's data\)" \
  "$bf" train --model gpt-nano --data "$tmp/none.txt" --max-steps 1 --threads 2
# eval --seq-max scores the text's lines as a --seq-max run's evaluation
# does (was refused: eval could only score windows of the model's T, so a
# --seq-max run's test figures could not be reproduced)
"$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/b.txt" --seq-max 64 --max-steps 2 --batch 4 \
  --threads 2 --save "$tmp/s.st" --json --quiet >"$tmp/trs.json" 2>/dev/null
"$bf" eval --model gpt-nano --weights "$tmp/s.st" --test-data "$tmp/b.txt" --seq-max 64 --json --threads 2 \
  >"$tmp/evs.json" 2>&1
if python3 - "$tmp/trs.json" "$tmp/evs.json" <<'PY'
import json, sys
tr, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if ev["samples"] == 60 and abs(ev["loss"] - tr["test_loss"]) < 1e-6 else 1)
PY
then pass; else fail "eval --seq-max: $(cat "$tmp/evs.json") against train's $(cat "$tmp/trs.json")"; fi
# an embedding smaller than the text's bytes: refused before training,
# naming the file, the id, where it is, and what would be right (was "token
# id 195 at position 12 of sample 0 is outside the vocabulary [0, 128)" at
# the first step, sample 0 being the micro-batch's)
printf 'input tokens=32\nembed 32 vocab=128 positions=32\nlinear 256\n' >"$tmp/v128.cfg"
expect 1 "--data: $tmp/a.txt \(train part\) holds token id 195 at position 10 \(ids counted from 0\), outside the vocabulary \[0, 128\) of the embed of $tmp/v128.cfg: give it vocab=[0-9]+ or more \(the data's largest id is [0-9]+\)" \
  "$bf" train --model "$tmp/v128.cfg" --data "$tmp/a.txt" --test-data "$tmp/b.txt" --max-steps 1 --batch 4 --threads 2
# ASCII text fits it
for i in $(seq 300); do echo "plain ascii line $i"; done >"$tmp/ascii.txt"
for i in $(seq 60); do echo "another plain ascii line $i"; done >"$tmp/ascii2.txt"
expect 0 "after 1 epoch\(s\), 1 steps" \
  "$bf" train --model "$tmp/v128.cfg" --data "$tmp/ascii.txt" --test-data "$tmp/ascii2.txt" --max-steps 1 --batch 4 \
  --eval-samples 4 --threads 2
# --epoch-samples under --seq-max: an epoch shorter than the data set is a
# random subset of its lines, of every length (was the longest of each
# 1024: the length buckets were sorted before the epoch was cut, so short
# lines were never trained on). Lines of 99 and of 9 tokens, alternating:
# 50 samples of one kind only would be 4950 or 450 tokens.
for i in $(seq 1000); do printf '%099d\n%09d\n' "$i" "$i"; done >"$tmp/two.txt"
tokens=$("$bf" train --model gpt-nano --data "$tmp/two.txt" --test-data "$tmp/two.txt" --seq-max 128 \
  --epoch-samples 50 --batch 50 --max-steps 1 --eval-samples 4 --threads 2 --json --quiet 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
if [ "${tokens:-0}" -gt 450 ] && [ "${tokens:-0}" -lt 4950 ]; then pass; else
  fail "--epoch-samples 50 of lines of 99 and 9 tokens took $tokens tokens: one length only"; fi

# --test-data naming the training text, in any spelling, tests on its
# held-out part as without it, and says so (was: the whole text, the part it
# trains on included: 859 sequences here, not the test part's 42)
ln -s "$tmp/two.txt" "$tmp/link.txt"
held_out() { # WHAT CMD...: exit 0, the note, and the test part's 42 sequences
  local what=$1 out
  shift
  if out=$("$@" 2>&1) && grep -q "batchfit: $what: testing on its held-out part, $tmp/two.txt (test part)$" <<<"$out" &&
    grep -qE "[ (]42 sequences" <<<"$out"; then pass; else fail "$* -> $(tail -3 <<<"$out")"; fi
}
for t in "$tmp/two.txt" "$tmp/./two.txt" "$tmp/link.txt"; do
  held_out "--test-data names the training data" \
    "$bf" train --model gpt-nano --data "$tmp/two.txt" --test-data "$t" --max-steps 1 --batch 4 --threads 2
done
held_out "--test-data names the training data" env BFIT_KJV="$tmp/two.txt" "$bf" train --model gpt-nano --data kjv \
  --test-data "$tmp/two.txt" --max-steps 1 --batch 4 --threads 2
held_out "--test-data names --data" \
  "$bf" eval --model gpt-nano --weights "$tmp/a.st" --data "$tmp/two.txt" --test-data "$tmp/link.txt" --threads 2
# a text too short for a test part, named twice: says why another is needed
expect 1 "error: --test-data: $tmp/a.txt \(test part\): 0 tokens make no sample of 128 tokens .*; --test-data names the training data, so its held-out part is the test: give another text as --test-data" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/a.txt" --max-steps 1 --batch 4 --threads 2
expect 1 "error: --test-data: $tmp/short.txt \(test part, lines\) has no test samples: a text's test part is every 20th block of 100 lines; --test-data names the training data, so its held-out part is the test: give another text as --test-data" \
  "$bf" train --model gpt-nano --data "$tmp/short.txt" --test-data "$tmp/short.txt" --seq-max 64 --max-steps 1 --batch 4 \
  --threads 2

# a token file given alone is split as a text is: its ids in blocks of
# 4096, every 20th block held out (was: trained on whole, and "tested" on
# its own training ids, with a warning). 90,000 ids: ids 77,824-81,919 are
# the test part (4,096 ids, 31 windows of 128), the other 85,904 the train
# part (671); train ids are below 200, held-out ids 200 and up.
python3 - "$tmp/s.bin" "$tmp/t.bin" <<'PY'
import struct, sys
def put(path, ids):
    open(path, "wb").write(struct.pack("<4i", 20240520, 1, len(ids), 256) + bytes(1008) +
                           b"".join(struct.pack("<H", i) for i in ids))
put(sys.argv[1], [200 + i % 4096 % 56 if (i // 4096) % 20 == 19 else i * 7 % 200 for i in range(90000)])
put(sys.argv[2], [i * 3 % 256 for i in range(1000)])
PY
if out=$("$bf" train --model gpt-nano --data "$tmp/s.bin" --max-steps 1 --batch 4 --threads 2 2>&1) &&
  grep -q "training gpt-nano on $tmp/s.bin: .* 1 epoch(s) of 671 sequences of 128 tokens" <<<"$out" &&
  grep -qE "next-token accuracy [0-9.]+% \(31 sequences\)" <<<"$out" && ! grep -q "no separate test split" <<<"$out"
then pass; else fail "train on s.bin alone: $(tail -4 <<<"$out")"; fi
# the held-out ids are not trained on: an embedding of 200 ids takes the
# train part, and the test part's id 200 is the first it refuses (was: the
# whole file's, as the training data)
printf 'input tokens=32\nembed 32 vocab=200 positions=32\nlinear 256\n' >"$tmp/v200.cfg"
expect 1 "error: --data: $tmp/s.bin \(test part\) holds token id 200 at position 0 \(ids counted from 0\), outside the vocabulary \[0, 200\) of the embed of $tmp/v200.cfg" \
  "$bf" train --model "$tmp/v200.cfg" --data "$tmp/s.bin" --max-steps 1 --batch 4 --threads 2
# --test-data naming the token file, in any spelling, is its held-out part;
# another token file is read whole (1,000 ids: 7 windows of 128)
ln -s "$tmp/s.bin" "$tmp/link.bin"
for t in "$tmp/s.bin" "$tmp/./s.bin" "$tmp/link.bin"; do
  if out=$("$bf" train --model gpt-nano --data "$tmp/s.bin" --test-data "$t" --max-steps 1 --batch 4 --threads 2 2>&1) &&
    grep -q "batchfit: --test-data names the training data: testing on its held-out part, $tmp/s.bin (test part)$" <<<"$out" &&
    grep -qE "[ (]31 sequences" <<<"$out"; then pass; else fail "--test-data $t: $(tail -3 <<<"$out")"; fi
done
expect 0 "next-token accuracy [0-9.]+% \(7 sequences\)" \
  "$bf" train --model gpt-nano --data "$tmp/s.bin" --test-data "$tmp/t.bin" --max-steps 1 --batch 4 --threads 2
expect 0 "on 31 sequences" "$bf" eval --model gpt-nano --weights "$tmp/a.st" --data "$tmp/s.bin" --threads 2
expect 1 "error: --test-data: $tmp/t.bin \(test part\): 0 tokens make no sample .*: a token file's test part is every 20th block of 4096 ids; --test-data names the training data, so its held-out part is the test: give another token file as --test-data" \
  "$bf" train --model gpt-nano --data "$tmp/t.bin" --test-data "$tmp/t.bin" --max-steps 1 --batch 4 --threads 2
# a broken token file: what is wrong, where, what would be right
head -c 2000 "$tmp/t.bin" >"$tmp/cut.bin"
expect 1 "^batchfit: error: $tmp/cut.bin: the header says 1000 ids of 2 bytes, the file holds 976 bytes after it \(488 ids\): it is cut short; give the whole file \(or a header whose count, bytes 8-11, is 488\)$" \
  "$bf" train --model gpt-nano --data "$tmp/cut.bin" --max-steps 1 --threads 2
head -c 2001 "$tmp/t.bin" >"$tmp/odd.bin"
expect 1 "^batchfit: error: $tmp/odd.bin: 977 bytes after the 1024-byte header, not a whole number of 2-byte ids \(version 1\): the file is cut short or has bytes after its ids; the header says 1000 ids, 2000 bytes$" \
  "$bf" train --model gpt-nano --data "$tmp/s.bin" --test-data "$tmp/odd.bin" --max-steps 1 --threads 2
head -c 600 "$tmp/t.bin" >"$tmp/head.bin"
expect 1 "^batchfit: error: $tmp/head.bin: 600 bytes, shorter than a token file's header of 1024 bytes \(256 int32 beginning with 20240520\): the file is cut short$" \
  "$bf" train --model gpt-nano --data "$tmp/head.bin" --max-steps 1 --threads 2
# a header's vocabulary of 200: id 201 (67 * 3) is the first beyond it
python3 - "$tmp/t.bin" "$tmp/vocab.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[12:16] = (200).to_bytes(4, "little")
open(sys.argv[2], "wb").write(b)
PY
expect 1 "^batchfit: error: $tmp/vocab.bin: id 201 at position 67 is outside the vocabulary of 200 that its header gives \(the id at byte 1158\): a vocabulary above every id, or 0 \(the largest id \+ 1\), would be right$" \
  "$bf" train --model gpt-nano --data "$tmp/vocab.bin" --max-steps 1 --threads 2

# --seq and --attention on train, find and eval as on plan, through the one
# option table (was: plan's only; "unknown option '--attention' for train
# (another command's option)"). train plans the step plan does, and find
# confirms plan's largest batch, at each length and attention
peaks=""
for o in "" "--attention lean" "--seq 64" "--seq 64 --attention lean"; do
  # shellcheck disable=SC2086
  "$bf" train --model gpt-nano --data "$tmp/two.txt" $o --max-steps 1 --batch 8 --micro-batch 8 --eval-samples 4 \
    --threads 2 --quiet --log "$tmp/seq.jsonl" >/dev/null 2>&1 || fail "train $o failed"
  # shellcheck disable=SC2086
  "$bf" plan --model gpt-nano $o --batch 8 --memory 48MiB --threads 2 --json >"$tmp/seq_plan.json" 2>/dev/null
  # shellcheck disable=SC2086
  "$bf" find --model gpt-nano --data "$tmp/two.txt" $o --largest-only --memory 48MiB --threads 2 --json \
    >"$tmp/seq_find.json" 2>/dev/null
  got=$(python3 - "$tmp/seq.jsonl" "$tmp/seq_plan.json" "$tmp/seq_find.json" <<'PY'
import json, sys
start = next(json.loads(l) for l in open(sys.argv[1]) if '"event":"start"' in l)
plan, find = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
ok = start["plan"]["peak"] == plan["plans"][0]["peak"] and find["largest"]["batch"] == plan["max_batch"]["with_margin"]
print("%s %d,%d" % ("ok" if ok else "differ: %s" % [start["plan"]["peak"], plan["plans"][0]["peak"],
      find["largest"]["batch"], plan["max_batch"]["with_margin"]], plan["plans"][0]["peak"], find["largest"]["batch"]))
PY
)
  case "$got" in ok*) pass ;; *) fail "train/find $o against plan: $got" ;; esac
  peaks="$peaks ${got#ok }"
done
# each takes effect: four peaks, four largest batches, no two alike
if [ "$(tr ' ' '\n' <<<"$peaks" | grep -c .)" -eq 4 ] &&
  [ "$(tr ' ' '\n' <<<"$peaks" | cut -d, -f1 | sort -u | grep -c .)" -eq 4 ] &&
  [ "$(tr ' ' '\n' <<<"$peaks" | cut -d, -f2 | sort -u | grep -c .)" -eq 4 ]; then pass; else
  fail "--seq/--attention changed nothing: peak,largest =$peaks"; fi
expect 0 "training gpt-nano on $tmp/two.txt: .* 1 epoch\(s\) of 1632 sequences of 64 tokens" \
  "$bf" train --model gpt-nano --data "$tmp/two.txt" --seq 64 --max-steps 1 --batch 4 --eval-samples 4 --threads 2
expect 0 "batchfit find: gpt-nano \(preset\) on $tmp/two.txt: 842,496 parameters, input 64 tokens" \
  "$bf" find --model gpt-nano --data "$tmp/two.txt" --seq 64 --largest-only --memory 48MiB --threads 2
# eval --seq scores windows of N as a train --seq N run does: two.txt's test part, 5,500 bytes, in 85 of 64
expect 0 "on 85 sequences" "$bf" eval --model gpt-nano --weights "$tmp/a.st" --data "$tmp/two.txt" --seq 64 --threads 2
# a checkpoint keeps --seq (a resumed run trains at the length it started with) and --attention
"$bf" train --model gpt-nano --data "$tmp/two.txt" --test-data "$tmp/b.txt" --seq 64 --attention lean --max-steps 2 \
  --batch 4 --threads 2 --checkpoint "$tmp/seqck" --checkpoint-every 1 --quiet >/dev/null 2>&1 || fail "train --seq 64 --checkpoint"
rm -f "$tmp/seqck"/ckpt-000000000002.*
expect 0 "1 epoch\(s\) of 1632 sequences of 64 tokens, attention lean$" "$bf" train --resume "$tmp/seqck" --threads 2 --log "$tmp/seqck.jsonl"
"$bf" plan --model gpt-nano --seq 64 --attention lean --batch 4 --threads 2 --json >"$tmp/seqck_plan.json" 2>/dev/null
if python3 - "$tmp/seqck.jsonl" "$tmp/seqck_plan.json" <<'PY'
import json, sys
start = next(json.loads(l) for l in open(sys.argv[1]) if '"event":"start"' in l)
sys.exit(0 if start["plan"]["peak"] == json.load(open(sys.argv[2]))["plans"][0]["peak"] else 1)
PY
then pass; else fail "the resumed run's plan is not plan --seq 64 --attention lean's"; fi
expect 1 "error: --seq: the checkpoint .* holds 64, not 32" "$bf" train --resume "$tmp/seqck" --seq 32 --threads 2
# synthetic data's test set is another draw (seed + 1), not the training
# data (was: "warning: synthetic has no separate test split, so "test"
# figures are on the training data")
if out=$("$bf" train --model gpt-nano --data synthetic --seq 16 --max-steps 1 --batch 4 --eval-samples 4 --threads 2 2>&1) &&
  ! grep -q "no separate test split" <<<"$out"; then pass; else fail "synthetic: $(head -2 <<<"$out")"; fi
# where the option has nothing to do, the refusal says why
expect 2 "^batchfit: error: --attention: keeps each attention matrix, or not, for backward, and eval takes no backward step \(stored and lean score alike\): leave it out" \
  "$bf" eval --model gpt-nano --weights "$tmp/a.st" --data "$tmp/two.txt" --attention lean --threads 2
expect 2 "^batchfit: error: --seq: sets the length of windows of the data, and seq-max makes the data's lines the samples, of at most seq-max tokens \(the model's length then\): give one of them" \
  "$bf" train --model gpt-nano --data "$tmp/two.txt" --seq 64 --seq-max 64 --max-steps 1 --threads 2
expect 1 "^batchfit: error: --attention: the model has no attention layer" \
  "$bf" find --model cnn --attention lean --largest-only --memory 64MiB --threads 2
expect 1 "^batchfit: error: --seq: applies to token models" \
  "$bf" train --model cnn --data synthetic --seq 4 --max-steps 1 --threads 2

# image folders' options for token data: refused naming the option, not ignored
for o in "--mean 0.5" "--std 0.2" "--center-crop 24" "--random-resized-crop 24" "--resize 32" "--skip-bad-images"; do
  expect 1 "^batchfit: error: ${o%% *}: is an image folders' option, and .*two.txt holds token ids: leave it out" \
    "$bf" train --model gpt-nano --data "$tmp/two.txt" --max-steps 1 --quiet $o
done

# a token run's report says its figures per token (was: "test accuracy" and samples/s)
"$bf" train --model gpt-nano --data "$tmp/two.txt" --test-data "$tmp/two.txt" --max-steps 2 --batch 4 \
  --eval-samples 4 --report "$tmp/tok.html" --log "$tmp/tok.jsonl" --quiet >/dev/null 2>&1 || fail "the token run failed"
expect 0 '"event":"end".*"tokens":[1-9][0-9]*,"test_loss":[0-9.]+' tail -1 "$tmp/tok.jsonl"
expect 0 "Finished</strong>: 2 steps, [0-9,]+ tokens, test loss [0-9.]+ per token \(next-token accuracy [0-9.]+%\), .* tokens/s\)" \
  cat "$tmp/tok.html"

finish
