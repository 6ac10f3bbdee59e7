#!/usr/bin/env bash
# tokens_seq.sh BATCHFIT SRC - --seq and --attention on train, find and eval
# as on plan: the plans agree, each option takes effect, a checkpoint keeps
# them, and where they have nothing to do the refusal says why; synthetic
# token data's test set. Tiny runs.
set -u
bf=$1
src=$2
. "$(dirname "$0")/tokens_lib.sh"

tok_weights # a.st: weights to evaluate
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

finish
