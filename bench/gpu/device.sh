#!/usr/bin/env bash
# device.sh - the proof kit on a bare GPU machine that has CUDA, cuDNN and
# PyTorch but no Debian packages: unpack what bench/gpu/pack.sh made here,
# find the machine's CUDA libraries, then run the kit's phases.
#
#   bench/gpu/device.sh ARCHIVE OUTDIR STAGE...
#
# Stages: env (the GPU, driver, libraries found, every program's ldd),
# cuda (ctest -L cuda: test_cuda_ops), smoke (a few CLI runs on the GPU:
# plan, train, find), optime (op times of a gpt2 and a resnet50 step), algos (a
# few plans per convolution algorithm choice: each category and the time taken),
# ctest (the tests whose names match BFIT_CTEST_RE, each failure's output
# shown), stop (SIGTERM and resume, six runs on the GPU), wait
# (--wait-for-memory beside a co-tenant that takes the GPU's memory), aslimit
# (the GPU under ulimit -v), memcheck (compute-sanitizer over test_cuda_ops'
# op tests), devcheck (the same in the device's checking mode), torch2 (the machine's PyTorch 2.x exports torchvision's models,
# batchfit plans and trains them: bench/gpu/torch2.py), and run.sh's phases (plan cotenant ways speed finders; test runs
# the whole suite). Each stage has its own time limit,
# and the next runs whatever the last did.
set -uo pipefail
cd "$(dirname "$0")/../.."
arc=$1 out=$2
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
tar -xJf "$arc" || { echo "device.sh: cannot unpack $arc" >&2; exit 2; }
# the tests' paths are this machine's source tree: put the tree there
src=$(cat .gpu/srcdir)
if [ "$src" != "$PWD" ]; then
  if [ -e "$src" ] && [ ! -L "$src" ]; then
    echo "device.sh: $src exists and is not this tree ($PWD): the tests' paths would run another build" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$src")"
  ln -sfn "$PWD" "$src"
