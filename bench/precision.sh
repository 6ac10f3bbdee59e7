#!/usr/bin/env bash
# precision.sh - bf16 against f32 training throughput for the same models and
# batch, in one run: the two sides alternate, PAIRS processes each, and the
# median samples/s of each side and their ratio are printed.
#
#   bench/precision.sh [PAIRS] [MODELS] [BATCH] [THREADS]   (defaults: 5 mlp,cnn 128 2)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5} models=${2:-mlp,cnn} batch=${3:-128} threads=${4:-2}
dir=${BFIT_BENCH_BUILD:-build-bench}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBFIT_TESTS=OFF >/dev/null
cmake --build "$dir" --target bfit_bench -j"$(nproc)" >/dev/null
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "| model | batch | f32 samples/s | bf16 samples/s | bf16 / f32 |"
echo "|---|---:|---:|---:|---:|"
for m in ${models//,/ }; do
  : >"/tmp/prec.$$.f32"; : >"/tmp/prec.$$.bf16"
  for ((i = 0; i < pairs; i++)); do
    for p in f32 bf16; do
      BFIT_BENCH_PRECISION=$p "$dir/bench/bfit_bench" step "models/$m.cfg" "$batch" 5 3 "$threads" |
        grep -o "samples_per_s=[0-9.]*" | cut -d= -f2 >>"/tmp/prec.$$.$p"
    done
  done
  f=$(median <"/tmp/prec.$$.f32") b=$(median <"/tmp/prec.$$.bf16")
  echo "| $m | $batch | $f | $b | $(awk -v a="$b" -v c="$f" 'BEGIN {printf "%.2f", a / c}') |"
  rm -f "/tmp/prec.$$.f32" "/tmp/prec.$$.bf16"
done
