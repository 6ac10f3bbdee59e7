#!/usr/bin/env bash
# run.sh - the GPU proof kit: everything a first GPU run needs, in phases of
# under 10 minutes each, results and logs under OUTDIR, and a summary table
# in markdown at the end (OUTDIR/summary.md, also printed).
#
#   bench/gpu/run.sh build|test|plan|cotenant|ways|speed|finders|all OUTDIR
#   bench/gpu/run.sh --dry-run [PHASE|all] OUTDIR   every phase's logic on the CPU device, tiny sizes
#
# Phases (docs/cuda.md says what each shows):
#   build     configure with CUDA (sm_90 and compute_80 PTX) and build; the GPU and driver
#   test      the cuda label (test_cuda_ops on the GPU), then the whole suite (the CLI's
#             tests take the GPU through --device auto, except cli_find, cli_plan and
#             cli_train(_more), whose figures are the CPU's: CTest hides the GPU from them)
#   plan      planned peak = the arena's measured peak, to the byte, for cnn, resnet18,
#             resnet50 at several micro-batches, f32 and bf16
#   cotenant  a second process takes and gives back GPU memory while a run trains: the
#             run follows it (shrinks, recovers any out-of-memory, grows back) and loses
#             no sample; the monitor sees the other process
#   ways      Deelvin's table on one GPU: PyTorch's largest ResNet-50 batch (f32, AMP,
#             AMP + checkpointing) with memory capped at 9.21 GiB against batchfit's at
#             --memory 9.21GiB (f32, bf16, bf16 + recompute), each batchfit size run
#   speed     samples/s against PyTorch eager at the same batch and precision (resnet50,
#             gpt2 small)
#   finders   Lightning's scale_batch_size and accelerate's find_executable_batch_size
#             (where installed) against `batchfit find`, in steps and seconds
#
# Environment: BFIT_GPU_BUILD (build directory; default build-gpu, or in a
# dry run the existing build/), PYTHON (default /usr/bin/python3, which needs
# torch and torchvision; with CUDA on a GPU), BFIT_GPU_DEVICE (default
# cuda:0; cpu in a dry run). Exit status: 0 when no check failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
src=$PWD

dry=0
if [ "${1:-}" = "--dry-run" ]; then
  dry=1
  shift
fi
if [ $dry = 1 ] && [ $# -eq 1 ]; then
  phases="build test plan cotenant ways speed finders"
elif [ $# -ge 1 ]; then
  case "$1" in
  all) phases="build test plan cotenant ways speed finders" ;;
  build | test | plan | cotenant | ways | speed | finders) phases=$1 ;;
  *) echo "usage: bench/gpu/run.sh build|test|plan|cotenant|ways|speed|finders|all OUTDIR" >&2
     echo "       bench/gpu/run.sh --dry-run OUTDIR" >&2; exit 2 ;;
  esac
  shift
fi
if [ $# -ne 1 ] || [ -z "${phases:-}" ]; then
  echo "usage: bench/gpu/run.sh build|test|plan|cotenant|ways|speed|finders|all OUTDIR" >&2
  echo "       bench/gpu/run.sh --dry-run OUTDIR" >&2
  exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "run.sh: cannot make $1" >&2; exit 2; }
py=${PYTHON:-/usr/bin/python3}
kit="$py $src/bench/gpu/kit.py"
if [ $dry = 1 ]; then
  b=${BFIT_GPU_BUILD:-$src/build}
  dev=cpu
  touch "$out/DRY_RUN"
else
  b=${BFIT_GPU_BUILD:-$src/build-gpu}
  dev=${BFIT_GPU_DEVICE:-cuda:0}
  rm -f "$out/DRY_RUN"
fi
bf=$b/batchfit
limit=590 # seconds per phase (each under 10 minutes)
has_torch_cuda() { $py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }

