# tokens_lib.sh - what the token scripts (tokens.sh, tokens_bin.sh,
# tokens_seq.sh) share, sourced after BATCHFIT and SRC are read: lib.sh, the
# texts they train on, weights to evaluate, and a token file writer.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# a text: 400 lines, non-ASCII, blank lines
for i in $(seq 400); do
  if [ $((i % 7)) -eq 0 ]; then echo; else echo "line $i: naïve café straße 日本語 the quick brown fox"; fi
done >"$tmp/a.txt"

# another text: a test text of its own (a.txt is too short for a test part)
for i in $(seq 60); do echo "another text, line $i, with its own words: ÿ ñ"; done >"$tmp/b.txt"

# a text of lines of 99 and of 9 tokens, alternating, long enough for a test part
for i in $(seq 1000); do printf '%099d\n%09d\n' "$i" "$i"; done >"$tmp/two.txt"

# tok_weights: gpt-nano trained 2 steps on a.txt, tested on b.txt: its
# weights in a.st, the run's figures in tr.json
tok_weights() {
  "$bf" train --model gpt-nano --data "$tmp/a.txt" --test-data "$tmp/b.txt" --max-steps 2 --batch 4 --threads 2 \
    --save "$tmp/a.st" --json --quiet >"$tmp/tr.json" 2>/dev/null
}

# tok_file PATH IDS [ARG...]: a token file of a vocabulary of 256 (uint16
# ids, llm.c's header), IDS a Python expression of the ids (ARGs are
# sys.argv[3:])
tok_file() {
  python3 - "$@" <<'PY'
import struct, sys
ids = eval(sys.argv[2])
open(sys.argv[1], "wb").write(struct.pack("<4i", 20240520, 1, len(ids), 256) + bytes(1008) +
                              b"".join(struct.pack("<H", i) for i in ids))
PY
}