fi
cd "$src"
# the data sets, where setup.sh would have installed them
if [ -d .gpu/data/fashion-mnist ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu/data/fashion-mnist /usr/share/datasets/
fi
if [ -f .gpu/data/kjv.txt ] && [ ! -f /usr/local/share/batchfit/kjv.txt ]; then
  mkdir -p /usr/local/share/batchfit && cp .gpu/data/kjv.txt /usr/local/share/batchfit/
fi
b=$src/build-gpu
# CUDA's libraries: PyTorch's own first (its cuDNN is the version this
# build was compiled with, and naming its folders cannot change what PyTorch
# loads), then the toolkit's; the system's folder is searched anyway, and
# naming it would put its cuDNN before PyTorch's in PyTorch's process
cudalibs=$(for n in libcudnn.so.9 libcublas.so.13 libnccl.so.2 libcudart.so.13; do
  find /opt /usr/local/cuda*/ /usr/local/lib -name "$n" 2>/dev/null | head -1
done | xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH=$src/.gpu/lib:${cudalibs}${LD_LIBRARY_PATH:-}
export BFIT_GPU_BUILD=$b PYTHON=${PYTHON:-$(command -v python3)}
# the tests' Python is the one configure found here (/usr/bin/python3, with
# Debian's torch); where that one has no torch, the tests run this machine's
# (the H200 run of 2026-11-26: test_images and test_safetensors failed on it)
if ! /usr/bin/python3 -c "import torch" 2>/dev/null && "$PYTHON" -c "import torch" 2>/dev/null; then
  sed -i "s#/usr/bin/python3#$PYTHON#g" "$b/tests/CTestTestfile.cmake"
fi
bf=$b/batchfit
s_env() {
  nvidia-smi
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH PYTHON=$PYTHON"
  $PYTHON -c "import torch; print('torch', torch.__version__, torch.cuda.is_available(), torch.backends.cudnn.version())"
  for f in "$bf" "$b/libbatchfit_cuda.so" "$b/tests/test_cuda_ops"; do echo "== $f"; ldd "$f" | grep -E "not found|cud|nccl|dnnl"; done
  timeout 30 "$bf" --version
}
s_cuda() { # skipped counts as failed here: the backend did not load (run 8's third call)
  (cd "$b" && timeout 240 ctest -L cuda --output-on-failure -V) || return
  ! grep -q -- "\*\*\*Skipped" "$out/cuda.log" || { echo "device.sh: test_cuda_ops skipped on a GPU machine"; return 3; }
}
s_smoke() {
  timeout 60 "$bf" plan --model resnet50 --precision bf16 --device cuda
  timeout 90 "$bf" train --model cnn --data synthetic --device cuda --batch 128 --epochs 1 --epoch-samples 8192 \
    --log "$out/smoke-train.jsonl"
  timeout 120 "$bf" find --model resnet50 --data synthetic --device cuda --precision bf16 --largest-only
}
s_optime() { # where a step's time goes, op kind by op kind (each op waited for)
  for c in gpt2:bf16:4 resnet50:bf16:64; do
    IFS=: read -r model p m <<<"$c"
    BFIT_OPTIME=1 timeout 120 "$b/tests/bfit_gpu" speed cuda:0 "$model" "$p" "$m" 5
  done
}
s_algos() { # the rows' peaks by category on this GPU, with each plan's time (the ways phase
  # runs plan --ways --conv-algo auto and a step at every row's size)
  local a w t0
  for a in "lean --precision f32" "fastest --precision f32" "fastest --precision bf16" \
           "fastest --precision bf16 --recompute auto" "lean --precision bf16 --recompute auto"; do
    echo "== --conv-algo $a"
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    timeout 90 "$bf" plan --model resnet50 --memory 9.21GiB --margin 0 --device cuda:0 --conv-algo $a | sed -n '3,20p'
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "(planned in %.2f s)\n", b - a }'
  done
}
s_stop() { # SIGTERM at a random moment on the GPU (cnn: 60 epochs, about 30 s
  # of an H200), five times, each run resumed
  # from the last checkpoint, then resumed to the end: each stop exits 143
  # with a whole checkpoint (the signals are taken by a thread of their own)
  local d=$out/stop-ckpt i rc res=()
  rm -rf "$d"
  for i in 1 2 3 4 5 6; do
    [ "$i" = 1 ] && res=(--model cnn --device cuda --batch 128 --epochs 60 --checkpoint "$d"
      --checkpoint-every 40) || res=(--resume "$d")
    timeout 180 "$bf" train "${res[@]}" >"$out/stop-$i.txt" 2>&1 &
    local p=$!
    [ "$i" -lt 6 ] && { sleep "$((3 + RANDOM % 5))"; kill -TERM "$p" 2>/dev/null; }
    wait "$p"; rc=$?
    echo "run $i: exit $rc; $(grep -E 'stopped by|test accuracy .* after|error' "$out/stop-$i.txt" | tail -1)"
  done
  ls "$d"
}
s_wait() { # --wait-for-memory on a shared GPU: a co-tenant leaves about 1.25 GiB
  # free (what wide.cfg's micro-batch 1 needs beside the run's own context)
  # and gives it back after 25 s: the run waits, then trains; then after 30 s
  # against a wait of 5 s: refused at the start (exit 1), nothing lost
  local cot=$b/bench/bfit_cotenant p
  local run=(--model bench/gpu/wide.cfg --data synthetic --device cuda --batch 2 --epochs 1 --epoch-samples 8)
  "$cot" 0 "take=-1280,wait=25,free" >"$out/wait-cot1.jsonl" 2>&1 &
  p=$!
  sleep 5
  timeout 120 "$bf" train "${run[@]}" --wait-for-memory 90 --log "$out/wait-1.jsonl"
  echo "wait 1 (memory back within the wait): exit $? (want 0)"
  wait "$p"
  "$cot" 0 "take=-1280,wait=30,free" >"$out/wait-cot2.jsonl" 2>&1 &
  p=$!
  sleep 5
  timeout 120 "$bf" train "${run[@]}" --wait-for-memory 5s --log "$out/wait-2.jsonl"
  echo "wait 2 (not back within 5 s): exit $? (want 1)"
  wait "$p"
}
s_aslimit() { # the GPU under an address-space limit (ulimit -v): CUDA's driver
  # maps address space of its own; what does each command say?
  local kb
  for kb in 4000000 64000000; do
    echo "== ulimit -v $kb: train --device cuda"
    (ulimit -v "$kb" && timeout 30 "$bf" train --model cnn --data synthetic --device cuda --batch 128 --epochs 1 \
      --epoch-samples 4096 2>&1 | grep -v "^epoch"; echo "exit ${PIPESTATUS[0]}")
  done
  echo "== ulimit -v 4000000: train --device auto, plan --device cuda"
  (ulimit -v 4000000 && timeout 30 "$bf" train --model cnn --data synthetic --batch 128 --epochs 1 \
    --epoch-samples 2048 2>&1 | grep -v "^epoch"; echo "exit ${PIPESTATUS[0]}")
  (ulimit -v 4000000 && timeout 30 "$bf" plan --model cnn --device cuda --batch 1,64; echo "exit $?")
}
s_memcheck() { # compute-sanitizer's memcheck over test_cuda_ops' op tests (its
  # training steps skipped: slow under it). Its first run (2026-12-04, run 9)
  # took 4 s and found no error; 3 tests failed for want of BFIT_SOURCE_DIR
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$cs" ] || { echo "device.sh: no compute-sanitizer here"; return 3; }
  (cd "$b/tests" && BFIT_SOURCE_DIR=$src BFIT_TEST_SKIP='test_training*' timeout "${BFIT_MEMCHECK_S:-400}" "$cs" --tool memcheck --error-exitcode 9 \
    ./test_cuda_ops)
}
s_devcheck() { # test_cuda_ops' op tests in the device's checking mode (BFIT_DEVICE_CHECK=1:
  # every pointer an op is given must lie in an arena block of the right size)
  (cd "$b/tests" && BFIT_DEVICE_CHECK=1 BFIT_SOURCE_DIR=$src BFIT_TEST_SKIP='test_training*' timeout 240 ./test_cuda_ops)
}
s_torch2() { # the machine's PyTorch 2.x exports torchvision's models; batchfit plans and trains them
  timeout 900 "$PYTHON" bench/gpu/torch2.py "$bf" "$out/torch2" ${BFIT_TORCH2_MODELS:-}
}
s_ctest() {
  (cd "$b" && timeout 240 ctest -j"${BFIT_CTEST_J:-8}" --output-on-failure -R "${BFIT_CTEST_RE:-.}" -E "^mpi_")
}
for st in "$@"; do
  t=$(date +%s)
  echo "==== $st" >&2
  case $st in
    env | cuda | smoke | optime | ctest | algos | stop | wait | aslimit | memcheck | devcheck | torch2) "s_$st" >"$out/$st.log" 2>&1 ;;
    *) bash bench/gpu/run.sh "$st" "$out/kit" >"$out/$st.log" 2>&1
       rc=$?
       # the phase's own files one level up: the device tool brings back
       # no folder deeper than OUT's second level (the third run lost ways')
       mkdir -p "$out/kit-$st" && find "$out/kit/$st" -type f -size -4M -exec cp {} "$out/kit-$st/" \;
       (exit $rc) ;;
  esac
  echo "==== $st: exit $?, $(($(date +%s) - t)) s" >&2
done
[ -f "$out/kit/summary.md" ] && cat "$out/kit/summary.md"
exit 0
