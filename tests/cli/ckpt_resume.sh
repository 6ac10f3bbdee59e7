#!/usr/bin/env bash
# ckpt_resume.sh BATCHFIT SRC [PYTHON [PARTS]] - resuming, and everything
# around it (PARTS: runs, the first two items and --batch-tokens; files, the
# rest; default both: CTest runs them as two tests of under a minute each):
#   - --batch auto and --batch adaptive resume exactly (weights and every
#     step's record: loss, lr, E, m, noise scale), also after a SIGTERM;
#     their decisions depend on measured time, so these runs use the test
#     clock (BFIT_TEST_CLOCK: a counter), which makes them repeatable;
#   - a resume with another memory capacity (the micro-batch is re-planned)
#     or thread count;
#   - a resume whose options contradict the checkpoint is refused, naming the
#     option and what the checkpoint holds;
#   - corrupt, truncated, foreign and version-mismatched checkpoints: a clear
#     error naming the file, nothing changed;
#   - checkpoints are weights for `batchfit eval` and for PyTorch;
#   - memory below micro-batch 1: a checkpoint, exit 3, what was missing;
#   - the event log of a failed run ends with an error event;
#   - the issue's tight-memory runs evaluate within the plan.
set -u
bf=$1
src=$2
py=${3:-/usr/bin/python3}
parts=${4:-runs,files}
. "$(dirname "$0")/lib.sh"
part() { [[ ",$parts," == *",$1,"* ]]; }
for p in ${parts//,/ }; do
  case $p in runs | files) ;; *) echo "unknown part '$p' (want runs, files)"; exit 2 ;; esac
