#!/usr/bin/env bash
# isa.sh OLD_BENCH [PAIRS] [MODELS] [BATCHES] [PRECISIONS] [THREADS] [METRIC] -
# an older bfit_bench (OLD_BENCH, e.g. a build of main) against this tree's,
# and this tree's again with its portable loops forced (BFIT_CPU_ISA=avx2),
# on the same models, batches and precisions: the three sides alternate
# (order reversed every other round), PAIRS processes each, each the median
# of 5 reps as bench/precision.sh runs them; the table shows the medians and
# the ratios to the old build. METRIC: samples_per_s (default) or
# samples_per_cpu_s (with THREADS 1, hardly disturbed by other processes).
#
#   bench/isa.sh OLD/bench/bfit_bench [5] [mlp,cnn] [32,128,512] [f32,bf16] [2] [samples_per_s]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/isa.sh OLD_BENCH [PAIRS] [MODELS] [BATCHES] [PRECISIONS] [THREADS] [METRIC]}
pairs=${2:-5} models=${3:-mlp,cnn} batches=${4:-32,128,512} precs=${5:-f32,bf16} threads=${6:-2}
metric=${7:-samples_per_s}
dir=${BFIT_BENCH_BUILD:-build-bench}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBFIT_TESTS=OFF >/dev/null
cmake --build "$dir" --target bfit_bench -j"$(nproc)" >/dev/null
new=$dir/bench/bfit_bench tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
side() { # side NAME MODEL BATCH PRECISION: one process, its METRIC appended to $tmp/NAME
  local bin=$new isa=
  [[ $1 == old ]] && bin=$old
  [[ $1 == avx2 ]] && isa=avx2
  BFIT_CPU_ISA=$isa BFIT_BENCH_PRECISION=$4 "$bin" step "models/$2.cfg" "$3" 5 3 "$threads" |
    grep -o "$metric=[0-9.]*" | cut -d= -f2 >>"$tmp/$1"
}
echo "# bench/isa.sh $(date '+%F %T'): $metric, $threads threads, $pairs processes per side; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | batch | precision | old | new | new, avx2 forced | new / old | avx2 / old |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for m in ${models//,/ }; do
  for b in ${batches//,/ }; do
    for p in ${precs//,/ }; do
      : >"$tmp/old"; : >"$tmp/new"; : >"$tmp/avx2"
      for ((i = 0; i < pairs; i++)); do
        order="old new avx2"
        ((i % 2)) && order="avx2 new old"
        for s in $order; do side "$s" "$m" "$b" "$p"; done
      done
      o=$(median <"$tmp/old") n=$(median <"$tmp/new") f=$(median <"$tmp/avx2")
      echo "| $m | $b | $p | $o | $n | $f | $(ratio "$n" "$o") | $(ratio "$f" "$o") |"
    done
  done
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
