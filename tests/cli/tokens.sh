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

# a token model whose scores are one vector per sample (flatten) has one
# label per sample; token data has one per token: refused before any step
# (was a heap overflow: T labels per sample written into room for one)
printf 'input tokens=8\nembed 4 vocab=256\nflatten\nlinear 256\n' >"$tmp/flat.cfg"
expect 1 "--data: $tmp/flat.cfg gives one vector of class scores per sample, but the token data $tmp/a.txt has a label per token \(8 per sample" \
  "$bf" train --model "$tmp/flat.cfg" --data "$tmp/a.txt" --test-data "$tmp/a.txt" --max-steps 1 --batch 4 --threads 2
expect 1 "gives one vector of class scores per sample, but the token data" \
  "$bf" find --model "$tmp/flat.cfg" --data "$tmp/a.txt" --largest-only --memory 64MiB --threads 2

finish