# ---- build ------------------------------------------------------------------------------
phase_build() {
  local d=$out/build
  mkdir -p "$d"
  { nvidia-smi || true; /usr/local/cuda/bin/nvcc --version || nvcc --version || true; } >"$d/gpu.txt" 2>&1
  if [ $dry = 1 ]; then
    # the dry run reuses the tree CTest built; it checks the CUDA module is in it
    local so=$b/libbatchfit_cuda.so flags=$b/CMakeFiles/batchfit_cuda.dir/flags.make
    if [ -f "$so" ] && grep -q "arch=compute_90,code=\[sm_90\]" "$flags" && grep -q "arch=compute_80,code=\[compute_80\]" "$flags"; then
      $kit row "$out" build "CUDA module built (sm_90, compute_80 PTX)" dry-run \
        "reused $b: libbatchfit_cuda.so of $(stat -c %s "$so") bytes, nvcc --generate-code for sm_90 and compute_80"
    elif grep -q "^BFIT_CUDA:STRING=OFF" "$b/CMakeCache.txt" 2>/dev/null || [ ! -f "$so" ]; then
      $kit row "$out" build "CUDA module built (sm_90, compute_80 PTX)" skipped "$b was built without CUDA"
    else
      $kit row "$out" build "CUDA module built (sm_90, compute_80 PTX)" FAIL "$b: not built for sm_90 and compute_80 ($flags)"
    fi
    cmake --build "$b" --target bfit_gpu -j2 >"$d/build.log" 2>&1 ||
      $kit row "$out" build "kit program bfit_gpu" FAIL "see build/build.log"
    return
  fi
  if timeout $limit cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DBFIT_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES="80-virtual;90-real" >"$d/configure.log" 2>&1 &&
     timeout $limit cmake --build "$b" -j"$(nproc)" >"$d/build.log" 2>&1; then
    $kit row "$out" build "configure with CUDA and build (warnings are errors)" ok \
      "$(grep -m1 'CUDA backend' "$d/configure.log" | sed 's/^-- //'); $(grep -m1 -o 'NVIDIA [A-Za-z0-9 -]*' "$d/gpu.txt" || echo 'no nvidia-smi')"
  else
    $kit row "$out" build "configure with CUDA and build (warnings are errors)" FAIL "see build/configure.log, build/build.log"
  fi
}

# ---- test -------------------------------------------------------------------------------
ctest_row() { # LABEL LOGFILE
  local s
  s=$(grep -E "tests passed|tests failed" "$2" | tail -1)
  if [ $dry = 0 ] && grep -qE "test_cuda_ops .*Skipped" "$2"; then
    $kit row "$out" test "$1" FAIL "test_cuda_ops skipped on the GPU machine: $(grep -m1 'skipped:' "$2")"
  elif grep -q "100% tests passed" "$2"; then
    $kit row "$out" test "$1" "$([ $dry = 1 ] && echo dry-run || echo ok)" "$s; $(grep -c 'Skipped' "$2") skipped"
  else
    $kit row "$out" test "$1" FAIL "${s:-no result}; $(grep -E '\(Failed|\(Timeout|\*\*\*' "$2" | head -5 | tr '\n' ' ')"
  fi
}

phase_test() {
  local d=$out/test
  mkdir -p "$d"
  (cd "$b" && timeout 300 ctest -L cuda --output-on-failure >"$d/cuda.log" 2>&1)
  ctest_row "ctest -L cuda (test_cuda_ops: every op, plan = measured, training against the cpu)" "$d/cuda.log"
  if [ $dry = 1 ]; then
    (cd "$b" && timeout 300 ctest -R "test_kernel_core" --output-on-failure >"$d/suite.log" 2>&1)
    ctest_row "the kernels' per-thread work on the host (the whole suite runs on a GPU)" "$d/suite.log"
  else
    (cd "$b" && timeout $((limit - 60)) ctest -j"$(nproc)" --timeout 400 -E "^mpi_" >"$d/suite.log" 2>&1)
    ctest_row "the whole suite (MPI aside), --device auto taking the GPU" "$d/suite.log"
  fi
}