done
have_torch() { [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null; }

records() {
  grep '"event":"step"' "$1" | sed -E 's/"time":[0-9.]+,//; s/"mem":[0-9]+,"capacity":[0-9]+,//'
}

# same_tail REF_ST OUT_ST REF_LOG LOG WHAT: the same weights, and the
# resumed log's step records are the last ones of the reference's
same_tail() {
  local n same_rec=1
  n=$(records "$4" | wc -l)
  [ "$n" -gt 0 ] && diff <(records "$3" | tail -n "$n") <(records "$4") >"$tmp/diff" || same_rec=0
  if ! cmp -s "$1" "$2"; then
    # say where the runs parted, so a failure that does not repeat can be read
    fail "$5: the weights differ from the uninterrupted run's (step records $([ $same_rec = 1 ] && echo the same || echo differ))"
    [ $same_rec = 1 ] || head -4 "$tmp/diff"
    for f in "$3" "$4"; do
      echo "  last events of $(basename "$f"):"
      grep -E '"event":"(batch_change|eval|end|ladder|oom)"' "$f" | sed -E 's/"time":[0-9.]+,//' | tail -n 4 | cut -c1-240
    done
  elif [ $same_rec = 0 ]; then
    fail "$5: the step records differ from the uninterrupted run's:"
    head -4 "$tmp/diff"
  else
    pass
  fi
}

ck() { printf '%s/ckpt-%012d.safetensors' "$1" "$2"; }

# resume_from DIR STEP NAME [OPTIONS...]: resume a copy of one checkpoint
# (--save and --log new files, the rest from the checkpoint)
resume_from() {
  local dir=$1 step=$2 name=$3
  shift 3
  mkdir -p "$tmp/$name"
  cp "$(ck "$dir" "$step")" "$tmp/$name/"
  "$bf" train --resume "$tmp/$name" --save "$tmp/$name.st" --log "$tmp/$name.jsonl" --quiet "$@" >/dev/null 2>"$tmp/err" ||
    fail "resume of $name: $(cat "$tmp/err")"
}

printf 'input 1x28x28\nflatten\nlinear 64\nrelu\nlinear 10\n' >"$tmp/tiny.cfg"

if part runs; then
  # ---- --batch auto: E changes at step 644 (goodput, today) --------------------------------
  export BFIT_TEST_CLOCK=0.001
  auto=(--model "$tmp/tiny.cfg" --epoch-samples 6000 --eval-samples 500 --batch auto --batch-min 16 --batch-max 256
    --lr-ref-batch 16 --threads 1 --epochs 3 --no-prefetch --quiet)
  "$bf" train "${auto[@]}" --save "$tmp/auto.st" --log "$tmp/auto.jsonl" --checkpoint "$tmp/a" --checkpoint-every 50 \
    --keep 100 >/dev/null || fail "the auto run failed"
  "$bf" train "${auto[@]}" --save "$tmp/auto_nock.st" >/dev/null
  cmp -s "$tmp/auto.st" "$tmp/auto_nock.st" || fail "auto: writing checkpoints changed the run"
  grep -q '"event":"batch_change".*"reason":"goodput"' "$tmp/auto.jsonl" ||
    fail "auto: the run did not change E (the test needs it to)"
  for s in 100 600 650; do
    resume_from "$tmp/a" "$s" "auto$s"
    same_tail "$tmp/auto.st" "$tmp/auto$s.st" "$tmp/auto.jsonl" "$tmp/auto$s.jsonl" "auto resumed at step $s"
  done
  # a SIGTERM while it trains (a step abandoned mid-way), then a resume. The
  # steps take about a millisecond: on a loaded machine the run can end between
  # the log reaching the step and the signal, so a run that had already ended
  # (its log has `end`) is tried again, earlier
  for try in 1 2 3; do
    rm -rf "$tmp/at" "$tmp/autot.jsonl"
    "$bf" train "${auto[@]}" --save "$tmp/autot.st" --log "$tmp/autot.jsonl" --checkpoint "$tmp/at" \
      --checkpoint-every 100 >/dev/null 2>&1 &
    pid=$!
    at=$(( try == 1 ? 300 + RANDOM % 300 : 100 ))
    while n=$(grep -c '"event":"step"' "$tmp/autot.jsonl" 2>/dev/null); [ "${n:-0}" -lt "$at" ]; do
      kill -0 "$pid" 2>/dev/null || break # ended before that step: not a hang
      sleep 0.01
    done
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 0 ] && grep -q '"event":"end"' "$tmp/autot.jsonl" && continue
    break
  done
  [ "$rc" -eq 143 ] || fail "auto: SIGTERM gave exit $rc"
  "$bf" train --resume "$tmp/at" --quiet >/dev/null 2>"$tmp/err" || fail "auto: resume after SIGTERM: $(cat "$tmp/err")"
  cmp -s "$tmp/auto.st" "$tmp/autot.st" || fail "auto: SIGTERM and resume: the weights differ"
  diff <(records "$tmp/auto.jsonl") <(records "$tmp/autot.jsonl") >/dev/null || fail "auto: SIGTERM and resume: the records differ"

  # ---- --batch adaptive: E changes at steps 100 and 200 (noise scale) ----------------
  adaptive=(--model "$tmp/tiny.cfg" --epoch-samples 4096 --eval-samples 500 --batch adaptive --batch-min 16
    --batch-max 256 --threads 1 --epochs 2 --no-prefetch --quiet)
  "$bf" train "${adaptive[@]}" --save "$tmp/adap.st" --log "$tmp/adap.jsonl" --checkpoint "$tmp/ad" \
    --checkpoint-every 25 --keep 100 >/dev/null || fail "the adaptive run failed"
  [ "$(grep -c '"reason":"noise scale"' "$tmp/adap.jsonl")" -ge 2 ] || fail "adaptive: E did not change twice"
  for s in 50 150 250; do
    resume_from "$tmp/ad" "$s" "adap$s"
    same_tail "$tmp/adap.st" "$tmp/adap$s.st" "$tmp/adap.jsonl" "$tmp/adap$s.jsonl" "adaptive resumed at step $s"
  done
  # ---- --batch-tokens over lines of varying length --------------------------------
  # a step's sequences are found again from the cursor, and the checkpoint keeps
  # the token budget and --seq-max (a resume that gives the batch in samples,
  # or another --seq-max, is refused)
  printf 'input tokens=32\nembed 16 vocab=256 positions=32\nresidual {\n layernorm\n linear 48\n attention 2\n linear 16\n}\nlayernorm\nlinear 256 tie=1 bias=0\n' >"$tmp/tok.cfg"
  for i in $(seq 1 2100); do printf 'line %d %.*s\n' "$i" $((i * 7 % 41)) "and it was so and it was good"; done >"$tmp/lines.txt"
  tok=(--model "$tmp/tok.cfg" --data "$tmp/lines.txt" --seq-max 32 --batch-tokens 300 --optimizer adamw --lr 3e-3
    --epochs 2 --epoch-samples 400 --eval-samples 50 --threads 1 --no-prefetch --quiet)
  "$bf" train "${tok[@]}" --save "$tmp/tok.st" --log "$tmp/tok.jsonl" --checkpoint "$tmp/tk" --checkpoint-every 5 \
    --keep 100 >/dev/null || fail "the token-budget run failed"
  for s in 5 40; do
    resume_from "$tmp/tk" "$s" "tok$s"
    same_tail "$tmp/tok.st" "$tmp/tok$s.st" "$tmp/tok.jsonl" "$tmp/tok$s.jsonl" "--batch-tokens resumed at step $s"
  done
  expect 1 "--batch: the checkpoint .* holds 300 tokens, not 300:" "$bf" train --resume "$(ck "$tmp/tk" 5)" --batch 300
  expect 1 "--seq-max: the checkpoint .* holds 32, not 24" "$bf" train --resume "$(ck "$tmp/tk" 5)" --seq-max 24
  unset BFIT_TEST_CLOCK
  # an auto run's checkpoint: refused as another kind of batch, and weights
  # (with its tracked gradient set aside) for PyTorch
  expect 1 "^batchfit: error: --batch: the checkpoint $(ck "$tmp/a" 100) holds auto, not adaptive" "$bf" train \
    --resume "$(ck "$tmp/a" 100)" --batch adaptive
  if have_torch; then
    "$py" "$src/tests/oracle/ckpt_torch.py" "$tmp/tiny.cfg" "$(ck "$tmp/a" 650)" 1000 \
      $("$bf" eval --model "$tmp/tiny.cfg" --weights "$(ck "$tmp/a" 650)" --samples 1000 --json |
        grep -oE '[0-9.]+,"accuracy":[0-9.]+' | tr -d '"a-z:' | tr , ' ') && pass ||
      fail "PyTorch: an auto run's checkpoint (with its tracked gradient)"
  else
    fail "$py with torch is needed for the PyTorch check (scripts/setup.sh installs python3-torch)"
  fi
