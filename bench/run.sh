#!/usr/bin/env bash
# run.sh - batchfit against PyTorch on the same models, batch sizes and
# threads, in one run: builds bfit_bench (Release, into $BFIT_BENCH_BUILD,
# default build-bench) and runs bench/compare.py, which prints the table.
#
#   bench/run.sh [--pairs 3] [--reps 5] [--models mlp,cnn] [--batches 32,128,512] [--threads 2]
#
# docs/performance.md explains what is measured and how.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BFIT_BENCH_BUILD:-build-bench}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBFIT_TESTS=OFF >/dev/null
cmake --build "$dir" --target bfit_bench -j"$(nproc)" >/dev/null
exec /usr/bin/python3 bench/compare.py --bench "$dir/bench/bfit_bench" "$@"