# ---- plan ---------------------------------------------------------------------------------
phase_plan() {
  local d=$out/plan
  mkdir -p "$d"
  : >"$d/plan.jsonl"
  local cases
  if [ $dry = 1 ]; then
    cases="mlp:1,4 cnn:1,4"
  else
    cases="cnn:1,64,512 resnet18:1,32,128 resnet50:1,16,64"
  fi
  for c in $cases; do
    for p in f32 bf16; do
      timeout 200 "$b/tests/bfit_gpu" plan "$dev" "${c%%:*}" $p "${c#*:}" >>"$d/plan.jsonl" 2>>"$d/plan.err"
    done
  done
  $kit plan "$out"
}

# ---- cotenant ------------------------------------------------------------------------------
phase_cotenant() {
  local d=$out/cotenant pid args expected
  mkdir -p "$d"
  rm -f "$d/train.jsonl"
  if [ $dry = 1 ]; then
    # no second process can take a CPU's memory: the same run with the co-tenant
    # simulated by a memory schedule (down at step 4, back at 10) and a refused
    # allocation (a real out-of-memory), the co-tenant program run for its timing
    expected=$((5 * 512)) # 5 epochs of the 512 synthetic samples
    if [ -x "$b/bench/bfit_cotenant" ]; then
      "$b/bench/bfit_cotenant" 0 "take=0.5,wait=1,free,wait=1,take=-1024,wait=1,free" >"$d/cotenant.jsonl" 2>&1 &
    else
      echo '{"t":0,"action":"no bfit_cotenant: built without CUDA"}' >"$d/cotenant.jsonl" &
    fi
    pid=$!
    args=(--model mlp --memory 40MiB --memory-schedule "3:25MiB,6:40MiB" --batch 256 --epochs 5 --monitor 0.2)
    export BFIT_TEST_FAIL_ALLOC=12 # the 12th device allocation refused, as the tests do
  else
    expected=$((100 * 512))
    "$b/bench/bfit_cotenant" 0 "take=0.5,wait=20,free,wait=15,take=-1536,wait=20,free" >"$d/cotenant.jsonl" 2>&1 &
    pid=$!
    sleep 5 # the co-tenant holds half the GPU when the run starts
    args=(--model resnet50 --batch 256 --epochs 100 --monitor 2)
  fi
  timeout $limit "$bf" train "${args[@]}" --data synthetic --device "$dev" --log "$d/train.jsonl" \
    --report "$d/report.html" >"$d/train.out" 2>&1
  unset BFIT_TEST_FAIL_ALLOC
  wait $pid
  $kit cotenant "$out" $expected
}

# ---- ways ----------------------------------------------------------------------------------
phase_ways() {
  local d=$out/ways model mem way m p r algo
  mkdir -p "$d"
  : >"$d/runs.jsonl"
  if [ $dry = 1 ]; then model=$src/models/resnet-mini.cfg mem=16MiB; else model=resnet50 mem=9.21GiB; fi
  local t0=$EPOCHREALTIME
  # auto: each row with the fastest or the leanest convolution algorithms, whichever fits more
  timeout 300 "$bf" plan --model "$model" --memory $mem --margin 0 --ways --json --device "$dev" --conv-algo auto \
    >"$d/batchfit.json" 2>"$d/batchfit.err"
  awk -v rc=$? -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "plan --ways: exit %d, %.2f s\n", rc, b - a }' >"$d/plan-time.txt"
  # each of batchfit's sizes, run: two steps at the cap
  for way in "f32" "lean f32" "bf16" "bf16 + recompute blocks" "bf16 + recompute auto"; do
    read -r m algo < <($py -c "import json,sys; w=next(w for w in json.load(open(sys.argv[1]))['ways'] if w['way']==sys.argv[2]); print(w['micro_batch'], w.get('conv_algo', 'fastest'))" \
        "$d/batchfit.json" "$way" 2>/dev/null || echo 0 fastest)
    case $way in
      f32) p=(--precision f32 --no-lean) ;;
      "lean f32") p=(--precision f32) ;;
      bf16) p=(--precision bf16) ;;
      "bf16 + recompute auto") p=(--precision bf16 --recompute auto) ;;
      *) p=(--precision bf16 --recompute blocks) ;;
    esac
    r=failed
    if [ "${m:-0}" -gt 0 ] && timeout 120 "$bf" train --model "$model" --data synthetic --device "$dev" --memory $mem \
         --margin 0 --batch "$m" --micro-batch "$m" "${p[@]}" --conv-algo "${algo:-fastest}" --max-steps 2 --epochs 1 --epoch-samples $((2 * m)) \
         --eval-samples 8 \
         --log "$d/run-$m.jsonl" >"$d/run-$m.out" 2>&1; then
      grep -q '"ooms":0' "$d/run-$m.jsonl" && r=ran || r="ran, with out-of-memory"
    fi
    echo "{\"way\":\"$way\",\"m\":$m,\"conv_algo\":\"${algo:-fastest}\",\"result\":\"$r\"}" >>"$d/runs.jsonl"
  done
  if [ $dry = 1 ]; then
    timeout 300 $py "$src/bench/gpu/torch_side.py" ways --device cpu --dry-run >"$d/torch.jsonl" 2>"$d/torch.err"
  elif has_torch_cuda; then
    timeout 500 $py "$src/bench/gpu/torch_side.py" ways --device cuda --cap-gib 9.21 >"$d/torch.jsonl" 2>"$d/torch.err"
  else
    echo "torch with CUDA is not installed for $py" >"$d/torch.err"
  fi
  $kit ways "$out"
}