fi


if part files; then
  # ---- another memory capacity ---------------------------------------------------
  # Accumulation sums the micro-batches' gradients in their order, and a matmul
  # sums a micro-batch's samples in its own blocks: another micro-batch is
  # another summation order, equal only to float rounding. So the exact
  # comparisons are: more memory, same micro-batch: the same bits as the
  # uninterrupted run; less memory: the same bits as a run whose memory
  # shrank at that step (--memory-schedule), which re-plans the micro-batch the
  # same way.
  m=$src/models/mlp.cfg
  mem=(--model "$m" --epoch-samples 1280 --eval-samples 200 --batch 64 --threads 1 --quiet)
  "$bf" train "${mem[@]}" --memory 1GiB --save "$tmp/big.st" --checkpoint "$tmp/mc" --checkpoint-every 10 >/dev/null
  "$bf" train "${mem[@]}" --memory 1GiB --memory-schedule 10:25088KiB --save "$tmp/shrunk.st" --log "$tmp/shrunk.jsonl" \
    >/dev/null
  # (the micro-batch the plan gives there: 23 today; read from the log, so a
  # change of the plan does not break the test)
  small=$(grep -oE '"reason":"memory shrank","m":[0-9]+,"prev_m":64' "$tmp/shrunk.jsonl" | grep -oE '"m":[0-9]+' | cut -d: -f2)
  [ -n "$small" ] && [ "$small" -lt 64 ] || fail "the memory schedule did not shrink m"
  resume_from "$tmp/mc" 10 more --memory 2GiB
  cmp -s "$tmp/big.st" "$tmp/more.st" && pass || fail "resumed with more memory (same micro-batch): the weights differ"
  # the thread count may change too: our reductions use fixed chunks, and
  # oneDNN's AVX-512 f32 matmuls here do not depend on the thread count (its
  # AVX2 gemm splits some products across the threads: the rounding moves)
  if grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo &&
    [ -z "${ONEDNN_MAX_CPU_ISA:-}${DNNL_MAX_CPU_ISA:-}" ]; then
    resume_from "$tmp/mc" 10 threads --threads 2
    cmp -s "$tmp/big.st" "$tmp/threads.st" && pass || fail "resumed with 2 threads instead of 1: the weights differ"
  else
    echo "skipped: resumed with 2 threads instead of 1, bit for bit (oneDNN's AVX2 gemm rounds by thread count)"
  fi
  resume_from "$tmp/mc" 10 less --memory 25088KiB
  grep -q "\"reason\":\"memory shrank\",\"m\":$small,\"prev_m\":64" "$tmp/less.jsonl" ||
    fail "resumed with less memory: m not re-planned to $small"
  cmp -s "$tmp/shrunk.st" "$tmp/less.st" && pass || fail "resumed with less memory: not the run whose memory shrank there"
  # another --micro-batch on resume: the change at the resumed step is a
  # batch_change the report and the count see, not an unmarked drop of m
  resume_from "$tmp/mc" 10 micro --micro-batch 16
  grep -q '"step":10,"reason":"micro-batch option","m":16,"prev_m":64,"E":64,"prev_E":64' "$tmp/micro.jsonl" &&
    grep -q '"event":"end".*"batch_changes":1}' "$tmp/micro.jsonl" && pass ||
    fail "resumed with --micro-batch 16: no batch_change from 64 at step 10 counted in the log"

  # ---- options that contradict the checkpoint ----------------------------------------
  c10=$(ck "$tmp/mc" 10)
  before=$(md5sum "$tmp"/mc/* | md5sum)
  holds="the checkpoint $c10 holds"
  expect 1 "^batchfit: error: --lr: $holds 0.05, not 0.1: a resumed run keeps the configuration it started with" \
    "$bf" train --resume "$c10" --lr 0.1
  expect 1 "^batchfit: error: --model: $holds $m, not $src/models/cnn.cfg" "$bf" train --resume "$c10" --model "$src/models/cnn.cfg"
  expect 1 "^batchfit: error: --batch: $holds 64, not auto" "$bf" train --resume "$c10" --batch auto
  expect 1 "^batchfit: error: --batch: $holds 64, not 32" "$bf" train --resume "$c10" --batch 32
  expect 1 "^batchfit: error: --optimizer: $holds sgd, not adamw" "$bf" train --resume "$c10" --optimizer adamw
  expect 1 "^batchfit: error: --seed: $holds 1, not 7" "$bf" train --resume "$c10" --seed 7
  expect 1 "^batchfit: error: --max-steps: $holds no step limit, not 1" "$bf" train --resume "$c10" --max-steps 1
  expect 1 "^batchfit: error: --precision: $holds f32, not bf16" "$bf" train --resume "$c10" --precision bf16
  expect 1 "^batchfit: error: --loss-scale: $holds the default \(dynamic for f16 only\), not dynamic" "$bf" train \
    --resume "$c10" --loss-scale 128
  expect 1 "^batchfit: error: --loss-scale: $holds the default \(dynamic for f16 only\), not none" "$bf" train \
    --resume "$c10" --loss-scale none
  # (a flag's value as the flag's: --no-lean holds no, as --no-normalize does)
  expect 1 "^batchfit: error: --no-lean: $holds no, not yes" "$bf" train --resume "$c10" --no-lean
  expect 1 "^batchfit: error: --no-normalize: $holds no, not yes" "$bf" train --resume "$c10" --no-normalize
  expect 1 "^batchfit: error: --lr-scaling: $holds the default \(linear for SGD, sqrt for AdamW\), not sqrt" "$bf" train \
    --resume "$c10" --lr-scaling sqrt
  expect 1 "^batchfit: error: --epoch-samples: $holds 1280, not 640" "$bf" train --resume "$c10" --epoch-samples 640
  expect 1 "^batchfit: error: --data: $holds fashion-mnist, not " "$bf" train --resume "$c10" --data "$tmp/x.csv"
  [ "$(md5sum "$tmp"/mc/* | md5sum)" = "$before" ] || fail "a refused resume changed the checkpoint directory"
  # a resume refused for its model (the spec file changed since) leaves the run's log as it was
  cp "$tmp/tiny.cfg" "$tmp/edit.cfg"
  "$bf" train --model "$tmp/edit.cfg" --epoch-samples 640 --eval-samples 100 --batch 64 --threads 1 --checkpoint \
    "$tmp/ed" --checkpoint-every 3 --log "$tmp/ed.jsonl" --quiet >/dev/null 2>&1 || fail "the run of edit.cfg failed"
  logsum=$(md5sum <"$tmp/ed.jsonl")
  sed -i 's/linear 64/linear 32/' "$tmp/edit.cfg"
  expect 1 "error: $tmp/ed/ckpt-0+6\.safetensors: tensor '1\.weight' is \[64 x 784\], the model wants \[32 x 784\]: the weights are for another model" \
    "$bf" train --resume "$(ck "$tmp/ed" 6)"
  [ "$(md5sum <"$tmp/ed.jsonl")" = "$logsum" ] && pass || fail "a resume refused for its model changed the run's log"
  # ... and for its data (the CSV file shorter since)
  awk 'BEGIN { srand(3); for (i = 0; i < 300; i++) printf "%.4f,%.4f,%.4f,%d\n", rand(), rand(), rand(), i % 3 }' >"$tmp/d.csv"
  printf 'input 3\nlinear 8\nrelu\nlinear 3\n' >"$tmp/csv.cfg"
  "$bf" train --model "$tmp/csv.cfg" --data "$tmp/d.csv" --batch 32 --threads 1 --checkpoint "$tmp/cs" --checkpoint-every 3 \
    --log "$tmp/cs.jsonl" --quiet >/dev/null 2>&1 || fail "the run of d.csv failed"
  logsum=$(md5sum <"$tmp/cs.jsonl")
  head -200 "$tmp/d.csv" >"$tmp/d2.csv" && mv "$tmp/d2.csv" "$tmp/d.csv"
  expect 1 "error: --data: the checkpoint $tmp/cs/ckpt-0+6\.safetensors is of a run with 300 samples per epoch, this data gives 200: not the data it trained on" \
    "$bf" train --resume "$(ck "$tmp/cs" 6)"
  [ "$(md5sum <"$tmp/cs.jsonl")" = "$logsum" ] && pass || fail "a resume refused for its data changed the run's log"
  # a long value (60 points of a batch schedule) is shown where it differs, so the reason still shows
  long=$(seq 0 59 | awk '{printf "%s%d:%d", (NR > 1 ? "," : ""), $1 * 1000, 64 + $1}')
  "$bf" train "${mem[@]}" --batch-schedule "$long" --max-steps 2 --checkpoint "$tmp/bsched" >/dev/null 2>&1 ||
    fail "the run with a 60-point batch schedule failed"
  expect 1 "^batchfit: error: --batch-schedule: the checkpoint $tmp/bsched/ckpt-0+2\.safetensors holds \.\.\.[0-9:,]*,58000:122,59000:123, not \.\.\.[0-9:,]*,58000:122: a resumed run keeps the configuration it started with \(leave it out" \
    "$bf" train --resume "$tmp/bsched" --batch-schedule "${long%,59000:123}"

  # ---- a new run into a directory of another run's checkpoints ---------------------------
  # (it would mix the two: --resume DIR takes the newest step, of either run,
  # and keeping the newest K removes the older ones, of either run)
  expect 1 "^batchfit: error: --checkpoint: $tmp/mc already holds the checkpoints of a run \(the newest: $tmp/mc/ckpt-0+20\.safetensors\): a new run would mix its checkpoints with them; resume that run with --resume $tmp/mc, or give the new run a directory of its own" \
    "$bf" train "${mem[@]}" --checkpoint "$tmp/mc" --checkpoint-every 1 --keep 1 --report "$tmp/mix.html"
  [ "$(md5sum "$tmp"/mc/* | md5sum)" = "$before" ] || fail "a refused new run changed the checkpoint directory"
  [ -e "$tmp/mc/events.jsonl" ] && fail "a refused new run left its events in the checkpoint directory"
  # two runs at once in one directory: the second is refused while the
  # first lives (a long run, held still with SIGSTOP once its log is there:
  # the lock is taken before the log is opened)
  "$bf" train "${mem[@]}" --epochs 50 --checkpoint "$tmp/busy" --checkpoint-every 1 --log "$tmp/busy.jsonl" \
    >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do [ -s "$tmp/busy.jsonl" ] && break; sleep 0.01; done
  kill -STOP "$pid"
  expect 1 "^batchfit: error: --checkpoint: $tmp/busy: another run is writing its checkpoints there \(a directory is one run's\)" \
    "$bf" train "${mem[@]}" --checkpoint "$tmp/busy" --save "$tmp/busy2.st"
  cp "$(ck "$tmp/mc" 10)" "$tmp/busy_from.st"
  expect 1 "^batchfit: error: --checkpoint: $tmp/busy: another run is writing its checkpoints there" \
    "$bf" train --resume "$tmp/busy_from.st" --checkpoint "$tmp/busy" --save "$tmp/busy2.st"
  kill -KILL "$pid"
  kill -CONT "$pid"
  wait "$pid" 2>/dev/null
  [ ! -e "$tmp/busy2.st" ] && ! ls "$tmp/busy" | grep -qv -e '^ckpt-' -e '^events' && pass ||
    fail "a refused second run wrote: $(ls "$tmp/busy2.st" "$tmp/busy" 2>&1)"
  # (that the lock goes with a killed process, ckpt_kill.sh's resumes after SIGKILL show)
  # a run that fails before its first checkpoint leaves no directory it made
  expect 1 "even at micro-batch 1" "$bf" train "${mem[@]}" --memory 1MiB --checkpoint "$tmp/never"
  [ -e "$tmp/never" ] && fail "a run that failed at its start left its checkpoint directory: $(ls -a "$tmp/never")" || pass
  mkdir "$tmp/fresh"
  echo notes >"$tmp/fresh/README"
  expect 0 "test accuracy" "$bf" train "${mem[@]}" --checkpoint "$tmp/fresh" --max-steps 2
  [ -e "$tmp/fresh/ckpt-000000000002.safetensors" ] && [ -e "$tmp/fresh/README" ] && pass ||
    fail "a new run into a directory without checkpoints: $(ls "$tmp/fresh")"

  # ---- damaged and foreign files --------------------------------------------------
  size=$(stat -c %s "$c10")
  mkdir "$tmp/bad"
  head -c $((size / 2)) "$c10" >"$tmp/bad/half.st"
  head -c 100 "$c10" >"$tmp/bad/head.st"
  cp "$c10" "$tmp/bad/flip.st"
  printf '\x55' | dd of="$tmp/bad/flip.st" bs=1 seek=$((size - 1000)) conv=notrunc 2>/dev/null
  head -c 5000 /dev/urandom >"$tmp/bad/random.st"
  : >"$tmp/bad/empty.st"
  sed 's/"version":"2"/"version":"9"/' "$c10" >"$tmp/bad/v9.st"
  # the state is JSON inside the header's JSON: its quotes are escaped
  sed 's/\\"step\\":\\"10\\"/\\"step\\":\\"19\\"/' "$c10" >"$tmp/bad/meta.st"
  cmp -s "$c10" "$tmp/bad/meta.st" && fail "the test did not change the state's step"
  expect 1 "error: $tmp/bad/half.st: tensor .* run past the [0-9]+ bytes of data after the header: the file is shorter than its header says \\(truncated\\)" "$bf" train --resume "$tmp/bad/half.st"
  expect 1 "error: $tmp/bad/head.st: not a safetensors file, or a truncated one: its header length [0-9]+ runs past the end of the file" "$bf" train --resume "$tmp/bad/head.st"
  expect 1 "error: $tmp/bad/flip.st: tensor \"optimizer\..*\" fails its checksum .*: the file is damaged" "$bf" train \
    --resume "$tmp/bad/flip.st"
  expect 1 "error: $tmp/bad/random.st: " "$bf" train --resume "$tmp/bad/random.st"
  expect 1 "error: $tmp/bad/empty.st: only 0 bytes" "$bf" train --resume "$tmp/bad/empty.st"
  expect 1 "error: $tmp/bad/v9.st is a checkpoint of version 9; this batchfit reads version 2" "$bf" train \
    --resume "$tmp/bad/v9.st"
  expect 1 "error: $tmp/bad/meta.st: the metadata fails its checksum .*: the file is damaged" "$bf" train \
    --resume "$tmp/bad/meta.st"
  expect 1 "error: $tmp/big.st is a weights file \(from saving\), not a checkpoint" "$bf" train --resume "$tmp/big.st"
  expect 1 "error: --resume: $tmp/nothing: No such file or directory" "$bf" train --resume "$tmp/nothing"
  # the newest of a directory damaged: the one before it is named
  mkdir "$tmp/bad2"
  cp "$c10" "$tmp/bad2/ckpt-000000000005.safetensors"
  cp "$tmp/bad/flip.st" "$tmp/bad2/ckpt-000000000010.safetensors"
  expect 1 "fails its checksum .*: the file is damaged; the checkpoint before it may be whole: --resume $tmp/bad2/ckpt-000000000005.safetensors" \
    "$bf" train --resume "$tmp/bad2"
  mkdir "$tmp/emptydir"
  expect 1 "error: --resume: $tmp/emptydir holds no checkpoint \(ckpt-<step>.safetensors\)" "$bf" train --resume "$tmp/emptydir"
  # a checkpoint of another model is not weights for this one
  expect 1 "tensor '0.weight' is missing: the weights are for another model" "$bf" eval --model "$src/models/cnn.cfg" \
    --weights "$c10"

  # ---- checkpoints are weights -----------------------------------------------------
  last=$(ck "$tmp/mc" 20)
  w=$("$bf" eval --model "$m" --weights "$tmp/big.st" --samples 1000 --json 2>/dev/null)
  c=$("$bf" eval --model "$m" --weights "$last" --samples 1000 --json 2>/dev/null)
  # (the last checkpoint in mc is the one the smaller-memory resume above wrote:
  # its micro-batch split rounds differently, so the loss agrees to float
  # rounding, not bit for bit; the JSON carries every digit)
  [ -n "$w" ] && [ -n "$c" ] && /usr/bin/python3 -c '
import json, sys
w, c = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = w["samples"] == c["samples"] and abs(w["accuracy"] - c["accuracy"]) <= 1e-3 and abs(w["loss"] - c["loss"]) <= 1e-6 * abs(w["loss"])
sys.exit(0 if ok else 1)' "$w" "$c" && pass || fail "eval of the last checkpoint ($c) is not eval of the saved weights ($w)"
  if have_torch; then
    loss=$(grep -oE '"loss":[0-9.]+' <<<"$c" | cut -d: -f2)
    acc=$(grep -oE '"accuracy":[0-9.]+' <<<"$c" | cut -d: -f2)
    "$py" "$src/tests/oracle/ckpt_torch.py" "$m" "$last" 1000 "$loss" "$acc" && pass || fail "PyTorch: the checkpoint"
  else
    fail "$py with torch is needed for the PyTorch check (scripts/setup.sh installs python3-torch)"
  fi

  # ---- not even micro-batch 1 fits ----------------------------------------------------
  # (the CPU is not shared: nothing can bring memory back, so no wait)
  # (the capacity in force is the schedule's point: that option is named)
  expect 3 "error: --memory-schedule: its capacity from step 5, 10.00 MiB: not even micro-batch 1 fits at step 6: it needs [0-9.]+ MiB, [0-9.]+ [KM]iB is missing; the run's \
state at step 5 is in $tmp/nm/ckpt-000000000005.safetensors" "$bf" train "${mem[@]}" --memory 1GiB \
    --memory-schedule 5:10MiB --checkpoint "$tmp/nm" --log "$tmp/nm.jsonl" --save "$tmp/nm.st"
  expect 3 "when the memory is back, resume with: batchfit train --resume $tmp/nm" "$bf" train --resume "$tmp/nm"
  tail -1 "$tmp/nm.jsonl" | grep -qE '"event":"error".*"code":"out of memory","field":"memory_schedule".*[0-9.]+ [KM]iB is missing' &&
    pass || fail "the log does not end with the memory error: $(tail -1 "$tmp/nm.jsonl")"
  [ -e "$tmp/nm.st" ] && fail "weights were saved by a run that did not finish"
  expect 0 "resuming from $tmp/nm/ckpt-000000000005.safetensors at step 5" "$bf" train --resume "$tmp/nm" \
    --memory-schedule 0:1GiB
  cmp -s "$tmp/big.st" "$tmp/nm.st" && pass || fail "the run that ran out of memory and resumed is not the same run"
  tail -1 "$tmp/nm.jsonl" | grep -q '"event":"end"' && pass || fail "the resumed log does not end with end"
  [ "$(grep -c '"event":"error"' "$tmp/nm.jsonl")" -eq 0 ] && pass || fail "the resumed log keeps the old error event"

  # ---- a failed run's log ends with an error event ---------------------------------------
  expect 1 "error: --lr: the loss became" "$bf" train "${mem[@]}" --lr 10000 --log "$tmp/div.jsonl"
  tail -1 "$tmp/div.jsonl" | grep -qE '^\{"event":"error","time":[0-9.]+,"step":[0-9]+,"epoch":1,"code":"invalid argument","field":"lr","message":"lr: the loss became' &&
    pass || fail "the diverged run's log does not end with its error: $(tail -1 "$tmp/div.jsonl")"

  # ---- the issue's tight-memory runs: the evaluation's micro-batch is planned -------------
  expect 0 "test accuracy .* \(2000 samples\)" "$bf" train --model "$m" --batch 256 --memory 28MiB --epoch-samples 2560 \
    --eval-samples 2000 --threads 2
  expect 0 "test accuracy .* \(1000 samples\)" "$bf" train --model "$src/models/cnn.cfg" --batch 128 --memory 24MiB \
    --epoch-samples 1280 --eval-samples 1000 --threads 2
fi

finish
