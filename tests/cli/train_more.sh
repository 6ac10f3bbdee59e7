#!/usr/bin/env bash
# train_more.sh BATCHFIT SRC - train's longer runs: recomputation gives the
# weights of keeping everything, a token model at bf16 and in token budgets.
set -u
bf=$1
src=$2
. "$(dirname "$0")/lib.sh"
m=$src/models/mlp.cfg

# storage: recomputation regenerates exactly what the forward computed (batch
# norm's running statistics moved once, dropout's mask redrawn the same), so
# the weights are bit-identical to keeping everything; bad values are usage
# errors
rm_=$src/models/resnet-mini.cfg
for r in none blocks sqrt auto; do
  expect 0 "test accuracy" "$bf" train --model "$rm_" --recompute $r --memory 200MiB --epoch-samples 512 \
    --eval-samples 100 --batch 64 --micro-batch 32 --max-steps 4 --seed 3 --threads 2 --save "$tmp/rc-$r.st"
done
for r in blocks sqrt auto; do
  if cmp -s "$tmp/rc-none.st" "$tmp/rc-$r.st"; then passes=$((passes + 1)); else
    echo "FAIL: --recompute $r gave other weights than none"; fails=$((fails + 1)); fi
done
expect 0 "storage: BF16 lean, recompute auto -> cuts: [0-9.]+% of a step's work is recomputed at micro-batch 32" \
  "$bf" train --model "$rm_" --precision bf16 --recompute auto --memory 12MiB --epoch-samples 256 --eval-samples 100 \
  --batch 32 --max-steps 2 --threads 2
expect 2 "--precision: unknown precision 'f64' \(valid: f32, bf16, f16, auto\)" "$bf" train --model "$m" --precision f64
# --precision auto: bf16 where the CPU computes it natively (AVX512_BF16 or AMX, as /proc/cpuinfo says and
# oneDNN uses), else f32; with oneDNN capped below them (AVX-512 alone emulates bf16, slower than f32) f32
# (scripts/test.sh runs some passes with oneDNN capped to AVX2)
isa=${ONEDNN_MAX_CPU_ISA:-ALL}
case "${isa^^}" in
  SSE41 | AVX | AVX2* | AVX512_CORE | AVX512_CORE_VNNI) capped=1 ;;
  *) capped=0 ;;
esac
if [ $capped = 0 ] && grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then want="BF16 \(precision auto: native here\)"; else
  want="F32 \(precision auto: no native bf16 here\)"; fi
expect 0 "batchfit: storage: $want lean" "$bf" train --model "$m" --precision auto --max-steps 2 --epoch-samples 256 \
  --eval-samples 100 --threads 2
ONEDNN_MAX_CPU_ISA=AVX512_CORE expect 0 "batchfit: storage: F32 \(precision auto: no native bf16 here\) lean" "$bf" \
  train --model "$m" --precision auto --max-steps 2 --epoch-samples 256 --eval-samples 100 --threads 2
expect 2 "--recompute: unknown recomputation 'all' \(valid: none, blocks, sqrt, auto\)" "$bf" train --model "$m" \
  --recompute all
expect 1 "f16" "$bf" train --model "$m" --precision f16 --max-steps 1

# a token model at bf16 (attention and embedding on 16-bit activations) on
# the kjv data set when it is installed: 20 steps take the test loss from
# ln 256 = 5.5 to below 4 per token, as at f32 (3.18 both)
kjv=${BFIT_KJV:-/usr/local/share/batchfit/kjv.txt}
if [ -s "$kjv" ]; then
  expect 0 "test loss [0-3]\.[0-9]+ per token .* after 1 epoch\(s\), 20 steps" "$bf" train --model gpt-nano \
    --data kjv --precision bf16 --batch 8 --max-steps 20 --eval-samples 200 --threads 2
  # a budget of 2048 tokens: whole verses until they reach it, the micro-batch
  # in tokens, the result per token and the padding share
  expect 0 "training gpt-nano on kjv: .* batch 2048 tokens \(micro-batch 2048 tokens: up to 16 sequences of 128" \
    "$bf" train --model gpt-nano --data kjv --seq-max 128 --batch-tokens 2048 --max-steps 3 --eval-samples 50 \
    --threads 2 --optimizer adamw --lr 2e-3
  expect 0 "m 2048 x 1 = 2[0-9]{3} tokens in [0-9]+ sequences" "$bf" train --model gpt-nano --data kjv --seq-max 128 \
    --batch-tokens 2048 --max-steps 3 --eval-samples 50 --threads 2 --optimizer adamw --lr 2e-3 --log "$tmp/tok.jsonl"
  if grep -q '"sequences":' "$tmp/tok.jsonl" && grep -q '"batch_tokens":1' "$tmp/tok.jsonl"; then
    passes=$((passes + 1)); else echo "FAIL: the log of a token budget lacks its sequences"; fails=$((fails + 1)); fi
