#!/usr/bin/env bash
# fuzz.sh [SECONDS | --ci] [TARGET...] - build the libFuzzer harnesses
# (fuzz/, with clang, ASan and UBSan) in build-fuzz and run each for SECONDS
# (default 300): spec, idx, csv, safetensors, ckpt, onnx, img, tokfile.
#   scripts/fuzz.sh            5 minutes each; new inputs kept in build-fuzz/corpus/NAME
#   scripts/fuzz.sh 3600 csv   an hour on the CSV loader
#   scripts/fuzz.sh --ci       15 s each from the committed seeds only (scripts/test.sh);
#                              skipped, with a line saying so, without clang's libFuzzer
# The seeds are fuzz/corpus/NAME (committed, read-only here); a crash, a leak,
# undefined behaviour or a hang (10 s) stops that target with its input in
# build-fuzz/artifacts/NAME and makes the script fail. Each target's line
# says how many inputs ran.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=300
ci=0
if [ "${1:-}" = "--ci" ]; then
  ci=1
  secs=15
  shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  secs=$1
  shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(spec idx csv safetensors ckpt onnx img tokfile)

# clang with libFuzzer's runtime (Debian: clang-14, libclang-rt-14-dev; and
# libomp-14-dev for OpenMP under clang)
cc=$(command -v clang-14 || command -v clang || true)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' >"$probe/p.c"
if [ -z "$cc" ] || ! "$cc" -fsanitize=fuzzer,address "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
  why=${cc:+"$cc cannot link -fsanitize=fuzzer: $(head -1 "$probe/err")"}
  echo "fuzz: skipped: ${why:-no clang} (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)"
  [ "$ci" -eq 1 ] && exit 0
  exit 1
fi

dir=build-fuzz
mkdir -p "$dir"
if ! { cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBFIT_FUZZ=ON -DBFIT_TESTS=OFF \
  -DBFIT_CUDA=OFF && cmake --build "$dir" -j"$(nproc)" --target fuzzers; } >"$dir/build.log" 2>&1; then
  tail -n 40 "$dir/build.log" >&2
  echo "fuzz: the build failed (full output: $dir/build.log)" >&2
  exit 1
fi

failed=()
for t in "${targets[@]}"; do
  bin=$dir/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: no target '$t' (spec, idx, csv, safetensors, ckpt, onnx, img, tokfile)" >&2; exit 2; }
  art=$dir/artifacts/$t
  mkdir -p "$art"
  if [ "$ci" -eq 1 ]; then # what CI finds depends on the committed seeds only
    work=$(mktemp -d "$dir/ci-$t.XXXXXX")
  else
    work=$dir/corpus/$t
    mkdir -p "$work"
  fi
  log=$dir/fuzz-$t.log
  # one process; -timeout: an input that takes 10 s is a hang; the RSS limit
  # makes an allocation a hostile header asks for a finding, not a stall
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  echo "fuzz: $t: ${runs:-?} inputs in ${secs} s, coverage ${cov:-?} edges, corpus $(ls "$work" | wc -l) new: $status"
  if [ "$status" = FAILED ]; then
    grep -m1 -E "ERROR: |runtime error|SUMMARY" "$log" >&2 || true
    echo "fuzz: $t: the input is in $art (full output: $log)" >&2
  fi
  [ "$ci" -eq 1 ] && rm -rf "$work"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all targets ran clean"
