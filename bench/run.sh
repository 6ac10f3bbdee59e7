#!/usr/bin/env bash
# run.sh - batchfit against PyTorch on the same models, batch sizes and
# threads, in one run: builds bfit_bench (Release, into $BFIT_BENCH_BUILD,
# default build-bench) and runs bench/compare.py, which prints the table.
# The PyTorch peer runs on the reference BLAS and on OpenBLAS (installed here
# by scripts/setup.sh --bench if missing; the system's BLAS stays as it was).
#
#   bench/run.sh [--pairs 3] [--reps 5] [--models mlp,cnn] [--batches 32,128,512] [--threads 2]
#
# docs/performance.md explains what is measured and how.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  # without root the peer runs on the reference BLAS only (compare.py says so)
  bash scripts/setup.sh --bench >&2 || echo "run.sh: OpenBLAS could not be installed: the peer runs without it" >&2
fi
dir=${BFIT_BENCH_BUILD:-build-bench}
# a build of its own leaves the tests out; a build the tests use keeps them
tests=()
[ -f "$dir/CMakeCache.txt" ] || tests=(-DBFIT_TESTS=OFF)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${tests[@]}" >/dev/null
cmake --build "$dir" --target bfit_bench -j"$(nproc)" >/dev/null
exec /usr/bin/python3 bench/compare.py --bench "$dir/bench/bfit_bench" "$@"