# ---- speed ---------------------------------------------------------------------------------
phase_speed() {
  local d=$out/speed c model m p
  mkdir -p "$d"
  : >"$d/batchfit.jsonl"
  : >"$d/torch.jsonl"
  local cases
  # BFIT_SPEED_CASES (model:batch:precision ...) narrows a short device session
  if [ $dry = 1 ]; then cases="gpt-nano:1:f32"
  else cases=${BFIT_SPEED_CASES:-"resnet50:64:f32 resnet50:64:bf16 gpt2:4:f32 gpt2:4:bf16"}; fi
  for c in $cases; do
    IFS=: read -r model m p <<<"$c"
    timeout 200 "$b/tests/bfit_gpu" speed "$dev" "$model" $p "$m" $([ $dry = 1 ] && echo 2 || echo 20) \
      >>"$d/batchfit.jsonl" 2>>"$d/batchfit.err"
    if [ $dry = 1 ] || has_torch_cuda; then
      timeout 200 $py "$src/bench/gpu/torch_side.py" speed --device "$([ $dry = 1 ] && echo cpu || echo cuda)" \
        --model "$model" --precision $p --batch "$m" --steps $([ $dry = 1 ] && echo 2 || echo 20) \
        >>"$d/torch.jsonl" 2>>"$d/torch.err"
    fi
  done
  $kit speed "$out"
}

# ---- finders -------------------------------------------------------------------------------
phase_finders() {
  local d=$out/finders t0 t1
  mkdir -p "$d"
  t0=$(date +%s.%N)
  if [ $dry = 1 ]; then
    timeout 200 "$bf" find --model cnn --data synthetic --memory 64MiB --largest-only --device cpu --json \
      >"$d/batchfit.json" 2>"$d/batchfit.err"
  else
    timeout 300 "$bf" find --model resnet50 --data synthetic --largest-only --device "$dev" --json \
      >"$d/batchfit.json" 2>"$d/batchfit.err"
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >"$d/batchfit.seconds"
  if [ $dry = 1 ]; then
    timeout 200 $py "$src/bench/gpu/torch_side.py" finders --device cpu --dry-run --start 64 >"$d/torch.jsonl" 2>"$d/torch.err"
  elif has_torch_cuda; then
    timeout 400 $py "$src/bench/gpu/torch_side.py" finders --device cuda --model resnet50 --start 4096 \
      >"$d/torch.jsonl" 2>"$d/torch.err"
  fi
  $kit finders "$out"
}

for ph in $phases; do
  rm -f "$out/$ph/rows.jsonl" "$out/$ph/table.md"
  mkdir -p "$out/$ph"
  s=$(date +%s)
  "phase_$ph"
  echo "run.sh: $ph done in $(($(date +%s) - s)) s" >&2
done
$kit summary "$out"
