#!/usr/bin/env bash
# gpu_kit.sh BUILD SRC - the GPU proof kit's dry run (bench/gpu/run.sh
# --dry-run): every phase's logic on the CPU device, with tiny sizes. Passes
# when the kit finishes, no check fails, and the summary has a row for every
# phase and each phase's table. Skipped (77) without torch and torchvision,
# which the PyTorch side needs.
set -u
build=$1
src=$2
py=${BFIT_PYTHON:-/usr/bin/python3}
if ! "$py" -c "import torch, torchvision" 2>/dev/null; then
  echo "gpu_kit: skipped: torch and torchvision are needed for the kit's PyTorch side ($py)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fails=0
BFIT_GPU_BUILD=$build PYTHON=$py bash "$src/bench/gpu/run.sh" --dry-run "$out" >"$out/stdout" 2>"$out/stderr"
rc=$?
cat "$out/stdout"
[ $rc -eq 0 ] || { echo "FAIL: run.sh --dry-run exited $rc"; tail -20 "$out/stderr"; fails=$((fails + 1)); }
for ph in build test plan cotenant ways speed finders; do
  grep -qE "^\| $ph \| .* \| (dry-run|skipped) \|" "$out/summary.md" ||
    { echo "FAIL: no dry-run row for phase $ph in the summary"; fails=$((fails + 1)); }
done
for t in "Plan against the arena's measured peak" "Co-tenant and run" "Largest batch within the cap" \
         "Training samples/s" "Finding the largest batch"; do
  grep -q "#### $t" "$out/summary.md" || { echo "FAIL: no table '$t'"; fails=$((fails + 1)); }
done
grep -q "| FAIL |" "$out/summary.md" && { echo "FAIL: a check failed"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "gpu kit dry run: all checks passed"
exit $((fails > 0))
