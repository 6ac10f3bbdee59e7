#!/usr/bin/env bash
# tokens_bin.sh BATCHFIT SRC - token files (llm.c's format) as a token model's
# data: split into train and test parts by blocks of ids, another file as
# --test-data read whole, refused when broken (cut short, a partial id, a
# header alone, an id beyond the header's vocabulary) or given --seq-max.
# Tiny runs.
set -u
bf=$1
src=$2
. "$(dirname "$0")/tokens_lib.sh"

tok_weights # a.st: weights to evaluate
# a.txt's bytes as a token file
tok_file "$tmp/a.bin" 'list(open(sys.argv[3], "rb").read())' "$tmp/a.txt"
# a token file too short for a test part (every 20th block of 4096 ids) says
# so, as a short text does; another file as --test-data is read whole (was:
# trained, and tested on its training ids, with a warning)
expect 1 "error: $tmp/a.bin \(test part\): 0 tokens make no sample of 128 tokens and their 128 labels \(at least 129 are needed\): a token file's test part is every 20th block of 4096 ids; give the test token file as --test-data \(read whole\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --max-steps 1 --batch 4 --eval-samples 4 --threads 2
expect 0 "training gpt-nano on $tmp/a.bin: .* 1 epoch\(s\) of $(( ($(wc -c <"$tmp/a.txt") - 1) / 128 )) sequences of 128 tokens" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --test-data "$tmp/a.txt" --max-steps 1 --batch 4 --eval-samples 4 --threads 2
# --seq-max reads a text's lines; a token file has none: refused (was
# trained silently on windows of N, the model cut to N tokens)
expect 1 "--seq-max: $tmp/a.bin is a token file, which has no lines: --seq-max makes a text's lines the samples; leave it out \(windows of the model's tokens\) or give the text \(a .txt file\)" \
  "$bf" train --model gpt-nano --data "$tmp/a.bin" --seq-max 64 --max-steps 1 --batch 4 --threads 2
expect 1 "--seq-max: $tmp/a.bin is a token file, which has no lines" \
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/a.bin" --seq-max 64 --max-steps 1 --batch 4 --threads 2

# a token file given alone is split as a text is: its ids in blocks of
# 4096, every 20th block held out (was: trained on whole, and "tested" on
# its own training ids, with a warning). 90,000 ids: ids 77,824-81,919 are
# the test part (4,096 ids, 31 windows of 128), the other 85,904 the train
# part (671); train ids are below 200, held-out ids 200 and up.
tok_file "$tmp/s.bin" '[200 + i % 4096 % 56 if (i // 4096) % 20 == 19 else i * 7 % 200 for i in range(90000)]'
tok_file "$tmp/t.bin" '[i * 3 % 256 for i in range(1000)]'
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

finish
