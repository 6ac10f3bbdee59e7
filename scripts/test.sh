#!/usr/bin/env bash
# test.sh - set up, build and run every test: once normally, once with the
# CPU device's opaque-memory checking mode (device memory inaccessible to the
# host outside device calls) and the CPU device's portable loops forced
# (BFIT_CPU_ISA=avx2: what a CPU without AVX-512 runs; the other passes run
# the AVX-512 variants where the CPU has them), once under AddressSanitizer +
# UndefinedBehaviorSanitizer; then every fuzz harness for a short fixed
# budget on its committed seeds (scripts/fuzz.sh --ci: 15 s each, skipped
# with a line saying so where clang's libFuzzer is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
# ctest -j2 runs two tests at once, each with two OpenMP threads: on two cores
# a thread that spins waiting for its team takes the core from the one doing
# the work. Sleeping waiters keep each test near its own CPU time (checking
# mode, test_token_budget at a load of 4: 4 min 15 s spinning, 1 min 15 s not).
export OMP_WAIT_POLICY=passive
scripts/setup.sh
scripts/build.sh build
(cd build && ctest --output-on-failure -j2)
(cd build && BFIT_DEVICE_CHECK=1 BFIT_CPU_ISA=avx2 ctest --output-on-failure -j2 -LE nocheck)
scripts/build.sh build-asan -DBFIT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would keep
# its guard (harmless without a GPU); the CUDA libraries' lifetime
# allocations are not our leaks
supp="$PWD/tests/lsan-cuda.supp"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 LSAN_OPTIONS="suppressions=$supp" \
  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j2 -LE nosan)
scripts/fuzz.sh --ci
