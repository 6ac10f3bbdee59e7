#!/usr/bin/env bash
# ckpt_kill.sh BATCHFIT SRC - a training run interrupted again and again and
# resumed each time ends with the same weights, bit for bit, as a run never
# interrupted, and its event log reads as that run's. Each interruption is
# a real `batchfit train` process killed from outside at a random step:
#   - SIGKILL, many times in a row, with accumulation (micro-batch 8 of an
#     effective batch 64: most kills land inside an accumulation cycle);
#   - SIGTERM: exit 143, a checkpoint of the step boundary before, and the
#     line that says how to resume (a stop inside a cycle abandons the step);
#   - two signals at once: the second exits at once, the last checkpoint
#     stays whole;
#   - SIGKILL inside the checkpoint write itself (BFIT_TEST_KILL_IN_CHECKPOINT:
#     the CLI kills itself with half the file written): the previous
#     checkpoint loads and the run resumes from it.
# The random steps come from BFIT_KILL_SEED (default: the process id),
# printed so that a failure can be repeated. PARTS (the third argument,
# default all) names the sections to run, so CTest can run them as two
# tests of under a minute each: kill, term, two, write.
set -u
bf=$1
src=$2
parts=${3:-kill,term,two,write}
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
seed=${BFIT_KILL_SEED:-$$}
RANDOM=$seed
echo "kill steps from BFIT_KILL_SEED=$seed"
fails=0
passes=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }
part() { [[ ",$parts," == *",$1,"* ]]; }
for p in ${parts//,/ }; do
  case $p in kill | term | two | write) ;; *) echo "unknown part '$p' (want kill, term, two, write)"; exit 2 ;; esac
done

steps_in() {
  local n
  n=$(grep -c '"event":"step"' "$1" 2>/dev/null)
  echo "${n:-0}"
}

# The step records of a log without what depends on the clock or on memory
# (time, seconds, bytes held): what must repeat exactly.
records() {
  grep '"event":"step"' "$1" | sed -E 's/"time":[0-9.]+,//; s/"mem":[0-9]+,"capacity":[0-9]+,//; s/"seconds":[0-9.]+,//; s/,"data_wait":[0-9.]+,"data_share":[0-9.]+//'
}

# same_run REF OUT LOGREF LOG WHAT: weights and step records identical
same_run() {
  if ! cmp -s "$1" "$2"; then
    fail "$5: the final weights differ from the uninterrupted run's"
  elif ! diff <(records "$3") <(records "$4") >"$tmp/diff"; then
    fail "$5: the step records differ from the uninterrupted run's:"; head -4 "$tmp/diff"
  elif [ "$(grep -c '"event":"end"' "$4")" -ne 1 ]; then
    fail "$5: the log does not end once with an end event"
  else
    pass
  fi
}

# kill_run DIR LOG SIG CMD...: start (or resume) the run in the background,
# wait until its log has a random number (2-6) of new steps (so a newer
# checkpoint than the last is there: the run moves on), then send SIG at a
# random moment of the next 30 ms, and wait.
# Sets rc (the exit status; 0 if it finished first) and out (its stderr).
kill_run() {
  local dir=$1 log=$2 sig=$3 have target pid
  shift 3
  have=$(steps_in "$log")
  target=$((have + 2 + RANDOM % 5))
  "$@" 2>"$tmp/stderr" >/dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$(steps_in "$log")" -lt "$target" ]; do sleep 0.005; done
  sleep "0.0$((RANDOM % 3))$((RANDOM % 10))" # anywhere in the step (or the checkpoint after it)
  kill -"$sig" "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  out=$(cat "$tmp/stderr")
}

m=$src/models/mlp.cfg
if [ -n "${BFIT_DEVICE_CHECK:-}" ] && [ "$BFIT_DEVICE_CHECK" != 0 ]; then
  # the checking mode makes every device call 30 times slower with this
  # model's 15 MB of blocks: a smaller one keeps the test within its time
  printf 'input 1x28x28\nflatten\nlinear 256\nrelu\nlinear 10\n' >"$tmp/mid.cfg"
  m=$tmp/mid.cfg
fi
# 96 steps: room for the SIGTERM loop's up to 12 stops of 2-6 steps each
# plus the poll's overshoot (48 were too few on a fast machine: the run
# ended after 3 stops)
base=(--model "$m" --epoch-samples 1536 --eval-samples 500 --batch 64 --micro-batch 8 --epochs 4 --threads 1 --quiet)

# the uninterrupted run
"$bf" train "${base[@]}" --save "$tmp/ref.st" --log "$tmp/ref.jsonl" >/dev/null || fail "the reference run failed"
nsteps=$(steps_in "$tmp/ref.jsonl")

