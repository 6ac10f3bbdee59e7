#!/usr/bin/env bash
# test.sh - set up, build and run every test, in three builds' worth of passes:
#  1. the Release build, every test (the AVX-512 loops where the CPU has them);
#  2. the ASan+UBSan build in the CPU device's opaque-memory checking mode
#     (device memory inaccessible to the host outside device calls) with the
#     portable loops and oneDNN's AVX2 kernels forced (BFIT_CPU_ISA=avx2,
#     ONEDNN_MAX_CPU_ISA=AVX2: what a CPU without AVX-512 runs): every test the sanitizers can run; the few they cannot (label
#     nosan: Python, the installed embedding, the GPU kit's dry run) run in
#     checking mode on the Release build, and the few too slow for checking
#     mode (label nocheck) under the sanitizers alone;
#  3. every fuzz harness for a short fixed budget on its committed seeds
#     (scripts/fuzz.sh --ci: 15 s each, skipped with a line saying so where
#     clang's libFuzzer is missing).
# Checking mode and the sanitizers were separate passes until 2026-11-26; one
# pass of both keeps the whole run under 30 minutes on two cores (checking
# mode's cost is system time for mprotect, which the sanitizers do not add to).
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
# ONEDNN_MAX_CPU_ISA=AVX2: oneDNN's kernels of a CPU without AVX-512 too,
# where bf16 is computed in f32 (src/device/cpu_bf16.c), on any machine
check=(env BFIT_DEVICE_CHECK=1 BFIT_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2)
(cd build && "${check[@]}" ctest --output-on-failure -j2 -L nosan -LE nocheck)
# (the ONNX exports are PyTorch's, the same for both builds: made once, in build/onnx)
scripts/build.sh build-asan -DBFIT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBFIT_ONNX_DIR="$PWD/build/onnx"
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would keep
# its guard (harmless without a GPU); the CUDA libraries' lifetime
# allocations are not our leaks
supp="$PWD/tests/lsan-cuda.supp"
san=(env ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 LSAN_OPTIONS="suppressions=$supp"
     UBSAN_OPTIONS=print_stacktrace=1)
(cd build-asan && "${san[@]}" "${check[@]}" ctest --output-on-failure -j2 -LE "nosan|nocheck")
(cd build-asan && "${san[@]}" ctest --output-on-failure -j2 -L nocheck -LE nosan)
scripts/fuzz.sh --ci