else
  echo "skip: gpt-nano on kjv at bf16 ($kjv missing: scripts/kjv.sh, or BFIT_KJV)"
fi
# another model's weights: said so, with both shapes; a token model has no
# normalisation to blame
"$bf" train --model gpt-nano --data synthetic --max-steps 1 --batch 2 --eval-samples 2 --save "$tmp/gn.st" \
  --quiet >/dev/null 2>&1
printf 'input tokens=32\nembed 32 vocab=256\nlinear 256\n' >"$tmp/t32.cfg"
expect 1 "tensor '0.weight' is \[256 x 128\], the model wants \[256 x 32\]: the weights are for another model" \
  "$bf" eval --model "$tmp/t32.cfg" --weights "$tmp/gn.st" --data synthetic --samples 4
"$bf" train --model "$m" --max-steps 1 --eval-samples 10 --save "$tmp/mlpw.st" --quiet >/dev/null 2>&1
expect 1 "tensor '0.weight' is missing: the weights are for another model" \
  "$bf" eval --model gpt-nano --weights "$tmp/mlpw.st" --data synthetic --samples 4
printf '\n%.0s' $(seq 5000) >"$tmp/blank.txt"
expect 1 "--data: $tmp/blank.txt \(train part, lines\) has no training samples: with --seq-max" \
  "$bf" train --model gpt-nano --data "$tmp/blank.txt" --seq-max 64 --batch 8 --max-steps 3
expect 1 "--data: gpt-nano is a token model \(its input is 128 token ids\) but the data set fashion-mnist holds samples of 1x28x28: give it token data, e.g. kjv" \
  "$bf" train --model gpt-nano --max-steps 1
# a test set of its own that does not fit the model is the test data's fault, and named so
expect 1 "--test-data: gpt-nano is a token model \(its input is 128 token ids\) but the data set fashion-mnist holds samples of 1x28x28" \
  "$bf" train --model gpt-nano --data kjv --test-data fashion-mnist --max-steps 1
expect 1 "--seq-max: must be 1 to 128 \(the model's positions\), got 129" "$bf" train --model gpt-nano --seq-max 129 \
  --max-steps 1
expect 2 "--batch-tokens: --batch and --batch-tokens both give the effective batch" "$bf" train --model gpt-nano --batch 8 \
  --batch-tokens 1024
expect 2 "--batch-tokens: auto is not supported yet" "$bf" train --model gpt-nano --batch-tokens auto
expect 2 "--batch-tokens: 0 is out of range" "$bf" train --model gpt-nano --batch-tokens 0
expect 1 "batchfit: error: --batch-tokens: counts tokens, and .*mlp.cfg is not a token model" "$bf" train --model "$m" \
  --batch-tokens 1024 --max-steps 1

# --weights: a new run starts from a finished run's saved weights (training
# more after it, or fine-tuning): at lr 1e-12 the weights stay where they
# were, so an evaluation gives the first run's figures; a checkpoint's
# weights come with --resume, never with --weights
fm=(--model "$m" --epoch-samples 1024 --batch 64 --optimizer sgd --momentum 0 --quiet)
"$bf" train "${fm[@]}" --epochs 1 --save "$tmp/w1.st" >/dev/null || fail "--weights: the first run failed"
"$bf" train "${fm[@]}" --max-steps 2 --lr 1e-12 --weights "$tmp/w1.st" --save "$tmp/w2.st" >/dev/null ||
  fail "--weights: the second run failed"
e1=$("$bf" eval --model "$m" --weights "$tmp/w1.st" --eval-samples 2000 2>&1 | tail -1)
e2=$("$bf" eval --model "$m" --weights "$tmp/w2.st" --eval-samples 2000 2>&1 | tail -1)
[ -n "$e1" ] && [ "$e1" = "$e2" ] && pass || fail "--weights: the run did not start from the saved weights ($e1 / $e2)"
"$bf" train "${fm[@]}" --max-steps 2 --lr 1e-12 --save "$tmp/w0.st" >/dev/null || fail "--weights: the control failed"
e0=$("$bf" eval --model "$m" --weights "$tmp/w0.st" --eval-samples 2000 2>&1 | tail -1)
[ "$e0" != "$e1" ] && pass || fail "--weights: a run from drawn weights scores as the saved ones ($e0)"
expect 1 "^batchfit: error: --weights: .*w1.st: tensor '0.weight' is missing: the weights are for another model" \
  "$bf" train --model cnn --weights "$tmp/w1.st" --max-steps 1 --quiet
expect 2 "--weights: starts a new run from saved weights, and resume continues" "$bf" train --model "$m" \
  --weights "$tmp/w1.st" --resume "$tmp"

finish