# ---- SIGKILL, again and again -------------------------------------------------
if part kill; then
  d=$tmp/k
  kills=0
  kill_run "$d" "$tmp/k.jsonl" KILL "$bf" train "${base[@]}" --save "$tmp/k.st" --log "$tmp/k.jsonl" \
    --checkpoint "$d" --checkpoint-every 1
  while [ "$rc" -ne 0 ]; do
    [ "$rc" -eq 137 ] || { fail "SIGKILL: exit $rc: $out"; break; }
    kills=$((kills + 1))
    if [ "$kills" -ge 7 ]; then # enough: let it finish
      "$bf" train --resume "$d" 2>"$tmp/stderr" >/dev/null
      rc=$?
      [ "$rc" -eq 0 ] || fail "the last resume failed: exit $rc: $(cat "$tmp/stderr")"
      break
    fi
    # the options come from the checkpoint: --resume alone continues the run
    kill_run "$d" "$tmp/k.jsonl" KILL "$bf" train --resume "$d"
  done
  echo "SIGKILL: $kills kills in $nsteps steps"
  [ "$kills" -ge 5 ] || fail "SIGKILL: only $kills kills landed (the run is too short for the test)"
  same_run "$tmp/ref.st" "$tmp/k.st" "$tmp/ref.jsonl" "$tmp/k.jsonl" "SIGKILL x$kills"
  ls "$d"/*.tmp.* >/dev/null 2>&1 && fail "SIGKILL: temporary files were left in $d: $(ls "$d")"
fi

# ---- SIGTERM: a checkpoint, 143, and how to resume -------------------------------
if part term; then
  d=$tmp/t
  terms=0
  mid=0
  kill_run "$d" "$tmp/t.jsonl" TERM "$bf" train "${base[@]}" --save "$tmp/t.st" --log "$tmp/t.jsonl" \
    --checkpoint "$d" --checkpoint-every 16
  while [ "$rc" -ne 0 ]; do
    terms=$((terms + 1))
    if [ "$rc" -ne 143 ] || ! grep -qE "stopped by SIGTERM at step [0-9]+" <<<"$out" ||
      ! grep -qF "resume with: batchfit train --resume $d" <<<"$out"; then
      fail "SIGTERM: exit $rc (want 143), stderr: $out"
      break
    fi
    # the stop's checkpoint is of the step the run stopped at
    at=$(grep -oE "stopped by SIGTERM at step [0-9]+" <<<"$out" | grep -oE "[0-9]+$")
    [ -f "$d/$(printf 'ckpt-%012d.safetensors' "$at")" ] || fail "SIGTERM: no checkpoint of step $at in $d"
    # the log's last event says where the step was abandoned
    grep '"event":"error"' "$tmp/t.jsonl" | tail -1 | grep -qE "after [1-9][0-9]* of its 64 samples" && mid=$((mid + 1))
    # at least 4 stops, one of them inside a cycle (most are: the step computes most of the time)
    if [ "$terms" -ge 12 ] || { [ "$terms" -ge 4 ] && [ "$mid" -ge 1 ]; }; then
      "$bf" train --resume "$d" --quiet >/dev/null 2>&1
      rc=$?
      break
    fi
    kill_run "$d" "$tmp/t.jsonl" TERM "$bf" train --resume "$d"
  done
  echo "SIGTERM: $terms stops, $mid of them inside an accumulation cycle"
  [ "$terms" -ge 4 ] || fail "SIGTERM: only $terms stops landed"
  [ "$mid" -ge 1 ] || fail "SIGTERM: no stop landed inside an accumulation cycle"
  same_run "$tmp/ref.st" "$tmp/t.st" "$tmp/ref.jsonl" "$tmp/t.jsonl" "SIGTERM x$terms"
fi

# ---- two signals: the second exits at once -----------------------------------------
if part two; then
  d=$tmp/two
  "$bf" train "${base[@]}" --save "$tmp/two.st" --log "$tmp/two.jsonl" --checkpoint "$d" --checkpoint-every 1 \
    2>"$tmp/stderr" >/dev/null &
  pid=$!
  while [ "$(steps_in "$tmp/two.jsonl")" -lt 3 ]; do sleep 0.005; done
  kill -TERM "$pid"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 143 ] || fail "two SIGTERMs: exit $rc (want 143): $(cat "$tmp/stderr")"
  "$bf" train --resume "$d" --quiet >/dev/null 2>"$tmp/stderr" || fail "resume after two SIGTERMs: $(cat "$tmp/stderr")"
  same_run "$tmp/ref.st" "$tmp/two.st" "$tmp/ref.jsonl" "$tmp/two.jsonl" "two SIGTERMs"
fi

# ---- SIGKILL inside the checkpoint write ------------------------------------------
# the CLI kills itself in the write of its 5th checkpoint (step 5), with half
# the tensors in the temporary file: the 4th is the newest whole one
if part write; then
  d=$tmp/w
  BFIT_TEST_KILL_IN_CHECKPOINT=5 "$bf" train "${base[@]}" --save "$tmp/w.st" --log "$tmp/w.jsonl" --checkpoint "$d" \
    --checkpoint-every 1 >/dev/null 2>&1
  rc=$?
  [ "$rc" -eq 137 ] || fail "kill in the checkpoint write: exit $rc (want 137)"
  ls "$d"/ckpt-000000000005.safetensors.tmp.* >/dev/null 2>&1 || fail "no half-written checkpoint in $d: $(ls "$d")"
  [ -e "$d/ckpt-000000000005.safetensors" ] && fail "the killed checkpoint exists as a whole file"
  out=$("$bf" train --resume "$d" 2>&1 >/dev/null)
  grep -q "resuming from $d/ckpt-000000000004.safetensors at step 4" <<<"$out" || fail "resume after a kill in the write: $out"
  same_run "$tmp/ref.st" "$tmp/w.st" "$tmp/ref.jsonl" "$tmp/w.jsonl" "kill in the checkpoint write"
  ls "$d"/*.tmp.* >/dev/null 2>&1 && fail "the half-written checkpoint was not cleaned up: $(ls "$d")"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
