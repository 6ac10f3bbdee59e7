#!/usr/bin/env bash
# mlm.sh BATCHFIT SRC - BERT's masked-LM objective (--mask-tokens, --mask-id,
# --special-ids) on train and eval: a bidirectional model trains on a text's
# masked tokens, eval scores the same test masks the run did, a checkpoint
# keeps the objective, and each misuse is refused saying why (a causal
# model, no mask id, one outside the vocabulary, a token budget, a
# classifier's data, a list that is not ids); a bidirectional model trained
# on the next token is warned about. Tiny runs.
set -u
bf=$1
src=$2
. "$(dirname "$0")/lib.sh"

cat >"$tmp/enc.cfg" <<'SPEC'
input tokens=32
embed 16 vocab=256 positions=32
residual {
 linear 48
 attention 2 causal=0
 linear 16
}
layernorm
linear 256
SPEC
sed 's/ causal=0//' "$tmp/enc.cfg" >"$tmp/dec.cfg"
for i in $(seq 1 2100); do echo "the cat sat on the mat $i and the dog ran to the log"; done >"$tmp/t.txt"
mkdir -p "$tmp/cls/a" "$tmp/cls/b"
for i in $(seq 1 21); do echo "aaa $i" >"$tmp/cls/a/$i.txt"; echo "bbb $i" >"$tmp/cls/b/$i.txt"; done
run=(--data "$tmp/t.txt" --seq-max 32 --batch 16 --lr 3e-3 --optimizer adamw --threads 2)
mask=(--mask-tokens 0.15 --mask-id 1 --special-ids 10)

# trains, and says what it scores
expect 0 "epoch 2/2: .*masked-token accuracy" "$bf" train --model "$tmp/enc.cfg" "${run[@]}" "${mask[@]}" --epochs 2 \
  --save "$tmp/w.st" --checkpoint "$tmp/ck" --log "$tmp/w.jsonl"
final=$(grep -o '"test_loss":[0-9.]*' "$tmp/w.jsonl" | tail -1 | cut -d: -f2)
# eval scores the run's test masks: the run's last test loss, to the digits printed
expect 0 "test loss $(printf '%.4f' "$final") per token .* masked-token accuracy" "$bf" eval --model "$tmp/enc.cfg" \
  --weights "$tmp/w.st" --data "$tmp/t.txt" --seq-max 32 "${mask[@]}" --threads 2
expect 0 "next-token accuracy" "$bf" eval --model "$tmp/enc.cfg" --weights "$tmp/w.st" --data "$tmp/t.txt" \
  --seq-max 32 --threads 2
# the checkpoint keeps the objective: resumed with another share, refused
expect 1 "--mask-tokens: the checkpoint .* holds 0\.15, not 0\.3" "$bf" train --model "$tmp/enc.cfg" "${run[@]}" \
  --mask-tokens 0.3 --mask-id 1 --special-ids 10 --epochs 2 --resume "$tmp/ck"
expect 1 "--special-ids: .*holds 10, not 10,11" "$bf" train --model "$tmp/enc.cfg" "${run[@]}" "${mask[@]}" \
  --special-ids 10,11 --epochs 2 --resume "$tmp/ck"
# the head at the masked tokens only (14 rows of 32 here, what 0.15 draws with room): plan says so and plans
# less a sequence (and refuses a causal model, as train does); find confirms a larger largest batch with real
# masked steps
expect 0 "a masked LM: its head runs at the masked tokens only, 14 rows of each sequence's 32" "$bf" plan \
  --model "$tmp/enc.cfg" --memory 16MiB "${mask[0]}" "${mask[1]}"
expect 1 "--mask-tokens: .*dec.cfg has causal attention: a token sees none after it" "$bf" plan \
  --model "$tmp/dec.cfg" --memory 16MiB "${mask[0]}" "${mask[1]}"
largest() { "$bf" find --model "$tmp/enc.cfg" --data "$tmp/t.txt" --seq 32 --memory 16MiB --threads 2 "$@" 2>&1 |
  grep -o 'largest batch: [0-9]* .*confirmed: a real step ran' | grep -o '^largest batch: [0-9]*' | grep -o '[0-9]*$'; }
all=$(largest)
some=$(largest "${mask[@]}")
if [ -n "$all" ] && [ -n "$some" ] && [ "$some" -gt "$all" ]; then pass; else fail "find: largest $all, masked $some"; fi
# a bidirectional model on the next token: trains, warned
expect 0 "warning: .*enc.cfg's attention is bidirectional: each token sees the next one.*--mask-tokens 0.15" \
  "$bf" train --model "$tmp/enc.cfg" "${run[@]}" --max-steps 2
# refusals
expect 1 "--mask-tokens: .*dec.cfg has causal attention: a token sees none after it" "$bf" train \
  --model "$tmp/dec.cfg" "${run[@]}" "${mask[@]}" --max-steps 1
expect 1 "--mask-id: --mask-tokens needs the id a masked token becomes: give --mask-id" "$bf" train \
  --model "$tmp/enc.cfg" "${run[@]}" --mask-tokens 0.15 --max-steps 1
expect 1 "--mask-id: 300 is outside the vocabulary \[0, 256\) of .*enc.cfg's embedding" "$bf" train \
  --model "$tmp/enc.cfg" "${run[@]}" --mask-tokens 0.15 --mask-id 300 --max-steps 1
expect 1 "--batch-tokens: counts the tokens that have a label, and a masked LM labels only those it masks" "$bf" \
  train --model "$tmp/enc.cfg" --data "$tmp/t.txt" --seq-max 32 --batch-tokens 256 "${mask[@]}" --max-steps 1
expect 2 "--special-ids: '10,,11' at column 4: expected ids from 0 to 16777215" "$bf" train --model "$tmp/enc.cfg" \
  "${run[@]}" --mask-tokens 0.15 --mask-id 1 --special-ids 10,,11
expect 2 "--mask-tokens: .*2.*expected" "$bf" train --model "$tmp/enc.cfg" "${run[@]}" --mask-tokens 2 --mask-id 1
sed 's/linear 256$/select 0\nlinear 2/' "$tmp/enc.cfg" >"$tmp/cls.cfg"
expect 1 "--mask-tokens: masks the tokens of a language model's text, but .*cls holds one class a sequence" "$bf" \
  train --model "$tmp/cls.cfg" --data "$tmp/cls" "${mask[@]}" --max-steps 1 --threads 2
expect 1 "--mask-tokens: predicts the masked tokens, but .*cls.cfg gives one vector of scores a sequence" "$bf" \
  train --model "$tmp/cls.cfg" --data "$tmp/t.txt" "${mask[@]}" --max-steps 1 --threads 2
finish
