#!/usr/bin/env bash
# tokens.sh BATCHFIT SRC - token models on text a user writes: models and
# data that do not match, short texts and texts of blank lines under
# --seq-max, evaluation of saved weights on another text, a token run's
# report. Tiny runs. (Token files: tokens_bin.sh; --seq and --attention:
# tokens_seq.sh.)
set -u
bf=$1
src=$2
. "$(dirname "$0")/tokens_lib.sh"

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
tok_weights # a.st, and its run's figures in tr.json
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
expect 1 "$tmp/imgs reads as images \(a folder of class folders\), but a token model reads token ids: give it kjv, a token file, a text .* or a folder of such texts" \
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
expect 1 "data set '$tmp/none.txt' not found \(No such file or directory\): give kjv, a token file, a .txt file or a folder of them \(a token model's data\)" \
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
# lines were never trained on). two.txt's lines of 99 and of 9 tokens,
# alternating: 50 samples of one kind only would be 4950 or 450 tokens.
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
